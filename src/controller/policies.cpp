// The policy registry and the two built-in policies.
//
// static: the plain-BSP baseline. Never changes the plan it was given.
//
// dd (AntDT-DD, LB-BSP): split the global batch in proportion to each rank's throughput
// estimate x_i = max(window median, best of its last `persistence` steps) (plan_split, with
// the median data wait as fixed per-step overhead) and switch only when all of these hold:
//   - every rank with work has timing in the Monitor window;
//   - the cost model predicts the candidate is faster than the current plan by more than
//     min_gain (hysteresis: measurement noise alone predicts gains of a few percent);
//   - that has been true for `persistence` consecutive steps. With the estimate above, a
//     slowdown must last about 2 x persistence - 1 steps AND hold half the window (to move the
//     median) before it changes the plan; shorter transients never do;
//   - at least min_interval steps have passed since the last change.
// The gain streak is the policy's only state and goes into the checkpoint.
#include <algorithm>
#include <iomanip>
#include <limits>
#include <map>
#include <mutex>
#include <sstream>

#include "antdt/controller.hpp"
#include "antdt/error.hpp"
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
    std::vector<double> x = monitor.throughputs();
    for (int i = 0; i < n; ++i) {
      if (monitor.has_throughput(i)) {
        // A slowdown counts only once the rank has been slow in each of the last `persistence`
        // steps: until then its best recent step caps how far its median can pull it down.
        // (A long transient can drag a window median down while the rank is fast again; a
        // change made then would be followed by a change back.)
        x[static_cast<std::size_t>(i)] =
            std::max(x[static_cast<std::size_t>(i)], monitor.recent_peak(i, ctx.options.persistence));
        continue;
      }
      // A rank with work but no timing yet: wait. A rank without work (B < world) cannot be
      // timed; assume the median so that it is not starved forever.
      if (ctx.plan.batch[static_cast<std::size_t>(i)] > 0) {
        gain_streak_ = 0;
        return std::nullopt;
      }
      x[static_cast<std::size_t>(i)] = fill;
    }
    const std::vector<double> overhead = monitor.data_wait_seconds();
    Plan candidate = plan_split(ctx.options.global_batch, x, ctx.options.caps, ctx.effective_step(), overhead);
    const double now = ctx.cost.predict_step_seconds(ctx.plan, x, overhead);
    const double next = ctx.cost.predict_step_seconds(candidate, x, overhead);
    const double gain = now > 0.0 ? (now - next) / now : 0.0;
    if (gain > ctx.options.min_gain && candidate.batch != ctx.plan.batch) {
      ++gain_streak_;
    } else {
      gain_streak_ = 0;
    }
    if (gain_streak_ < ctx.options.persistence) return std::nullopt;
    if (ctx.last_change_step >= 0 && ctx.step - ctx.last_change_step < ctx.options.min_interval) return std::nullopt;

    std::ostringstream reason;
    reason << std::setprecision(4) << "dd: predicted step " << now << " s -> " << next << " s (gain "
           << std::setprecision(3) << 100.0 * gain << "% > " << 100.0 * ctx.options.min_gain << "% for " << gain_streak_
           << " steps)";
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
    return candidate;
  }

  [[nodiscard]] std::vector<std::byte> save_state() const override {
    detail::ByteWriter w;
    w.put<std::int32_t>(gain_streak_);
    return w.take();
  }
  void load_state(std::span<const std::byte> state) override {
    if (state.empty()) return;
    detail::ByteReader r(state);
    const auto streak = r.get<std::int32_t>();
    // A streak counts steps and grows by one per step: negative or at INT_MAX it is corrupt.
    if (!r.done() || streak < 0 || streak == std::numeric_limits<std::int32_t>::max()) {
      throw CheckpointError("dd policy state: " + std::to_string(state.size()) + " bytes with gain streak " +
                            std::to_string(streak) + "; expected 4 bytes and a streak in [0, 2^31 - 1)");
    }
    gain_streak_ = streak;
  }

 private:
  int gain_streak_ = 0;
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
