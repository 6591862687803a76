#include "controller/dd_policy.hpp"

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <limits>
#include <sstream>

#include "antdt/error.hpp"
#include "controller/model_inputs.hpp"
#include "core/blob_fields.hpp"

namespace antdt::detail {

std::optional<Plan> DdPolicy::decide(const ControllerContext& ctx) {
  const Monitor& monitor = ctx.monitor;
  const int n = monitor.world_size();
  const double fill = monitor.median_throughput();
  if (!(fill > 0.0)) {
    gain_streak_ = 0;
    return std::nullopt;
  }
  x_.resize(static_cast<std::size_t>(n));
  fixed_.resize(static_cast<std::size_t>(n));
  const auto& sitting = ctx.plan.sitting;  // they stay out: the sit-out decides their return
  for (int i = 0; i < n; ++i) {
    const auto r = static_cast<std::size_t>(i);
    if (ctx.plan.sits_out(i)) {
      x_[r] = fill;
      fixed_[r] = 0.0;
      continue;
    }
    if (monitor.has_throughput(i)) {
      // A rank fast again after a long transient (which dragged its window median down)
      // plans at its recent speed (detail::rank_model): a change made on the dragged median
      // would be followed by a change back. Only a jump well beyond noise counts (the best
      // of five noisy steps is the noise, and it made gains out of nothing on real compute).
      const detail::RankModel m = detail::rank_model(monitor, i, ctx.options.persistence);
      x_[r] = m.throughput > 0.0 ? m.throughput : fill;
      fixed_[r] = m.fixed;
      continue;
    }
    // A rank with work but no timing yet: wait. A rank without work (B < world) cannot be
    // timed; assume the median so that it is not starved forever.
    if (ctx.plan.batch[r] > 0) {
      gain_streak_ = 0;
      return std::nullopt;
    }
    x_[r] = fill;
    fixed_[r] = monitor.data_wait_seconds(i);
  }
  const double allreduce = detail::measured_allreduce(monitor);
  const double now = ctx.cost.predict_step_seconds(ctx.plan, x_, fixed_, allreduce);
  if (check_.pending && ctx.step >= check_.due_step) check_change(ctx);
  const double noise = estimate_noise(ctx, now - (allreduce >= 0.0 ? allreduce : ctx.cost.allreduce_seconds(n)));
  const double damping = damping_at(ctx);
  double required = std::max({ctx.options.min_gain, ctx.model_error, noise, damping});
  // No integer plan beats the continuous optimum: below the bar, there is nothing to build.
  const double bound = continuous_split_seconds_without(ctx.options.global_batch, x_, fixed_, sitting) +
                       (allreduce >= 0.0 ? allreduce : ctx.cost.allreduce_seconds(n));
  if (!(now > 0.0) || (now - bound) / now <= required - 1e-12) {
    gain_streak_ = 0;
    return std::nullopt;
  }
  // Past the first bar, the noise of all the ranks' estimates (O(n), so only here): the
  // slowest of n noisy window medians is an outlier of that noise, and a plan that
  // balances the medians gains nothing real from it.
  const double spread_noise = estimates_noise(ctx);
  if (spread_noise > required) {
    required = spread_noise;
    if ((now - bound) / now <= required - 1e-12) {
      gain_streak_ = 0;
      return std::nullopt;
    }
  }
  Plan candidate =
      plan_split_without(ctx.options.global_batch, x_, ctx.options.caps, ctx.effective_step(), fixed_, sitting);
  const double next = ctx.cost.predict_step_seconds(candidate, x_, fixed_, allreduce);
  const double gain = now > 0.0 ? (now - next) / now : 0.0;
  if (gain > required && candidate.batch != ctx.plan.batch) {
    ++gain_streak_;
  } else {
    gain_streak_ = 0;
  }
  if (gain_streak_ < ctx.options.persistence) return std::nullopt;
  if (ctx.last_change_step >= 0 && ctx.step - ctx.last_change_step < ctx.options.min_interval) return std::nullopt;

  std::ostringstream reason;
  reason << std::setprecision(4) << "dd: predicted step " << now << " s -> " << next << " s (gain "
         << std::setprecision(3) << 100.0 * gain << "% > " << 100.0 * required << "% for " << gain_streak_ << " steps)";
  if (required > ctx.options.min_gain) {
    reason << " [required: "
           << (required == ctx.model_error ? "the model's error"
               : required == noise         ? "the noise of the slowest rank's estimate"
               : required == spread_noise  ? "the noise of the ranks' estimates"
                                           : "damped after a change")
           << "; min gain " << 100.0 * ctx.options.min_gain << "%]";
  }
  constexpr int kListed = 8;  // keep the reason one readable line on large worlds
  int listed = 0;
  int unlisted = 0;
  for (int i = 0; i < n; ++i) {
    const RankAssessment& a = ctx.assessments[static_cast<std::size_t>(i)];
    if (a.kind == RankClass::normal) continue;
    if (listed == kListed) {
      ++unlisted;
      continue;
    }
    reason << (listed == 0 ? "; " : ", ") << "rank " << i << " " << rank_class_name(a.kind) << " ("
           << std::setprecision(3) << a.relative << "x)";
    ++listed;
  }
  if (unlisted > 0) reason << " and " << unlisted << " more";
  candidate.reason = reason.str();
  gain_streak_ = 0;
  expect(ctx, candidate, gain);
  return candidate;
}

namespace {

// What dd saves, listed once for save_state and load_state (core/blob_fields.hpp).
constexpr std::uint32_t kStateMagic = 0x32504444;  // "DDP2"
constexpr std::uint32_t kStateFormat = 3;          // 3: one field list

}  // namespace

struct DdPolicy::Saved {
  std::int32_t gain_streak = 0;
  double damping = 0.0;
  std::int64_t damping_step = -1;
  Check check;

  template <class Self, class F>
  static void fields(Self& m, F&& f) {
    f(m.gain_streak), f(m.damping), f(m.damping_step), f(m.check);
  }
};

std::vector<std::byte> DdPolicy::save_state() const {
  return write_blob(kStateMagic, kStateFormat, Saved{gain_streak_, damping_, damping_step_, check_});
}

void DdPolicy::load_state(std::span<const std::byte> state) {
  if (state.empty()) return;
  const auto s = read_blob<Saved>(state, kStateMagic, kStateFormat, "dd policy state",
                                  "it was written by an older antdt: resume with that version, or start afresh");
  // A streak counts steps and grows by one per step: negative or at INT_MAX it is corrupt.
  if (s.gain_streak < 0 || s.gain_streak == std::numeric_limits<std::int32_t>::max() ||
      !(s.damping >= 0.0 && s.damping <= 1.0) || s.damping_step < -1 || s.check.steps < 0 ||
      !(std::abs(s.check.predicted_gain) <= 1.0) || !(s.check.before_seconds >= 0.0)) {
    throw CheckpointError("dd policy state: a gain streak, damping or pending check out of range");
  }
  gain_streak_ = s.gain_streak;
  damping_ = s.damping;
  damping_step_ = s.damping_step;
  check_ = s.check;
}

// How much of a predicted gain the noise of the estimates alone could make: the predicted
// step is the largest of the ranks' predicted times, and the largest of n noisy estimates
// sits above the truth. The slowest rank's estimate has a relative standard error of
// 1.2533 x 1.4826 x (MAD / median) / sqrt(timed steps) (a median of its window); noise can
// put it sqrt(2 ln n) standard errors high, and the gain must clear two more.
double DdPolicy::estimate_noise(const ControllerContext& ctx, double slowest_seconds) const {
  const int n = ctx.monitor.world_size();
  int slowest = -1;
  for (int i = 0; i < n; ++i) {
    const auto r = static_cast<std::size_t>(i);
    if (CostModel::rank_compute_seconds(ctx.plan.batch[r], x_[r], fixed_[r]) >= slowest_seconds) {
      slowest = i;
      break;
    }
  }
  if (slowest < 0 || !ctx.monitor.has_throughput(slowest)) return 0.0;
  const RankWindowSummary s = ctx.monitor.summary(slowest);
  if (s.timed_entries < 2) return 0.0;
  const double se = 1.2533 * 1.4826 * s.spread / std::sqrt(static_cast<double>(s.timed_entries));
  return (2.0 + std::sqrt(2.0 * std::log(static_cast<double>(std::max(2, n))))) * se;
}

// What the noise of the ranks' window medians alone could predict as a gain: the typical
// relative deviation of a rank's last step from its window median (their median over the
// ranks, robust to the few in a transient) gives each median's standard error se, and the
// largest of n such errors is about sqrt(2 ln n) se; plus 2 se of margin, as for the
// slowest rank alone. (sqrt(4 ln n), for the noise of the medians the plan in force was
// balanced on as well, also blocked the changes that refine a first plan made on a few
// steps: at 10,000 simulated ranks with 5 % jitter 0.897 settled instead of 0.909.) O(n).
double DdPolicy::estimates_noise(const ControllerContext& ctx) {
  const Monitor& m = ctx.monitor;
  const int n = m.world_size();
  deviations_.clear();
  for (int i = 0; i < n; ++i) {
    const double median = m.throughput(i), last = m.last_throughput(i);
    if (median > 0.0 && last > 0.0) deviations_.push_back(std::abs(last / median - 1.0));
  }
  if (deviations_.size() < 2 || m.entries() < 2) return 0.0;
  const auto mid = deviations_.begin() + static_cast<std::ptrdiff_t>(deviations_.size() / 2);
  std::nth_element(deviations_.begin(), mid, deviations_.end());
  const double se = 1.2533 * 1.4826 * *mid / std::sqrt(static_cast<double>(m.entries()));
  return (2.0 + std::sqrt(2.0 * std::log(static_cast<double>(std::max(2, n))))) * se;
}

double DdPolicy::damping_at(const ControllerContext& ctx) const {
  if (!(damping_ > 0.0) || damping_step_ < 0) return 0.0;
  const double windows = static_cast<double>(ctx.step - damping_step_) / static_cast<double>(ctx.options.window);
  return damping_ * std::exp2(-windows / kDampingHalfLife);
}

// Remembers what the change to `next` must deliver.
void DdPolicy::expect(const ControllerContext& ctx, const Plan& next, double gain) {
  const int steps = std::max(ctx.options.persistence, ctx.options.window / 2);
  // Under the plan it replaces: the steps since that plan took effect (up to `steps`).
  const std::int64_t under_old = ctx.step + 1 - ctx.plan.effective_step;
  const int before_steps =
      static_cast<int>(std::min<std::int64_t>({steps, under_old, static_cast<std::int64_t>(ctx.monitor.entries())}));
  check_.before_seconds =
      before_steps >= 3 ? ctx.monitor.recent_step_seconds(before_steps) : ctx.monitor.step_seconds();
  check_.pending = true;
  check_.steps = steps;
  check_.due_step = next.effective_step + steps - 1;
  check_.predicted_gain = gain;
}

// The measurement of the last change. One that delivered less than half its predicted gain
// leaves its gain as the damping. No revert: the measurement is as noisy as the steps it
// covers (a transient during it looks like a failed change), and a revert to a plan made for
// older conditions is itself an unchecked change; the model, fed the new steps, proposes
// the way back if there is one, and it must then clear the damped bar.
void DdPolicy::check_change(const ControllerContext& ctx) {
  check_.pending = false;
  const double after = ctx.monitor.recent_step_seconds(check_.steps);
  if (!(after > 0.0) || !(check_.before_seconds > 0.0)) return;
  const double realized = (check_.before_seconds - after) / check_.before_seconds;
  if (realized >= 0.5 * check_.predicted_gain) return;
  // A change that failed while the damping of an earlier failure was still about its size
  // cleared the bar only just: the same illusion again (at 10,000 ranks with transients a
  // new rank's dragged median promised 50 % every 15 steps). Twice the bar then, so that it
  // takes a half-life of the damping for the next try.
  const double in_force = damping_at(ctx);
  damping_ = in_force >= 0.5 * check_.predicted_gain ? std::min(1.0, 2.0 * std::max(in_force, check_.predicted_gain))
                                                     : std::max(in_force, check_.predicted_gain);
  damping_step_ = ctx.step;
}

}  // namespace antdt::detail
