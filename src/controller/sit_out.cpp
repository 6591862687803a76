#include "controller/sit_out.hpp"

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <limits>
#include <numeric>
#include <sstream>

#include "antdt/error.hpp"
#include "controller/controller.hpp"
#include "controller/planner.hpp"
#include "core/blob_fields.hpp"

namespace antdt::detail {

namespace {

constexpr std::uint32_t kMagic = 0x54554f53;  // "SOUT"
constexpr std::uint32_t kFormat = 2;          // 2: the step spans and the trials' measurements

// What SitOut saves, listed once for save and load (core/blob_fields.hpp).
struct Saved {
  std::int32_t window = 0;
  std::vector<double> waits;
  std::vector<std::int64_t> timed, sat_at, joined_at;
  std::vector<std::int32_t> positive, level;
  std::vector<double> x_at_sit;
  std::int32_t candidate = -1, streak = 0;
  std::int64_t sit_outs = 0, rejoins = 0;
  std::vector<double> spans, trial_base;
  std::int64_t spans_seen = 0;
  std::vector<double> trial_sum;

  template <class Self, class F>
  static void fields(Self& m, F&& f) {
    f(m.window), f(m.waits), f(m.timed), f(m.sat_at), f(m.joined_at), f(m.positive), f(m.level), f(m.x_at_sit),
        f(m.candidate), f(m.streak), f(m.sit_outs), f(m.rejoins), f(m.spans), f(m.spans_seen), f(m.trial_base),
        f(m.trial_sum);
  }
};

// The all-reduce of `ranks` ranks as a part of the measured one over `of` ranks: the
// alpha-beta model's ratio (a ring's 2 (p - 1) / p; nothing for one rank).
double allreduce_part(const CostModel& cost, int ranks, int of) {
  if (ranks <= 1) return 0.0;
  const double whole = cost.allreduce_seconds(of);
  return whole > 0.0 ? cost.allreduce_seconds(ranks) / whole : 1.0;
}

// The mean of entries at(0..filled) (in step order) less the run of a quarter of them,
// consecutive, that adds up to most (SitOut::trimmed_wait says why).
template <class At>
double mean_less_worst_quarter(std::size_t filled, At at) {
  if (filled == 0) return 0.0;
  const std::size_t dropped = filled / 4;
  double total = 0.0, run = 0.0, worst = 0.0;
  for (std::size_t k = 0; k < filled; ++k) {
    total += at(k);
    run += at(k);
    if (k >= dropped) run -= at(k - dropped);
    if (k + 1 >= dropped) worst = std::max(worst, run);
  }
  return std::max(0.0, total - worst) / static_cast<double>(filled - dropped);
}

std::vector<std::int32_t> with_rank(std::vector<std::int32_t> sitting, std::int32_t rank) {
  sitting.insert(std::upper_bound(sitting.begin(), sitting.end(), rank), rank);
  return sitting;
}

}  // namespace

void SitOut::resize(std::size_t n) {
  if (timed_.size() == n && window_ > 0) return;
  if (window_ < 1) window_ = 1;
  waits_.assign(n * static_cast<std::size_t>(window_), 0.0);
  positive_.assign(n, 0);
  timed_.assign(n, 0);
  sat_at_.assign(n, -1);
  joined_at_.assign(n, -1);
  level_.assign(n, 0);
  x_at_sit_.assign(n, 0.0);
  trial_base_.assign(n, 0.0);
  trial_sum_.assign(n, 0.0);
  spans_.assign(static_cast<std::size_t>(window_), 0.0);
  spans_seen_ = 0;
}

// The median span of the last window of steps (0 before any).
double SitOut::median_span() const {
  const auto filled = static_cast<std::size_t>(std::min<std::int64_t>(spans_seen_, window_));
  if (filled == 0) return 0.0;
  std::vector<double> v(spans_.begin(), spans_.begin() + static_cast<std::ptrdiff_t>(filled));
  const auto mid = v.begin() + static_cast<std::ptrdiff_t>(filled / 2);
  std::nth_element(v.begin(), mid, v.end());
  return *mid;
}

double SitOut::delay_seconds(int rank) const {
  const auto r = static_cast<std::size_t>(rank);
  return r < timed_.size() ? trimmed_wait(r) : 0.0;
}

// The mean of the rank's entries since it joined (at most a window, in step order) less the
// run of a quarter of them, consecutive, that adds up to most (waits are never negative; 0 at
// once for a rank that never waited: most ranks never do). A mean, since what the steps lose is
// the sum of the waits: a rank away for a few long steps in a row (another process holds its
// core for longer than a step) costs as much as one late by a little every step. Less the worst
// consecutive quarter, so that a transient of up to a quarter of the window (which pooled steps
// absorb, and which is over by the time a plan could act) never counts, while a rank away one
// step in every few, all through the window (a co-tenant's time slices), counts at its mean.
double SitOut::trimmed_wait(std::size_t rank) const {
  const auto w = static_cast<std::size_t>(window_);
  const auto filled = static_cast<std::size_t>(std::min<std::int64_t>(timed_[rank], window_));
  if (filled == 0 || positive_[rank] == 0) return 0.0;
  // Oldest first: the ring starts at slot 0 until it is full, then at the next slot to write.
  const std::size_t start = filled < w ? 0 : static_cast<std::size_t>(timed_[rank] % window_);
  return mean_less_worst_quarter(filled, [&](std::size_t k) { return waits_[rank * w + (start + k) % w]; });
}

// The spans of the last `steps` steps (at most a window), the same way.
double SitOut::trimmed_span(std::int64_t steps) const {
  const auto w = static_cast<std::size_t>(window_);
  const auto filled = static_cast<std::size_t>(std::min({steps, spans_seen_, std::int64_t{window_}}));
  const auto newest = static_cast<std::size_t>(spans_seen_ % window_);  // one past the newest
  return mean_less_worst_quarter(filled, [&](std::size_t k) { return spans_[(newest + w - filled + k) % w]; });
}

// The rank that arrived last at the reduction has the shortest reduce time; the step waited
// for it the difference to the next-shortest. What its predicted compute explains is taken off.
void SitOut::observe(std::int64_t /*step*/, std::span<const RankStepStats> stats, const Plan& plan,
                     std::span<const double> x, std::span<const double> fixed, int window) {
  const std::size_t n = stats.size();
  if (window_ != std::max(1, window)) {
    window_ = std::max(1, window);
    timed_.clear();
  }
  resize(n);
  std::size_t last = n, participants = 0;
  double shortest = std::numeric_limits<double>::infinity(), next = shortest, span = 0.0;
  for (std::size_t i = 0; i < n; ++i) {
    if (plan.sits_out(static_cast<int>(i))) continue;
    ++participants;
    const double r = stats[i].reduce_seconds;
    span = std::max(span, stats[i].data_wait_seconds + stats[i].compute_seconds + r);
    if (r < shortest) {
      next = shortest;
      shortest = r;
      last = i;
    } else if (r < next) {
      next = r;
    }
  }
  // The step's span: from a rank's start to the end of the reduction, the longest (the rank
  // that arrived first waited in the reduction for the last, wherever that one was held).
  spans_[static_cast<std::size_t>(spans_seen_ % window_)] = span;
  ++spans_seen_;
  if (participants < 2 || last == n) last = n;  // nobody waited for anyone
  double predicted_last = 0.0, predicted_others = 0.0;
  for (std::size_t i = 0; i < n && last < n; ++i) {
    if (plan.sits_out(static_cast<int>(i))) continue;
    const double t = x[i] > 0.0 ? CostModel::rank_compute_seconds(plan.batch[i], x[i], fixed[i]) : 0.0;
    if (i == last) {
      predicted_last = t;
    } else {
      predicted_others = std::max(predicted_others, t);
    }
  }
  const double waited = last == n ? 0.0 : next - shortest;
  const double unexplained = std::max(0.0, waited - std::max(0.0, predicted_last - predicted_others));
  const auto w = static_cast<std::size_t>(window_);
  for (std::size_t i = 0; i < n; ++i) {
    if (plan.sits_out(static_cast<int>(i))) continue;
    double& slot = waits_[i * w + static_cast<std::size_t>(timed_[i] % window_)];
    if (timed_[i] >= window_ && slot > 0.0) --positive_[i];
    slot = i == last ? unexplained : 0.0;
    if (slot > 0.0) ++positive_[i];
    // A trial's first window, less its first step, which carries the regroup (a communicator
    // made, the run's state sent, a napping rank woken): paid once, not each step it stays.
    if (joined_at_[i] >= 0 && timed_[i] >= 1 && timed_[i] < window_) trial_sum_[i] += span;
    ++timed_[i];
  }
}

double SitOut::trial_speed(std::span<const double> x, const std::vector<std::int32_t>& sitting, std::size_t rank,
                           std::int64_t batch) const {
  // The others that take part: their speeds, summed, and the median (what a rank that is back
  // would compute at).
  std::vector<double> others;
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (i != rank && !std::binary_search(sitting.begin(), sitting.end(), static_cast<std::int32_t>(i)) && x[i] > 0.0)
      others.push_back(x[i]);
  }
  const double last = x_at_sit_[rank];
  if (!(last > 0.0)) return x[rank];  // never timed when it sat out: what the Monitor has
  if (others.empty()) return last;
  const double sum = std::accumulate(others.begin(), others.end(), 0.0);
  std::nth_element(others.begin(), others.begin() + static_cast<std::ptrdiff_t>(others.size() / 2), others.end());
  const double back = others[others.size() / 2];
  // At most what its last speed computes in one step without it, so that a trial of a rank
  // still held back costs at most about one step more per step. A balanced split gives a rank
  // of speed v the share B v / (sum + v): the speed whose share is `cap` samples is
  // cap sum / (B - cap).
  const double span = median_span();
  const double cap = span > 0.0 ? last * span : 0.0;
  const auto b = static_cast<double>(batch);
  if (!(cap > 0.0) || cap >= b) return std::max(last, back);
  return std::max(last, std::min(back, cap * sum / (b - cap)));
}

std::int64_t SitOut::probe_steps(const ControllerContext& ctx, std::size_t rank) const {
  const double step = ctx.monitor.step_seconds();
  const double seconds = ctx.options.rejoin_after * std::exp2(static_cast<double>(level_[rank]));
  const double steps = step > 0.0 ? std::ceil(seconds / step) : 0.0;
  return std::max<std::int64_t>(ctx.options.window, static_cast<std::int64_t>(std::min(steps, 1e9)));
}

std::optional<Plan> SitOut::decide(const ControllerContext& ctx, std::span<const double> x,
                                   std::span<const double> fixed, double allreduce, int backup_workers) {
  const Plan& plan = ctx.plan;
  const int n = plan.world_size();
  resize(static_cast<std::size_t>(n));
  const auto& o = ctx.options;
  // A rank that rejoined and stayed a window has paid: its next sit-out starts the intervals over.
  for (int i = 0; i < n; ++i) {
    const auto r = static_cast<std::size_t>(i);
    if (!plan.sits_out(i) && joined_at_[r] >= 0 && ctx.step - joined_at_[r] >= probe_steps(ctx, r)) {
      level_[r] = 0;
      joined_at_[r] = -1;
    }
  }
  // 1. A rank out for its probe interval rejoins for a trial, with the share its last speed earns.
  for (const std::int32_t rank : plan.sitting) {
    const auto r = static_cast<std::size_t>(rank);
    if (ctx.step - sat_at_[r] < probe_steps(ctx, r)) continue;
    std::vector<std::int32_t> sitting;
    for (const auto s : plan.sitting)
      if (s != rank) sitting.push_back(s);
    std::vector<double> xs(x.begin(), x.end());
    xs[r] = trial_speed(x, plan.sitting, r, o.global_batch);
    Plan next = plan_split_without(o.global_batch, xs, o.caps, ctx.effective_step(), fixed, sitting);
    std::ostringstream why;
    why << "rank " << rank << " rejoins for a trial after " << ctx.step - sat_at_[r] << " steps out";
    next.reason = why.str();
    joined_at_[r] = ctx.step;
    timed_[r] = 0;
    positive_[r] = 0;
    trial_base_[r] = median_span();  // the steps without it, to hold the trial's steps to
    trial_sum_[r] = 0.0;
    candidate_ = -1;
    streak_ = 0;
    ++rejoins_;
    return next;
  }
  // 2. A trial judged as measured: from its third step to the end of its first window, once its
  // steps after the first took longer on average than the steps without it by more than min_gain, the rank
  // sits out again (whatever the cost model makes of it: a rank that is away looks slow to it,
  // and a rebalance would keep offering it samples).
  const int active = n - static_cast<int>(plan.sitting.size());
  for (int i = 1; i < n; ++i) {
    const auto r = static_cast<std::size_t>(i);
    if (joined_at_[r] < 0 || plan.sits_out(i) || timed_[r] < 3 || timed_[r] > window_ || !(trial_base_[r] > 0.0))
      continue;
    const double mean = trial_sum_[r] / static_cast<double>(timed_[r] - 1);
    if (mean <= trial_base_[r] * (1.0 + o.min_gain) || backup_workers <= 0 ||
        static_cast<int>(plan.sitting.size()) >= backup_workers || active < 2)
      continue;
    Plan next = plan_split_without(o.global_batch, x, o.caps, ctx.effective_step(), fixed, with_rank(plan.sitting, i));
    std::ostringstream why;
    why << std::setprecision(4) << "rank " << i << " sits out again: its trial's " << timed_[r] - 1
        << " steps after the first took " << mean << " s on average, the steps without it " << trial_base_[r] << " s";
    next.reason = why.str();
    sat_out(r, ctx.step, x[r]);
    return next;
  }
  // 3. The rank whose absence would shorten the step most, if that clears the bar long enough.
  if (backup_workers <= 0 || static_cast<int>(plan.sitting.size()) >= backup_workers || active < 2 ||
      !(ctx.monitor.median_throughput() > 0.0)) {
    streak_ = 0;
    return std::nullopt;
  }
  const double reduce = allreduce >= 0.0 ? allreduce : ctx.cost.allreduce_seconds(active);
  // With the rank: the better of the plan in force and the best split of B over every rank that
  // takes part (a rebalance, which dd makes without anyone sitting out).
  const double now = std::min(ctx.cost.predict_compute_seconds(plan, x, fixed),
                              continuous_split_seconds_without(o.global_batch, x, fixed, plan.sitting)) +
                     reduce;
  const double reduce_without = reduce * allreduce_part(ctx.cost, active - 1, active);
  // The candidates (a handful, so that this stays O(ranks) at scale): every rank the steps
  // waited for, the slowest by the cost model and the one that brings the fewest samples per
  // second. Leaving out any other only gives the rest more work for the same reduction.
  std::vector<int> candidates;
  int slowest = -1, least = -1;
  double slowest_t = -1.0, least_x = 0.0;
  for (int i = 1; i < n; ++i) {
    const auto r = static_cast<std::size_t>(i);
    if (plan.sits_out(i) || timed_[r] < 2 ||
        std::binary_search(o.never_sit_out.begin(), o.never_sit_out.end(), static_cast<std::int32_t>(i)))
      continue;
    // Waited for more than once, beyond one quarter of the window: a handful at most (a rank
    // the steps waited for once, as one of 100,000 noisy ranks is, is none).
    if (trimmed_wait(r) > 0.0) candidates.push_back(i);
    const double t = CostModel::rank_compute_seconds(plan.batch[r], x[r], fixed[r]);
    if (t > slowest_t) slowest_t = t, slowest = i;
    if (least < 0 || x[r] < least_x) least_x = x[r], least = i;
  }
  for (const int i : {slowest, least})
    if (i > 0 && std::find(candidates.begin(), candidates.end(), i) == candidates.end()) candidates.push_back(i);
  std::int32_t best = -1;
  double best_gain = 0.0, best_without = 0.0, best_with = 0.0;
  for (const int i : candidates) {
    const auto r = static_cast<std::size_t>(i);
    // What the steps take with it: the model's step plus its waits, or what they took, if less
    // (pooled steps absorb part of a rank's absence; a plain step's span is the model's plus them).
    const double modelled = now + trimmed_wait(r), spans = trimmed_span(timed_[r]);
    const double with = spans > 0.0 ? std::min(modelled, spans) : modelled;
    const double without =
        continuous_split_seconds_without(o.global_batch, x, fixed, with_rank(plan.sitting, i)) + reduce_without;
    const double gain = with > 0.0 ? (with - without) / with : 0.0;
    if (gain > best_gain) {
      best_gain = gain;
      best = i;
      best_without = without;
      best_with = with;
    }
  }
  if (best < 0 || best_gain <= o.min_gain) {
    streak_ = 0;
    candidate_ = -1;
    return std::nullopt;
  }
  streak_ = best == candidate_ ? streak_ + 1 : 1;
  candidate_ = best;
  // A trial is a measurement made on purpose: two steps of it decide (not `persistence`).
  const auto r = static_cast<std::size_t>(best);
  if (streak_ < (joined_at_[r] >= 0 ? std::min(2, o.persistence) : o.persistence)) return std::nullopt;
  Plan next = plan_split_without(o.global_batch, x, o.caps, ctx.effective_step(), fixed, with_rank(plan.sitting, best));
  std::ostringstream why;
  why << std::setprecision(4) << "rank " << best << " sits out: predicted step " << best_with << " s (waited "
      << trimmed_wait(r) << " s a step beyond its compute) -> " << best_without << " s without it (gain "
      << std::setprecision(3) << 100.0 * best_gain << "% > " << 100.0 * o.min_gain << "% for " << streak_ << " steps)";
  next.reason = why.str();
  sat_out(r, ctx.step, x[r]);
  return next;
}

void SitOut::sat_out(std::size_t rank, std::int64_t step, double x) {
  // Out again within a window of a trial: it did not pay; the next trial waits twice as long.
  // Its speed is the better of the one it sat out with and its trial's: a trial's steps carry
  // the regroup (a new communicator, the state it is sent), and a speed read from them alone
  // shrank each next trial's share until no trial could show a rank that is back.
  if (joined_at_[rank] >= 0) {
    level_[rank] = std::min(kMaxLevel, level_[rank] + 1);
    x_at_sit_[rank] = std::max(x_at_sit_[rank], x);
  } else {
    x_at_sit_[rank] = x;
  }
  joined_at_[rank] = -1;
  sat_at_[rank] = step;
  trial_sum_[rank] = 0.0;
  streak_ = 0;
  candidate_ = -1;
  ++sit_outs_;
}

std::vector<std::byte> SitOut::save() const {
  return write_blob(kMagic, kFormat,
                    Saved{window_, waits_, timed_, sat_at_, joined_at_, positive_, level_, x_at_sit_, candidate_,
                          streak_, sit_outs_, rejoins_, spans_, trial_base_, spans_seen_, trial_sum_});
}

void SitOut::load(std::span<const std::byte> bytes, int world) {
  *this = SitOut{};
  if (bytes.empty()) return;
  auto s = read_blob<Saved>(bytes, kMagic, kFormat, "sit-out state", "resume with the antdt that wrote it");
  const auto n = static_cast<std::size_t>(world);
  if (s.sit_outs < 0 || s.rejoins < 0) throw CheckpointError("sit-out state: a count out of range");
  sit_outs_ = s.sit_outs;
  rejoins_ = s.rejoins;
  if (s.window < 1 || s.waits.size() != n * static_cast<std::size_t>(s.window) || s.timed.size() != n ||
      s.sat_at.size() != n || s.joined_at.size() != n || s.positive.size() != n || s.level.size() != n ||
      s.x_at_sit.size() != n || s.spans.size() != static_cast<std::size_t>(s.window) || s.trial_base.size() != n ||
      s.trial_sum.size() != n || s.spans_seen < 0) {
    return;  // never observed, or another world size: the per-rank history does not carry over
  }
  const bool sane = std::all_of(s.waits.begin(), s.waits.end(), [](double d) { return d >= 0.0 && d < 1e9; }) &&
                    std::all_of(s.timed.begin(), s.timed.end(), [](std::int64_t t) { return t >= 0; }) &&
                    std::all_of(s.positive.begin(), s.positive.end(), [&](int p) { return p >= 0 && p <= s.window; }) &&
                    std::all_of(s.level.begin(), s.level.end(), [](int l) { return l >= 0 && l <= kMaxLevel; }) &&
                    s.sit_outs >= 0 && s.rejoins >= 0 && s.streak >= 0;
  if (!sane) throw CheckpointError("sit-out state: a delay, level or count out of range");
  window_ = s.window;
  waits_ = std::move(s.waits);
  positive_ = std::move(s.positive);
  timed_ = std::move(s.timed);
  sat_at_ = std::move(s.sat_at);
  joined_at_ = std::move(s.joined_at);
  level_ = std::move(s.level);
  x_at_sit_ = std::move(s.x_at_sit);
  spans_ = std::move(s.spans);
  spans_seen_ = s.spans_seen;
  trial_base_ = std::move(s.trial_base);
  trial_sum_ = std::move(s.trial_sum);
  candidate_ = s.candidate;
  streak_ = s.streak;
  sit_outs_ = s.sit_outs;
  rejoins_ = s.rejoins;
}

}  // namespace antdt::detail
