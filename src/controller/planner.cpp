// Cost model and planner. The planner solves the continuous problem first (water-filling:
// every rank finishes at the same time T, b_i = (T - a_i) x_i, ranks that would get less than
// the floor are pinned to it), rounds to integers by largest remainder so the global batch is
// kept exactly, and then moves single samples off the rank with the largest predicted time
// while that lowers the predicted maximum (or the number of ranks at it). With no overhead
// this is the LB-BSP / AntDT-DD split b_i = B x_i / sum x, and the local search only fixes
// rounding.
#include "controller/planner.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <numeric>
#include <sstream>
#include <string>

#include "antdt/error.hpp"
#include "core/plan_rules.hpp"
#include "core/step_record.hpp"
#include "monitor/robust_stats.hpp"

namespace antdt {

namespace {

std::vector<std::int64_t> expand_caps(std::span<const std::int64_t> caps, std::size_t n) {
  if (caps.size() == 1) return std::vector<std::int64_t>(n, caps[0]);
  if (caps.size() != n) {
    throw UsageError("micro-batch caps: got " + std::to_string(caps.size()) + " values for " + std::to_string(n) +
                     " ranks; give one value for all ranks or one per rank");
  }
  return {caps.begin(), caps.end()};
}

void check_per_rank(std::span<const double> v, std::size_t n, const char* what) {
  if (!v.empty() && v.size() != n) {
    throw UsageError(std::string(what) + ": got " + std::to_string(v.size()) + " values for " + std::to_string(n) +
                     " ranks");
  }
}

double overhead_of(std::span<const double> overhead, std::size_t i) { return overhead.empty() ? 0.0 : overhead[i]; }

}  // namespace

double CostModel::allreduce_seconds(int p) const noexcept {
  if (p <= 1) return 0.0;
  const double fraction = 2.0 * static_cast<double>(p - 1) / static_cast<double>(p);
  return params_.alpha + fraction * static_cast<double>(params_.gradient_bytes) * params_.beta;
}

double CostModel::rank_compute_seconds(std::int64_t b, double x, double overhead) noexcept {
  if (b <= 0) return 0.0;
  if (!(x > 0.0)) return std::numeric_limits<double>::infinity();
  // A fitted compute model may have a negative fixed part (the cost per sample grows with the
  // batch); far below the batches it was fitted on it would predict negative time.
  return std::max(0.0, overhead + static_cast<double>(b) / x);
}

std::vector<double> CostModel::predict_rank_seconds(const Plan& plan, std::span<const double> x,
                                                    std::span<const double> overhead) const {
  const auto n = plan.batch.size();
  if (x.size() != n) {
    throw UsageError("cost model: got " + std::to_string(x.size()) + " throughputs for " + std::to_string(n) +
                     " ranks");
  }
  check_per_rank(overhead, n, "cost model overheads");
  std::vector<double> t(n);
  for (std::size_t i = 0; i < n; ++i) t[i] = rank_compute_seconds(plan.batch[i], x[i], overhead_of(overhead, i));
  return t;
}

double CostModel::predict_compute_seconds(const Plan& plan, std::span<const double> x,
                                          std::span<const double> overhead) const {
  const auto n = plan.batch.size();
  if (x.size() != n) {
    throw UsageError("cost model: got " + std::to_string(x.size()) + " throughputs for " + std::to_string(n) +
                     " ranks");
  }
  check_per_rank(overhead, n, "cost model overheads");
  double slowest = 0.0;
  for (std::size_t i = 0; i < n; ++i)
    slowest = std::max(slowest, rank_compute_seconds(plan.batch[i], x[i], overhead_of(overhead, i)));
  return slowest;
}

double CostModel::predict_step_seconds(const Plan& plan, std::span<const double> x, std::span<const double> overhead,
                                       double allreduce) const {
  return predict_compute_seconds(plan, x, overhead) +
         (allreduce >= 0.0 ? allreduce : allreduce_seconds(plan.world_size()));
}

namespace {

void check_split_input(std::int64_t global_batch, std::span<const double> x, std::span<const double> overhead,
                       const char* who) {
  const std::size_t n = x.size();
  if (n == 0) throw UsageError(std::string(who) + ": no ranks (empty throughput list)");
  if (global_batch < 1)
    throw UsageError(std::string(who) + ": the global batch must be at least 1, got " + std::to_string(global_batch));
  for (std::size_t i = 0; i < n; ++i) {
    if (!std::isfinite(x[i]) || x[i] <= 0.0) {
      throw UsageError(std::string(who) + ": throughput of rank " + std::to_string(i) +
                       " must be finite and > 0, got " + std::to_string(x[i]));
    }
  }
  check_per_rank(overhead, n, who);
  for (std::size_t i = 0; i < overhead.size(); ++i) {
    if (!std::isfinite(overhead[i]))
      throw UsageError(std::string(who) + ": the fixed seconds of rank " + std::to_string(i) + " are not finite");
  }
}

std::int64_t floor_of(std::int64_t global_batch, std::size_t n) {
  // Every rank works when there is enough work for all (invariant 3).
  return global_batch >= static_cast<std::int64_t>(n) ? 1 : 0;
}

// Continuous water-filling with pinned ranks: every unpinned rank finishes at the same time,
// b_i = (T - a_i) x_i; ranks that would get less than the floor are pinned to it.
std::vector<double> water_fill(std::int64_t global_batch, std::span<const double> x, std::span<const double> overhead) {
  const std::size_t n = x.size();
  const auto a = [&](std::size_t i) { return overhead_of(overhead, i); };
  const std::int64_t floor_b = floor_of(global_batch, n);
  std::vector<double> share(n, 0.0);
  std::vector<bool> pinned(n, false);
  for (std::size_t round = 0; round <= n; ++round) {
    double free_batch = static_cast<double>(global_batch);
    double sum_x = 0.0;
    double sum_ax = 0.0;
    for (std::size_t i = 0; i < n; ++i) {
      if (pinned[i]) {
        free_batch -= static_cast<double>(floor_b);
      } else {
        sum_x += x[i];
        sum_ax += a(i) * x[i];
      }
    }
    if (sum_x <= 0.0) break;
    const double finish = (free_batch + sum_ax) / sum_x;
    bool changed = false;
    for (std::size_t i = 0; i < n; ++i) {
      if (pinned[i]) {
        share[i] = static_cast<double>(floor_b);
        continue;
      }
      share[i] = (finish - a(i)) * x[i];
      if (share[i] < static_cast<double>(floor_b)) {
        pinned[i] = true;
        changed = true;
      }
    }
    if (!changed) break;
  }
  return share;
}

}  // namespace

double continuous_split_seconds(std::int64_t global_batch, std::span<const double> x,
                                std::span<const double> overhead) {
  check_split_input(global_batch, x, overhead, "continuous_split_seconds");
  const std::vector<double> share = water_fill(global_batch, x, overhead);
  const std::int64_t floor_b = floor_of(global_batch, x.size());
  double slowest = 0.0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double b = std::max(share[i], static_cast<double>(floor_b));
    if (b > 0.0) slowest = std::max(slowest, std::max(0.0, overhead_of(overhead, i) + b / x[i]));
  }
  return slowest;
}

namespace {

// The entries of the ranks that do not sit out, in rank order.
struct Active {
  std::vector<std::size_t> ranks;
  std::vector<double> x, overhead;
  std::vector<std::int64_t> caps;
};

Active active_of(std::span<const double> x, std::span<const double> overhead, std::span<const std::int64_t> caps,
                 std::span<const std::int32_t> sitting) {
  Active a;
  for (std::size_t i = 0, k = 0; i < x.size(); ++i) {
    if (k < sitting.size() && static_cast<std::size_t>(sitting[k]) == i) {
      ++k;
      continue;
    }
    a.ranks.push_back(i);
    a.x.push_back(x[i]);
    if (!overhead.empty()) a.overhead.push_back(overhead[i]);
    if (caps.size() > 1) a.caps.push_back(caps[i]);
  }
  if (caps.size() == 1) a.caps.push_back(caps[0]);
  if (a.ranks.empty()) throw UsageError("plan_split_without: every rank sits out");
  return a;
}

}  // namespace

Plan plan_split_without(std::int64_t global_batch, std::span<const double> x, std::span<const std::int64_t> caps,
                        std::int64_t effective_step, std::span<const double> overhead,
                        std::span<const std::int32_t> sitting) {
  if (sitting.empty()) return plan_split(global_batch, x, caps, effective_step, overhead);
  const Active a = active_of(x, overhead, caps, sitting);
  const Plan part = plan_split(global_batch, a.x, a.caps, effective_step, a.overhead);
  Plan p = part;
  const std::size_t n = x.size();
  p.batch.assign(n, 0);
  p.micro_batch_cap = expand_caps(caps, n);
  p.accumulation.assign(n, 0);
  for (std::size_t k = 0; k < a.ranks.size(); ++k) {
    p.batch[a.ranks[k]] = part.batch[k];
    p.accumulation[a.ranks[k]] = part.accumulation[k];
  }
  p.sitting.assign(sitting.begin(), sitting.end());
  return p;
}

double continuous_split_seconds_without(std::int64_t global_batch, std::span<const double> x,
                                        std::span<const double> overhead, std::span<const std::int32_t> sitting) {
  if (sitting.empty()) return continuous_split_seconds(global_batch, x, overhead);
  const Active a = active_of(x, overhead, {}, sitting);
  return continuous_split_seconds(global_batch, a.x, a.overhead);
}

Plan plan_split(std::int64_t global_batch, std::span<const double> x, std::span<const std::int64_t> caps,
                std::int64_t effective_step, std::span<const double> overhead) {
  check_split_input(global_batch, x, overhead, "plan_split");
  const std::size_t n = x.size();
  const auto caps_n = expand_caps(caps, n);
  const auto a = [&](std::size_t i) { return overhead_of(overhead, i); };
  const std::int64_t floor_b = floor_of(global_batch, n);

  // 1. Continuous water-filling with pinned ranks.
  const std::vector<double> share = water_fill(global_batch, x, overhead);

  // 2. Largest-remainder rounding; ties go to the lower rank so the result is deterministic.
  std::vector<std::int64_t> b(n);
  std::vector<double> remainder(n);
  std::int64_t assigned = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const double s = std::max(share[i], static_cast<double>(floor_b));
    b[i] = std::max(floor_b, static_cast<std::int64_t>(std::floor(s)));
    remainder[i] = s - std::floor(s);
    assigned += b[i];
  }
  std::vector<std::size_t> order(n);
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t l, std::size_t r) { return remainder[l] > remainder[r]; });
  for (std::size_t k = 0; assigned < global_batch; k = (k + 1) % n, ++assigned) ++b[order[k]];
  while (assigned > global_batch) {  // only from floating-point excess: take from the largest
    const auto it = std::max_element(b.begin(), b.end());
    --*it;
    --assigned;
  }

  // 3. Local improvement: move one sample from the slowest rank (the lowest such rank on ties)
  // to the rank where it costs least (again the lowest on ties). Two heaps with lazy deletion
  // find both in O(log n) per move: each entry carries the batch it was computed for and is
  // skipped once that rank's batch has moved on. The moves are those of scanning every rank.
  const auto t_of = [&](std::size_t i, std::int64_t bi) { return CostModel::rank_compute_seconds(bi, x[i], a(i)); };
  struct Entry {
    double t;
    std::size_t rank;
    std::int64_t batch;
  };
  const auto slower = [](const Entry& l, const Entry& r) { return l.t < r.t || (l.t == r.t && l.rank > r.rank); };
  const auto costlier = [](const Entry& l, const Entry& r) { return l.t > r.t || (l.t == r.t && l.rank > r.rank); };
  std::vector<Entry> by_time, by_next;  // max-heap of t_i(b_i); min-heap of t_j(b_j + 1)
  by_time.reserve(n + 64);
  by_next.reserve(n + 64);
  for (std::size_t i = 0; i < n; ++i) {
    by_time.push_back({t_of(i, b[i]), i, b[i]});
    by_next.push_back({t_of(i, b[i] + 1), i, b[i]});
  }
  std::make_heap(by_time.begin(), by_time.end(), slower);
  std::make_heap(by_next.begin(), by_next.end(), costlier);
  const auto pop = [](std::vector<Entry>& heap, const auto& cmp) {
    std::pop_heap(heap.begin(), heap.end(), cmp);
    heap.pop_back();
  };
  const auto push = [](std::vector<Entry>& heap, const auto& cmp, Entry e) {
    heap.push_back(e);
    std::push_heap(heap.begin(), heap.end(), cmp);
  };
  const auto drop_stale = [&](std::vector<Entry>& heap, const auto& cmp) {
    while (!heap.empty() && heap.front().batch != b[heap.front().rank]) pop(heap, cmp);
  };
  std::vector<Entry> set_aside;
  for (std::int64_t moves = 0; moves < global_batch + static_cast<std::int64_t>(n); ++moves) {
    drop_stale(by_time, slower);
    const std::size_t slowest = by_time.front().rank;
    if (b[slowest] - 1 < floor_b) break;
    // The cheapest rank other than the slowest one.
    drop_stale(by_next, costlier);
    set_aside.clear();
    while (!by_next.empty() && by_next.front().rank == slowest) {
      set_aside.push_back(by_next.front());
      pop(by_next, costlier);
      drop_stale(by_next, costlier);
    }
    const bool found = !by_next.empty();
    const std::size_t target = found ? by_next.front().rank : n;
    const double target_t = found ? by_next.front().t : std::numeric_limits<double>::infinity();
    for (const Entry& e : set_aside) push(by_next, costlier, e);
    // Accept a move only if neither end reaches the current maximum: then the maximum drops,
    // or the number of ranks at it does (ties), so the loop ends at the integer optimum: while
    // the max exceeds it, some rank j can take one more sample and stay below the max.
    const double current_max = t_of(slowest, b[slowest]);
    if (target == n || !(target_t < current_max) || !(t_of(slowest, b[slowest] - 1) < current_max)) break;
    --b[slowest];
    ++b[target];
    for (const std::size_t i : {slowest, target}) {
      push(by_time, slower, {t_of(i, b[i]), i, b[i]});
      push(by_next, costlier, {t_of(i, b[i] + 1), i, b[i]});
    }
  }

  Plan plan;
  plan.effective_step = effective_step;
  plan.global_batch = global_batch;
  plan.batch = std::move(b);
  plan.micro_batch_cap = caps_n;
  update_accumulation(plan);
  plan.reason = "split in proportion to throughput";
  return plan;
}

double gpu_relative_throughput(int compute_capability, std::string_view name) noexcept {
  // Rough dense-training priors relative to A100 = 1.0 (see docs/controller.md). Longer names
  // first where one is a prefix of another (A100 before A10, L40S before L40 before L4).
  struct NamedPrior {
    const char* key;
    double relative;
  };
  static constexpr NamedPrior kByName[] = {
      {"H200", 2.2}, {"H100", 2.0}, {"GH200", 2.2}, {"A100", 1.0}, {"A800", 1.0}, {"A30", 0.6},  {"A40", 0.6},
      {"A10", 0.45}, {"L40S", 1.1}, {"L40", 0.8},   {"L4", 0.3},   {"T4", 0.15},  {"V100", 0.5}, {"P100", 0.25},
  };
  std::string upper;
  upper.reserve(name.size());
  for (const char c : name) upper.push_back(static_cast<char>(std::toupper(static_cast<unsigned char>(c))));
  // Match whole tokens: "A10" must not match "A100", "L4" must not match "L40".
  const auto has_token = [&](std::string_view key) {
    for (std::size_t pos = upper.find(key); pos != std::string::npos; pos = upper.find(key, pos + 1)) {
      const std::size_t end = pos + key.size();
      const bool left_ok = pos == 0 || !std::isalnum(static_cast<unsigned char>(upper[pos - 1]));
      const bool right_ok = end == upper.size() || !std::isalnum(static_cast<unsigned char>(upper[end]));
      if (left_ok && right_ok) return true;
    }
    return false;
  };
  for (const auto& p : kByName) {
    if (has_token(p.key)) return p.relative;
  }
  switch (compute_capability) {
    case 60:
      return 0.25;  // Pascal P100
    case 70:
      return 0.5;  // Volta V100
    case 75:
      return 0.15;  // Turing T4
    case 80:
      return 1.0;  // Ampere A100
    case 86:
      return 0.45;  // Ampere A10 / A40 / RTX 30
    case 89:
      return 0.5;  // Ada: L4 (0.3) to L40S (1.1); the name is the better guide
    case 90:
      return 2.0;  // Hopper H100 / H200
    default:
      return 0.0;
  }
}

double probe_throughput(std::span<const RankStepStats> probe) noexcept {
  std::vector<double> x;
  for (const auto& s : probe) {
    if (s.samples > 0 && s.compute_seconds > 0.0) x.push_back(static_cast<double>(s.samples) / s.compute_seconds);
  }
  return detail::median(std::move(x));
}

Plan initial_plan(std::int64_t global_batch, std::span<const double> probe_x, std::span<const std::int64_t> caps,
                  std::span<const double> priors, std::int64_t effective_step) {
  const std::size_t n = probe_x.size();
  if (n == 0) throw UsageError("initial_plan: no ranks (empty probe)");
  check_per_rank(priors, n, "initial_plan priors");
  const auto usable = [](double v) { return std::isfinite(v) && v > 0.0; };
  const auto prior = [&](std::size_t i) { return priors.empty() ? 0.0 : priors[i]; };

  std::vector<double> ratios;  // probe / prior where a rank has both: samples/s per prior unit
  std::size_t probed = 0;
  std::size_t from_prior = 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (usable(probe_x[i])) {
      ++probed;
      if (usable(prior(i))) ratios.push_back(probe_x[i] / prior(i));
    }
  }
  const double scale = ratios.empty() ? (probed == 0 ? 1.0 : 0.0) : detail::median(ratios);
  std::vector<double> x(n, 0.0);
  for (std::size_t i = 0; i < n; ++i) {
    if (usable(probe_x[i])) {
      x[i] = probe_x[i];
    } else if (usable(prior(i)) && scale > 0.0) {
      x[i] = prior(i) * scale;
      ++from_prior;
    }
  }
  std::vector<double> known;
  for (const double v : x) {
    if (v > 0.0) known.push_back(v);
  }
  if (known.empty()) {
    Plan p = equal_plan(global_batch, expand_caps(caps, n), effective_step);
    p.reason = "initial: equal split (no probe, no priors)";
    return p;
  }
  const double fill = detail::median(known);
  std::size_t filled = 0;
  for (double& v : x) {
    if (!(v > 0.0)) {
      v = fill;
      ++filled;
    }
  }
  Plan p = plan_split(global_batch, x, caps, effective_step);
  std::ostringstream reason;
  reason << "initial: split by startup probe of " << probed << " of " << n << " ranks";
  if (from_prior > 0) reason << ", GPU-generation priors for " << from_prior;
  if (filled > 0) reason << ", median throughput for " << filled;
  p.reason = reason.str();
  return p;
}

}  // namespace antdt
