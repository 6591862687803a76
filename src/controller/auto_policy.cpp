#include "controller/auto_policy.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "antdt/error.hpp"
#include "core/blob_fields.hpp"
#include "core/step_record.hpp"
#include "monitor/robust_stats.hpp"

namespace antdt::detail {

namespace {

constexpr std::uint32_t kStateMagic = 0x4f545541;  // "AUTO"
constexpr std::uint32_t kStateFormat = 2;          // 2: a switch may be a trial
// The most a trial of plain steps may be predicted to lose, for e to be measured: it lasts
// min_interval steps at least, so it costs at most about this over them.
constexpr double kTrialLoss = 0.1;
constexpr double kSwitchDampingHalfLife = 5.0;  // windows, as dd's
constexpr int kMeasuredSteps = 3;               // steps of a mode before o or e is measured from them
// e outside this range is a measurement gone wrong (a change of conditions across the switch).
// (Above 1 would mean small chunks run faster than whole shares: noise, taken as 1.)
constexpr double kMinEfficiency = 0.25, kMaxEfficiency = 1.0;

}  // namespace

// What auto saves: dd's state and its own, each listed once (core/blob_fields.hpp).
struct AutoPolicy::Saved {
  std::vector<std::byte> dd;
  State state;

  template <class Self, class F>
  static void fields(Self& m, F&& f) {
    f(m.dd), f(m.state);
  }
};

// This step as the mode decision sees it; what each rank did stays in the Monitor's window.
void AutoPolicy::observe(const ControllerContext& ctx) {
  const Monitor& m = ctx.monitor;
  if (m.entries() == 0) return;
  Sample s;
  s.pooled = ctx.pooled_step;
  s.seconds = m.last_compute_seconds();
  for (int i = 0; i < m.world_size(); ++i) {
    const RankStepStats& st = m.recent(i);
    s.samples += static_cast<double>(st.samples);
    // A rank without timed samples this step (a pooled step's pool drained before its claim)
    // counts at its usual speed; one never timed, not at all.
    s.speed_sum += st.samples > 0 && st.compute_seconds > 0.0 ? static_cast<double>(st.samples) / st.compute_seconds
                                                              : m.throughput(i);
  }
  st_.ring.push_back(s);
  if (static_cast<int>(st_.ring.size()) > ctx.options.window) st_.ring.erase(st_.ring.begin());
  // The Monitor may hold fewer steps (a restore onto a new window): only steps both hold count.
  if (static_cast<int>(st_.ring.size()) > m.entries()) st_.ring.erase(st_.ring.begin(), st_.ring.end() - m.entries());
  (s.pooled ? st_.pooled_steps : st_.plain_steps) += 1;
  if (!plain_raw_.empty()) plain_raw_.push_back(plain_seconds(m, ctx.plan, 0));
  if (plain_raw_.size() > st_.ring.size()) plain_raw_.erase(plain_raw_.begin(), plain_raw_.end() - st_.ring.size());
}

double AutoPolicy::plain_seconds(const Monitor& m, const Plan& plan, int age) {
  double slowest = 0.0;
  for (int i = 0; i < m.world_size(); ++i) {
    const auto b = static_cast<double>(plan.batch[static_cast<std::size_t>(i)]);
    if (!(b > 0.0)) continue;
    const RankStepStats& st = m.recent(i, age);
    const double x = st.samples > 0 && st.compute_seconds > 0.0 ? static_cast<double>(st.samples) / st.compute_seconds
                                                                : m.throughput(i);
    if (x > 0.0) slowest = std::max(slowest, b / x);
  }
  return slowest;
}

// o from the pooled steps in the window; e, when the window holds both modes, as the median over
// the ranks of each rank's median speed in pooled steps over its median in plain ones (per rank,
// so that the transients that made a switch, which slow some ranks in some steps, do not move it).
void AutoPolicy::measure(const Monitor& m) {
  std::vector<double> overheads;
  int pooled = 0, plain = 0;
  for (const Sample& s : st_.ring) {
    if (!(s.speed_sum > 0.0 && s.samples > 0.0 && s.seconds > 0.0)) continue;
    if (s.pooled) {
      overheads.push_back(std::max(0.0, s.seconds * s.speed_sum / s.samples - 1.0));
      ++pooled;
    } else {
      ++plain;
    }
  }
  if (static_cast<int>(overheads.size()) >= kMeasuredSteps) {
    st_.overhead = median(overheads);
    st_.overhead_measured = true;
  }
  if (pooled < kMeasuredSteps || plain < kMeasuredSteps) return;
  // O(ranks x window): only as the steps of the mode switched to reach 3, 6 and 12 (not at every
  // step while the window holds both modes; at 10,000 ranks each is a few milliseconds).
  const int newer = st_.ring.back().pooled ? pooled : plain;
  if (newer != kMeasuredSteps && newer != 2 * kMeasuredSteps && newer != 4 * kMeasuredSteps) return;
  std::vector<double> ratios, in_pooled, in_plain;
  const auto n = st_.ring.size();
  for (int i = 0; i < m.world_size(); ++i) {
    in_pooled.clear();
    in_plain.clear();
    for (std::size_t k = 0; k < n; ++k) {
      const RankStepStats& st = m.recent(i, static_cast<int>(n - 1 - k));
      if (st.samples > 0 && st.compute_seconds > 0.0)
        (st_.ring[k].pooled ? in_pooled : in_plain).push_back(static_cast<double>(st.samples) / st.compute_seconds);
    }
    if (static_cast<int>(in_pooled.size()) >= kMeasuredSteps && static_cast<int>(in_plain.size()) >= kMeasuredSteps)
      ratios.push_back(median_in_place(in_pooled) / median_in_place(in_plain));
  }
  if (ratios.empty()) return;
  st_.efficiency = std::clamp(median(ratios), kMinEfficiency, kMaxEfficiency);
  st_.efficiency_measured = true;
}

// The decision model's error: each recorded step's own mode's formula against its measured
// time, the median over the window. A pooled step's formula is (1 + o) B_k / sum_i x_ik; a
// plain step's is its slowest rank's compute (the model leaves out the data waits).
void AutoPolicy::measure_error(const Monitor& m) {
  std::vector<double> errors;
  const auto n = st_.ring.size();
  for (std::size_t k = 0; k < n; ++k) {
    const Sample& s = st_.ring[k];
    double own = 0.0;
    if (s.pooled) {
      own = s.speed_sum > 0.0 ? (1.0 + st_.overhead) * s.samples / s.speed_sum : 0.0;
    } else {
      for (int i = 0; i < m.world_size(); ++i)
        own = std::max(own, m.recent(i, static_cast<int>(n - 1 - k)).compute_seconds);
    }
    if (s.seconds > 0.0 && own > 0.0) errors.push_back(std::abs(own - s.seconds) / s.seconds);
  }
  st_.error = median(errors);
}

double AutoPolicy::switch_damping_at(const ControllerContext& ctx, bool to_pooled) const {
  const auto k = static_cast<std::size_t>(to_pooled);
  if (!(st_.damping[k] > 0.0) || st_.damping_step[k] < 0) return 0.0;
  const double windows = static_cast<double>(ctx.step - st_.damping_step[k]) / static_cast<double>(ctx.options.window);
  return st_.damping[k] * std::exp2(-windows / kSwitchDampingHalfLife);
}

// The predicted relative drop of the mean step over the window if its steps had been in the
// other mode, and the bar it must clear.
AutoPolicy::Outlook AutoPolicy::outlook(const ControllerContext& ctx, bool to_pooled) const {
  Outlook o;
  const auto n = st_.ring.size();
  if (n < 2 || plain_raw_.size() != n) return o;
  const auto global_batch = static_cast<double>(ctx.options.global_batch);
  double sum_plain = 0.0, sum_pool = 0.0;
  std::vector<double> d;
  d.reserve(n);
  for (std::size_t k = 0; k < n; ++k) {
    const Sample& s = st_.ring[k];
    if (!(s.speed_sum > 0.0)) continue;
    // In plain-step speeds: a pooled step's ranks ran at e times them.
    const double plain = plain_raw_[k] * (s.pooled ? st_.efficiency : 1.0);
    const double pool = (1.0 + st_.overhead) * global_batch / (s.speed_sum * (s.pooled ? 1.0 : st_.efficiency));
    sum_plain += plain;
    sum_pool += pool;
    d.push_back(to_pooled ? plain - pool : pool - plain);
  }
  if (d.size() < 2) return o;
  const double m = static_cast<double>(d.size());
  const double base = (to_pooled ? sum_plain : sum_pool) / m;
  double mean = 0.0, var = 0.0;
  for (const double v : d) mean += v;
  mean /= m;
  for (const double v : d) var += (v - mean) * (v - mean);
  var /= m - 1.0;
  o.steps = static_cast<int>(d.size());
  o.plain = sum_plain / m;
  o.pool = sum_pool / m;
  o.gain = mean / base;
  o.noise = 2.0 * std::sqrt(var / m) / base;
  o.error = st_.error;
  const double damping = switch_damping_at(ctx, to_pooled);
  o.required = std::max({ctx.options.min_pool_gain, o.error, o.noise, damping});
  o.why = o.required == ctx.options.min_pool_gain ? "min pool gain"
          : o.required == o.error                 ? "the decision model's error"
          : o.required == o.noise                 ? "twice the standard error of the gain"
                                                  : "damped after a switch that did not deliver";
  return o;
}

// Half a window after a switch took effect, its gain is measured with what is known now: the
// predicted gain of switching back, with o and e as measured since. A switch that delivered
// less than half its predicted gain leaves that gain as the damping of the next switch the same
// way (not of the way back, which would keep a wrong switch in force).
void AutoPolicy::check_switch(const ControllerContext& ctx) {
  st_.check_pending = false;
  if (st_.switches.empty()) return;
  const Switch& last = st_.switches.back();
  const Outlook back = outlook(ctx, !last.pooled);
  const double realized = -back.gain;
  if (last.trial || realized >= 0.5 * last.predicted_gain) return;
  const auto k = static_cast<std::size_t>(last.pooled);
  st_.damping[k] = std::min(1.0, std::max(switch_damping_at(ctx, last.pooled), last.predicted_gain));
  st_.damping_step[k] = ctx.step;
}

std::optional<Plan> AutoPolicy::decide(const ControllerContext& ctx) {
  observe(ctx);
  measure(ctx.monitor);
  measure_error(ctx.monitor);
  const bool mode = ctx.plan.pooled;  // of the latest plan
  // dd's split. In pooled steps the cost model's error is not the plain steps' (it predicts plain
  // steps from pooled ones): dd is held to the decision model's error instead. A split's gain
  // cannot be measured in pooled steps (the pool balances them anyway), so it is not checked
  // there: it shows in the plain steps' prediction.
  ControllerContext dd_context = ctx;
  if (ctx.pooled_step) dd_context.model_error = st_.error;
  std::optional<Plan> split = DdPolicy::decide(dd_context);
  if (split && ctx.pooled_step) forget_pending_check();
  // The plain steps' predictions use the split of the latest plan (a new one's from now on).
  if (split_version_ != ctx.plan.version || plain_raw_.size() != st_.ring.size()) {
    plain_raw_.clear();
    for (std::size_t k = 0; k < st_.ring.size(); ++k)
      plain_raw_.push_back(plain_seconds(ctx.monitor, ctx.plan, static_cast<int>(st_.ring.size() - 1 - k)));
    split_version_ = ctx.plan.version;
  }
  if (st_.check_pending && ctx.step >= st_.check_step) check_switch(ctx);
  bool flip = false, trial = false;
  // Nothing while a switch is on its way, or before the window holds `persistence` steps.
  if (ctx.plan.effective_step <= ctx.step && static_cast<int>(st_.ring.size()) >= ctx.options.persistence) {
    last_ = outlook(ctx, !mode);
    st_.streak = last_.gain > last_.required ? st_.streak + 1 : 0;
    const int needed = mode ? ctx.options.persistence : std::min(2, ctx.options.persistence);
    flip = st_.streak >= needed && (st_.last_switch < 0 || ctx.step - st_.last_switch >= ctx.options.min_interval);
    // The trial: pooled for a whole window, e never measured, plain steps not predicted to lose
    // more than kTrialLoss.
    trial = !flip && mode && !st_.efficiency_measured && static_cast<int>(st_.ring.size()) >= ctx.options.window &&
            std::all_of(st_.ring.begin(), st_.ring.end(), [](const Sample& s) { return s.pooled; }) &&
            last_.gain > -kTrialLoss;
    flip = flip || trial;
  } else {
    st_.streak = 0;
  }
  if (!split && !flip) return std::nullopt;
  Plan next = split ? std::move(*split) : ctx.plan;
  next.pooled = flip ? !mode : mode;
  std::string rebalance;
  if (split)
    rebalance = "rebalance (" + (next.reason.rfind("dd: ", 0) == 0 ? next.reason.substr(4) : next.reason) + ")";
  if (!flip) {
    next.reason = "auto: " + rebalance;
    return next;
  }
  char buf[640];
  std::snprintf(buf, sizeof buf,
                "auto: %s steps: over the last %d steps, a plain step with this split takes %.4g s on average and "
                "a pooled one %.4g s%s; predicted gain %.3g%% > required %.3g%% (%s) for %d steps; pool overhead "
                "o %.3g%% (%s), chunk efficiency e %.3g (%s)",
                next.pooled ? "pooled" : "plain", last_.steps, last_.plain, last_.pool,
                next.pooled ? " (transients, or a split that no longer fits)" : "", 100.0 * last_.gain,
                100.0 * last_.required, last_.why, st_.streak, 100.0 * st_.overhead,
                st_.overhead_measured ? "measured" : "not yet measured", st_.efficiency,
                st_.efficiency_measured ? "measured" : "not yet measured");
  next.reason = buf;
  if (trial) {
    std::snprintf(buf, sizeof buf,
                  "auto: plain steps, a trial: the pooled chunks' efficiency e is not yet measured and plain steps "
                  "are predicted within %.3g%% of pooled ones (%.4g s against %.4g s over the last %d steps; "
                  "pool overhead o %.3g%%)",
                  100.0 * kTrialLoss, last_.plain, last_.pool, last_.steps, 100.0 * st_.overhead);
    next.reason = buf;
  }
  if (split) next.reason += "; and " + rebalance;
  st_.switches.push_back(Switch{ctx.step, ctx.effective_step(), next.pooled, trial, last_.gain, last_.required,
                                st_.overhead, st_.efficiency});
  forget_pending_check();  // dd's check would compare steps of two modes
  st_.last_switch = ctx.step;
  st_.streak = 0;
  st_.check_pending = true;
  st_.check_step = ctx.effective_step() + std::max(ctx.options.persistence, ctx.options.window / 2) - 1;
  return next;
}

// A restart that pays its measured cost must also promise more than the model's measured error
// (and the min gain), as a plan change must: the throughputs it compares are the model's.
bool AutoPolicy::accept_restart(const RestartDecision& decision, const ControllerContext& ctx) {
  if (!(decision.x_after > 0.0)) return false;
  const double relative = 1.0 - decision.x_now / decision.x_after;
  return relative > std::max(ctx.options.min_gain, ctx.model_error);
}

PoolingStatus AutoPolicy::pooling_status() const {
  PoolingStatus s;
  s.chooses = true;
  s.pooled_steps = st_.pooled_steps;
  s.plain_steps = st_.plain_steps;
  s.pool_overhead = st_.overhead;
  s.overhead_measured = st_.overhead_measured;
  s.chunk_efficiency = st_.efficiency;
  s.efficiency_measured = st_.efficiency_measured;
  s.model_error = last_.error;
  s.predicted_gain = last_.gain;
  s.required_gain = last_.required;
  for (const Switch& w : st_.switches) {
    s.switches.push_back(PoolingSwitch{w.step, w.effective_step, w.pooled, w.trial, w.predicted_gain, w.required_gain,
                                       w.pool_overhead, w.chunk_efficiency});
  }
  return s;
}

std::vector<std::byte> AutoPolicy::save_state() const {
  return write_blob(kStateMagic, kStateFormat, Saved{DdPolicy::save_state(), st_});
}

void AutoPolicy::load_state(std::span<const std::byte> bytes) {
  if (bytes.empty()) return;
  Saved s = read_blob<Saved>(bytes, kStateMagic, kStateFormat, "auto policy state",
                             "it was written by an older antdt: resume with that version, or start afresh");
  const State& t = s.state;
  const auto finite_ratio = [](double v) { return std::isfinite(v) && v >= 0.0 && v <= 1e6; };
  bool ok = t.damping.size() == 2 && t.damping_step.size() == 2 && t.streak >= 0 &&
            t.streak < std::numeric_limits<std::int32_t>::max() && t.last_switch >= -1 && t.pooled_steps >= 0 &&
            t.plain_steps >= 0 && finite_ratio(t.overhead) && finite_ratio(t.error) && t.efficiency >= kMinEfficiency &&
            t.efficiency <= kMaxEfficiency;
  for (const Sample& r : t.ring) {
    ok = ok && std::isfinite(r.speed_sum) && r.speed_sum >= 0.0 && std::isfinite(r.seconds) && r.seconds >= 0.0 &&
         std::isfinite(r.samples) && r.samples >= 0.0;
  }
  for (std::size_t k = 0; ok && k < 2; ++k) ok = t.damping[k] >= 0.0 && t.damping[k] <= 1.0 && t.damping_step[k] >= -1;
  if (!ok) throw CheckpointError("auto policy state: a value is out of range");
  DdPolicy::load_state(s.dd);
  st_ = std::move(s.state);
  plain_raw_.clear();  // rebuilt from the Monitor at the next step
  split_version_ = -1;
}

}  // namespace antdt::detail
