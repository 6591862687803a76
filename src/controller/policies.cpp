// The policy registry and the built-in policies: static (the plain-BSP baseline: never changes
// the plan it was given), dd (controller/dd_policy.hpp), nd (dd's shares, pooled steps and
// kill-restart) and auto (controller/auto_policy.hpp).
#include <map>
#include <memory>
#include <mutex>

#include "antdt/error.hpp"
#include "controller/auto_policy.hpp"
#include "controller/controller.hpp"
#include "controller/dd_policy.hpp"

namespace antdt {

PolicyPlugin::~PolicyPlugin() = default;

namespace {

class StaticPolicy final : public PolicyPlugin {
 public:
  [[nodiscard]] std::string name() const override { return "static"; }
  [[nodiscard]] std::optional<Plan> decide(const ControllerContext& /*context*/) override { return std::nullopt; }
  [[nodiscard]] bool rebalances() const override { return false; }
};

// nd (AntDT-ND, docs/nd.md): steps are pooled, so transient slowness is absorbed within the
// step by the other ranks' claims; the shares (which size chunks) follow dd's
// rebalancing of deterministic and persistent slowness; lasting contention (a persistent
// straggler) ends in a kill-restart when that pays (Controller::consider_restart).
class NdPolicy final : public detail::DdPolicy {
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
    reg->factories["dd"] = [] { return std::make_unique<detail::DdPolicy>(); };
    reg->factories["nd"] = [] { return std::make_unique<NdPolicy>(); };
    reg->factories["auto"] = [] { return std::make_unique<detail::AutoPolicy>(); };
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
