// The policy registry and the built-in policies.
//
// static: the plain-BSP baseline. Never changes the plan it was given.
//
// dd (AntDT-DD, LB-BSP): split the global batch to balance each rank's fitted compute model,
// t_i(b) = a_i + b / x_i (Monitor::compute_model; a_i its data wait plus the model's fixed
// part; x_i its recent speed instead when it is clearly fast again, detail::rank_model), and
// switch only when
// all of these hold:
//   - every rank with work has timing in the Monitor window;
//   - the cost model predicts the candidate faster than the current plan by more than the
//     required gain: the largest of min_gain, the model's own measured error (the window
//     median of its relative error on the part of the step a split changes), what the noise
//     of the slowest rank's estimate alone could predict (estimate_noise), the damping
//     left by a change that did not deliver (below) and, once the continuous bound clears
//     those, what the noise of all the ranks' estimates could predict at this world size
//     (estimates_noise: at scale the slowest of n noisy medians is always an outlier);
//   - that has been true for `persistence` consecutive steps. With the estimate above, a
//     slowdown must last about 2 x persistence - 1 steps AND hold half the window (to move the
//     median) before it changes the plan; shorter transients never do;
//   - at least min_interval steps have passed since the last change.
// The gain is first tested against the continuous optimum (continuous_split_seconds, O(n)):
// no integer plan beats it, so most steps never build one (plan_split is O(n log n)).
//
// Every change is checked once it has run for max(persistence, window / 2) steps: the measured
// gain is the drop of the median step time against the steps before the change. A change that
// delivered less than half its predicted gain sets the damping to that predicted gain: the
// next change must promise more (the damping halves every kDampingHalfLife windows).
// The gain streak, the damping and the pending check are the policy's state, in its checkpoint.
#include <algorithm>
#include <cmath>
#include <iomanip>
#include <limits>
#include <map>
#include <mutex>
#include <sstream>

#include "antdt/error.hpp"
#include "controller/controller.hpp"
#include "controller/model_inputs.hpp"
#include "core/bytes.hpp"

namespace antdt {

PolicyPlugin::~PolicyPlugin() = default;

namespace {

class StaticPolicy final : public PolicyPlugin {
 public:
  [[nodiscard]] std::string name() const override { return "static"; }
  [[nodiscard]] std::optional<Plan> decide(const ControllerContext& /*context*/) override { return std::nullopt; }
  [[nodiscard]] bool rebalances() const override { return false; }
};

class DdPolicy : public PolicyPlugin {
 public:
  [[nodiscard]] std::string name() const override { return "dd"; }

  [[nodiscard]] std::optional<Plan> decide(const ControllerContext& ctx) override {
    const Monitor& monitor = ctx.monitor;
    const int n = monitor.world_size();
    const double fill = monitor.median_throughput();
    if (!(fill > 0.0)) {
      gain_streak_ = 0;
      return std::nullopt;
    }
    x_.resize(static_cast<std::size_t>(n));
    fixed_.resize(static_cast<std::size_t>(n));
    for (int i = 0; i < n; ++i) {
      const auto r = static_cast<std::size_t>(i);
      if (monitor.has_throughput(i)) {
        // A rank fast again after a long transient (which dragged its window median down)
        // plans at its recent speed (detail::rank_model): a change made on the dragged median
        // would be followed by a change back. Only a jump well beyond noise counts (the best
        // of five noisy steps is the noise, and it made gains out of nothing on real compute).
        const detail::RankModel m = detail::rank_model(monitor, i, ctx.options.persistence);
        x_[r] = m.throughput;
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
    const double bound = continuous_split_seconds(ctx.options.global_batch, x_, fixed_) +
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
    Plan candidate = plan_split(ctx.options.global_batch, x_, ctx.options.caps, ctx.effective_step(), fixed_);
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
           << std::setprecision(3) << 100.0 * gain << "% > " << 100.0 * required << "% for " << gain_streak_
           << " steps)";
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

  [[nodiscard]] std::vector<std::byte> save_state() const override {
    detail::ByteWriter w;
    w.put<std::int32_t>(gain_streak_);
    w.put(kStateTag);
    w.put(damping_);
    w.put(damping_step_);
    w.put<std::uint8_t>(check_.pending ? 1 : 0);
    w.put(check_.due_step);
    w.put(check_.steps);
    w.put(check_.predicted_gain);
    w.put(check_.before_seconds);
    return w.take();
  }
  void load_state(std::span<const std::byte> state) override {
    if (state.empty()) return;
    try {
      detail::ByteReader r(state);
      const auto streak = r.get<std::int32_t>();
      // A streak counts steps and grows by one per step: negative or at INT_MAX it is corrupt.
      if (streak < 0 || streak == std::numeric_limits<std::int32_t>::max()) throw Error("bad gain streak");
      Check check;
      double damping = 0.0;
      std::int64_t damping_step = -1;
      if (!r.done()) {  // a 4-byte state is a checkpoint from before the damping and the check
        if (r.get<std::uint32_t>() != kStateTag) throw Error("bad tag");
        damping = r.get<double>();
        damping_step = r.get<std::int64_t>();
        check.pending = r.get<std::uint8_t>() != 0;
        check.due_step = r.get<std::int64_t>();
        check.steps = r.get<std::int32_t>();
        check.predicted_gain = r.get<double>();
        check.before_seconds = r.get<double>();
        if (!r.done() || !(damping >= 0.0 && damping <= 1.0) || damping_step < -1 || check.steps < 0 ||
            !(std::abs(check.predicted_gain) <= 1.0) || !(check.before_seconds >= 0.0))
          throw Error("values out of range");
      }
      gain_streak_ = streak;
      damping_ = damping;
      damping_step_ = damping_step;
      check_ = std::move(check);
    } catch (const Error& e) {
      throw CheckpointError("dd policy state: " + std::to_string(state.size()) + " bytes that do not parse (" +
                            e.what() + "); expected a gain streak in [0, 2^31 - 1), then the damping and the check");
    }
  }

 private:
  static constexpr std::uint32_t kStateTag = 0x32504444;  // "DDP2"
  static constexpr double kDampingHalfLife = 5.0;         // windows

  // A change waiting to be measured.
  struct Check {
    bool pending = false;
    std::int64_t due_step = 0;  // the step whose stats complete its measurement
    std::int32_t steps = 0;     // steps under the new plan it is measured over
    double predicted_gain = 0.0;
    double before_seconds = 0.0;  // measured median step time under the plan it replaced
  };

  // How much of a predicted gain the noise of the estimates alone could make: the predicted
  // step is the largest of the ranks' predicted times, and the largest of n noisy estimates
  // sits above the truth. The slowest rank's estimate has a relative standard error of
  // 1.2533 x 1.4826 x (MAD / median) / sqrt(timed steps) (a median of its window); noise can
  // put it sqrt(2 ln n) standard errors high, and the gain must clear two more.
  [[nodiscard]] double estimate_noise(const ControllerContext& ctx, double slowest_seconds) const {
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
  [[nodiscard]] double estimates_noise(const ControllerContext& ctx) {
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

  [[nodiscard]] double damping_at(const ControllerContext& ctx) const {
    if (!(damping_ > 0.0) || damping_step_ < 0) return 0.0;
    const double windows = static_cast<double>(ctx.step - damping_step_) / static_cast<double>(ctx.options.window);
    return damping_ * std::exp2(-windows / kDampingHalfLife);
  }

  // Remembers what the change to `next` must deliver.
  void expect(const ControllerContext& ctx, const Plan& next, double gain) {
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
  void check_change(const ControllerContext& ctx) {
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

  int gain_streak_ = 0;
  double damping_ = 0.0;            // the required gain a change that did not deliver left behind
  std::int64_t damping_step_ = -1;  // when it was set
  Check check_;
  std::vector<double> x_, fixed_;   // scratch: the cost model's inputs this step
  std::vector<double> deviations_;  // scratch of estimates_noise
};

// nd (AntDT-ND, docs/nd.md): steps are pooled, so transient slowness is absorbed within the
// step by the other ranks' claims; the shares (which size chunks and grants) follow dd's
// rebalancing of deterministic and persistent slowness; lasting contention (a persistent
// straggler) ends in a kill-restart when that pays (Controller::consider_restart).
class NdPolicy final : public DdPolicy {
 public:
  [[nodiscard]] std::string name() const override { return "nd"; }
  [[nodiscard]] bool pools() const override { return true; }
  [[nodiscard]] bool restarts() const override { return true; }
};

struct Registry {
  std::mutex mutex;
  std::map<std::string, PolicyFactory> factories;
};

Registry& registry() {
  static Registry* r = [] {
    auto* reg = new Registry;  // never destroyed: usable from static destructors
    reg->factories["static"] = [] { return std::make_unique<StaticPolicy>(); };
    reg->factories["dd"] = [] { return std::make_unique<DdPolicy>(); };
    reg->factories["nd"] = [] { return std::make_unique<NdPolicy>(); };
    return reg;
  }();
  return *r;
}

}  // namespace

const char* rank_class_name(RankClass c) noexcept {
  switch (c) {
    case RankClass::normal:
      return "normal";
    case RankClass::leader:
      return "leader";
    case RankClass::transient_straggler:
      return "transient straggler";
    case RankClass::persistent_straggler:
      return "persistent straggler";
    case RankClass::deterministic_straggler:
      return "deterministic straggler";
  }
  return "?";
}

void register_policy(const std::string& name, PolicyFactory factory) {
  if (name.empty()) throw UsageError("register_policy: the policy name must not be empty");
  if (!factory) throw UsageError("register_policy: no factory given for policy '" + name + "'");
  Registry& r = registry();
  const std::lock_guard lock(r.mutex);
  r.factories[name] = std::move(factory);
}

std::vector<std::string> policy_names() {
  Registry& r = registry();
  const std::lock_guard lock(r.mutex);
  std::vector<std::string> names;
  for (const auto& [name, factory] : r.factories) names.push_back(name);
  return names;  // std::map keeps them sorted
}

std::unique_ptr<PolicyPlugin> make_policy(const std::string& name) {
  PolicyFactory factory;
  {
    Registry& r = registry();
    const std::lock_guard lock(r.mutex);
    if (const auto it = r.factories.find(name); it != r.factories.end()) factory = it->second;
  }
  if (!factory) {
    std::string known;
    for (const auto& n : policy_names()) known += (known.empty() ? "" : ", ") + n;
    throw UsageError("unknown controller policy '" + name + "'; known policies: " + known);
  }
  auto policy = factory();
  if (!policy) throw UsageError("the factory of policy '" + name + "' returned no policy");
  return policy;
}

bool policy_rebalances(const std::string& name) { return make_policy(name)->rebalances(); }
bool policy_pools(const std::string& name) { return make_policy(name)->pools(); }

}  // namespace antdt
