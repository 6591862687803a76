// Controller: pure policy (no MPI, no clock, no randomness). The Session runs it on rank 0
// after every step with the gathered per-rank stats; a returned Plan is broadcast and every
// rank applies it at plan.effective_step. The same stats history always gives the same
// plans (invariant 5), so a restored controller continues exactly as one never stopped.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "antdt/options.hpp"
#include "antdt/plan.hpp"
#include "controller/planner.hpp"
#include "controller/pooling_status.hpp"
#include "controller/sit_out.hpp"
#include "core/plan_rules.hpp"
#include "core/step_record.hpp"
#include "monitor/monitor.hpp"

namespace antdt {

// Besides the step's stats, what a decision may weigh (all of it measured, none of it guessed).
struct StepOutlook {
  std::int64_t remaining_samples = -1;  // samples left to train; -1: unknown
  double restart_seconds = 0.0;         // the measured cost of a restart (checkpoint + relaunch); 0: unknown
};

// What a policy sees. All references are valid for the duration of decide() only.
struct ControllerContext {
  std::int64_t step;  // the step whose stats were just recorded
  const Plan& plan;   // the latest issued plan (maybe not yet effective)
  const Monitor& monitor;
  std::span<const RankAssessment> assessments;
  const ControllerOptions& options;  // global_batch and caps are resolved (never 0/empty)
  const CostModel& cost;
  std::int64_t last_change_step;  // step at which the latest plan was decided; -1: none
  // The cost model's own error: the window median of |predicted - measured| / measured of the
  // part of the step a split changes, max_i(data wait + compute), each predicted before its
  // step was seen. 0 until there are predictions.
  double model_error = 0.0;
  bool pooled_step = false;  // the recorded step was pooled (its plan's `pooled`)
  [[nodiscard]] std::int64_t effective_step() const noexcept { return step + 1 + options.plan_lag; }
};

// A policy. decide() is called once per recorded step, in step order, on rank 0 only; it
// returns a new plan or nothing. The Controller then fills effective_step and version,
// recomputes accumulation from the caps, and checks the plan (sum b_i == B, sizes, b_i >= 0,
// b_i >= 1 when B >= world); a plan with the same batches as the current one is ignored.
// Policies must be deterministic. State that must survive a checkpoint goes through
// save_state/load_state (default: stateless).
class PolicyPlugin {
 public:
  virtual ~PolicyPlugin();
  [[nodiscard]] virtual std::string name() const = 0;
  [[nodiscard]] virtual std::optional<Plan> decide(const ControllerContext& context) = 0;
  // Whether the policy moves work between ranks at all. One that does not (static, plain BSP)
  // keeps equal shares: no GPU-generation prior seeds its first split and no probe is run.
  [[nodiscard]] virtual bool rebalances() const { return true; }
  // Whether steps may be pooled (every rank claims micro-chunks of B until B are claimed)
  // instead of split into fixed shares (docs/nd.md): the job then provides the pool from the
  // start. nd and auto do. Which steps are pooled is each plan's `pooled` flag.
  [[nodiscard]] virtual bool pools() const { return false; }
  // Whether the first plan's steps are pooled (nd: always; auto: not until transients cost more).
  [[nodiscard]] virtual bool starts_pooled() const { return pools(); }
  // Whether decide() chooses each plan's `pooled` flag (auto). Otherwise every plan keeps the
  // mode of the first (the Controller sets it).
  [[nodiscard]] virtual bool switches_pooling() const { return false; }
  // Whether the Controller may decide a kill-restart for this policy's job (nd, auto).
  [[nodiscard]] virtual bool restarts() const { return false; }
  // A kill-restart whose predicted gain beats its measured cost; the policy may still decline
  // it (auto holds it to the model's measured error as well). Called only if restarts().
  [[nodiscard]] virtual bool accept_restart(const RestartDecision& /*decision*/, const ControllerContext& /*context*/) {
    return true;
  }
  // What a policy that chooses the step mode measured and decided (auto); empty for others.
  [[nodiscard]] virtual PoolingStatus pooling_status() const { return {}; }
  [[nodiscard]] virtual std::vector<std::byte> save_state() const { return {}; }
  virtual void load_state(std::span<const std::byte> /*state*/) {}
};

using PolicyFactory = std::function<std::unique_ptr<PolicyPlugin>()>;

// Adds (or replaces) a policy under `name`; "static" and "dd" are built in. Not thread-safe:
// register before starting sessions. UsageError on an empty name or factory.
void register_policy(const std::string& name, PolicyFactory factory);
// A new instance of the named policy; UsageError listing the known names if none matches.
[[nodiscard]] std::unique_ptr<PolicyPlugin> make_policy(const std::string& name);

class Controller {
 public:
  // `initial` is the plan in force from its effective_step (equal_plan, initial_plan...). Its
  // global batch and caps must agree with options (UsageError otherwise).
  Controller(ControllerOptions options, Plan initial);

  // Records the stats of `step` (one per rank), reassesses every rank and asks the policy.
  // Returns the new plan when it changes (effective_step = step + 1 + plan_lag), else nothing.
  // A policy that restarts may also decide a kill-restart (restart() then holds it).
  std::optional<Plan> on_step(std::int64_t step, std::span<const RankStepStats> stats, const StepOutlook& outlook = {});
  // The kill-restart decided at the last on_step, if any.
  [[nodiscard]] const std::optional<RestartDecision>& restart() const noexcept { return restart_; }
  // Restarts decided over the run (a restored controller keeps the count) and the step of the
  // last one (-1: none).
  [[nodiscard]] int restarts_decided() const noexcept { return restarts_decided_; }
  [[nodiscard]] std::int64_t last_restart_step() const noexcept { return last_restart_step_; }
  // Sit-outs and rejoins decided over the run (backup workers, docs/nd.md).
  [[nodiscard]] std::int64_t sit_outs() const noexcept { return sit_out_.sit_outs(); }
  [[nodiscard]] std::int64_t rejoins() const noexcept { return sit_out_.rejoins(); }
  // No rank sits out from now on (a reduction that cannot follow the ranks that take part).
  // Ranks that sit out now stay until the next trial brings them back.
  void keep_every_rank() noexcept { options_.backup_workers = 0; }
  // How long a step waited for `rank` beyond what its compute explains (a trimmed mean over the window, seconds).
  [[nodiscard]] double sit_out_delay_seconds(int rank) const { return sit_out_.delay_seconds(rank); }

  // Replaces the plan from outside the policy, e.g. after a fresh startup probe on restart;
  // bumps the version, resets the change interval and is checked like any plan.
  const Plan& install_plan(Plan plan, std::int64_t decided_at_step);

  [[nodiscard]] const Plan& plan() const noexcept { return history_.back(); }
  // The plan in force at `step` (the latest one with effective_step <= step).
  [[nodiscard]] const Plan& plan_at(std::int64_t step) const;
  // With reasons (formatted on the first read after a step: O(world) snprintf).
  [[nodiscard]] const std::vector<RankAssessment>& assessments() const;
  [[nodiscard]] const std::vector<Plan>& history() const noexcept { return history_; }
  [[nodiscard]] const Monitor& monitor() const noexcept { return monitor_; }
  [[nodiscard]] const ControllerOptions& options() const noexcept { return options_; }
  [[nodiscard]] const CostModel& cost_model() const noexcept { return cost_; }
  [[nodiscard]] std::string policy_name() const { return policy_->name(); }
  [[nodiscard]] bool rebalances() const { return policy_->rebalances(); }
  // The step mode's decisions and the numbers behind them (policy auto; `chooses` false for others).
  [[nodiscard]] PoolingStatus pooling_status() const { return policy_->pooling_status(); }
  // Cost-model prediction of the next step (the plan in force at last_step() + 1) with the
  // Monitor's current model: max_i(a_i + b_i / x_i) + the measured all-reduce (0 before any
  // rank has timing). The Monitor's measured step time is what it predicts.
  [[nodiscard]] double predicted_step_seconds() const;
  // |predicted - measured| / measured step time of the last recorded step, the prediction made
  // before the step was seen; -1 when there was none (warm-up, no timing yet).
  [[nodiscard]] double prediction_error() const noexcept { return last_error_; }
  // ControllerContext::model_error after the last step.
  [[nodiscard]] double model_error() const;
  [[nodiscard]] std::int64_t last_change_step() const noexcept { return last_change_step_; }
  // The last step passed to on_step (-1 before any); the next step must be after it.
  [[nodiscard]] std::int64_t last_step() const noexcept { return last_step_; }

  // Checkpoint form: options that shape behaviour are NOT stored (restore takes them), the
  // plan history, monitor, streaks and policy state are.
  [[nodiscard]] std::vector<std::byte> serialize() const;
  // Restores onto options' world size (world_size, else caps.size() when it has more than one
  // entry, else the saved one). Same world: continues exactly. Another world (elastic restart): the
  // monitor restarts empty and the plan is an equal split of B for the new world with a new
  // version; the Session may install_plan() a probed one. CheckpointError on bad bytes.
  [[nodiscard]] static Controller restore(std::span<const std::byte> bytes, ControllerOptions options);

 private:
  struct Restored {};
  Controller(Restored, ControllerOptions options, Monitor monitor);
  void resolve_options(const Plan& reference);
  void assess(std::int64_t step);
  void format_reasons() const;
  // The prediction for `plan` with the current model: {compute part, whole step}; 0s without timing.
  [[nodiscard]] std::pair<double, double> predict(const Plan& plan) const;
  [[nodiscard]] std::pair<double, double> predict_now(const Plan& plan) const;  // uncached
  void consider_restart(const ControllerContext& context, const StepOutlook& outlook);
  void model_inputs(const Plan& plan);
  Plan checked(Plan plan) const;

  ControllerOptions options_;
  CostModel cost_;
  Monitor monitor_;
  std::unique_ptr<PolicyPlugin> policy_;
  std::vector<Plan> history_;
  mutable std::vector<RankAssessment> assessments_;
  mutable bool reasons_current_ = true;
  double assessed_reference_ = 0.0;
  // The compute part's relative prediction errors of the last `window` steps, oldest first.
  std::vector<double> errors_;
  double last_error_ = -1.0;
  // The last predict(): the Session asks for the next step's prediction (its step record) and
  // on_step makes the same one before recording; at 10,000 ranks each is an O(n) pass.
  struct PredictionCache {
    std::int64_t recorded = -1;  // Monitor::steps_recorded() it was made at
    const Plan* plan = nullptr;
    std::int64_t version = -1;
    std::size_t plans = 0;  // history_.size()
    std::pair<double, double> value{0.0, 0.0};
  };
  mutable PredictionCache prediction_;
  std::vector<int> slow_streak_;
  std::vector<std::uint8_t> was_fine_;
  std::int64_t last_change_step_ = -1;
  std::int64_t last_step_ = -1;
  std::optional<RestartDecision> restart_;
  detail::SitOut sit_out_;
  std::vector<double> x_, fixed_;  // scratch: the cost model's inputs of every rank this step
  int restarts_decided_ = 0;
  std::int64_t last_restart_step_ = -1;
};

}  // namespace antdt
