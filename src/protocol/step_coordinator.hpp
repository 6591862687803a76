// Private: the rank-0 side of a step as one pure core (docs/protocol.md). Every rank's
// StepReport goes in, one StepDecision comes out: the plan if one was issued, the step's
// totals, where the data order stands, the finished flag, or why the step was rejected. No MPI
// and no clock: the same reports give the same decision, so the Session (the real job), the
// tests and the simulator all drive this same object.
//
// One decision, in order:
//   1. check every report is for this step and the plan in force (lockstep), and that each
//      rank trained what the step's rule gives it: its slice of the step's batch (docs/dds.md),
//      or, in a pooled step, claims that add up to what the pool allows;
//   2. commit the step's batch in the DDS ledger, less what a deadline pool left undone (every
//      rank has returned from the step's reduction before it reported, so this is "after the
//      reduction", invariant 1); what was left undone is carried to the next steps;
//   3. feed the Controller (Monitor, classes, policy), which may issue a plan effective at
//      step + 1 + plan_lag.
//
// Pipelined (StepCoordinatorOptions::pipelined, reply lag 1): a step's reply reaches the ranks
// one step late, in the round of the next step's reports, so rank 0 decides step t while the
// ranks compute step t + 1 (plans take effect at t + 1 + plan_lag, plan_lag >= 1). A step is
// settled instead (its reply in its own round) when settles() says so: every step without a
// pipeline, a pooled step, a step with a stop or checkpoint request, and the last step of the
// run (predicted one step ahead: settle_next). So stops, checkpoints and the end come at the
// same step as without the lag, and a kill-restart decision one step later.
// Nothing is granted: every rank computes its own samples from the data order and the plan.
// A rejected step changes nothing and can be decided again.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "antdt/plan.hpp"
#include "antdt/step.hpp"
#include "controller/controller.hpp"
#include "core/plan_rules.hpp"
#include "core/saved_state.hpp"
#include "core/step_record.hpp"
#include "dds/dds.hpp"
#include "protocol/step_messages.hpp"

namespace antdt::protocol {

// What rank 0 decided, for every rank at once.
struct StepDecision {
  StepReply reply;                   // what every rank gets
  std::shared_ptr<const Plan> plan;  // issued by this decision (reply.plan_follows), or null
  std::optional<StepRecord> record;  // the step's record (decide only; times left for the caller)

  // Rank r's reply: the same for every rank (nothing in it is any one rank's).
  [[nodiscard]] const StepReply& reply_for(int /*rank*/) const noexcept { return reply; }
};

struct StepCoordinatorOptions {
  std::int64_t max_steps = 0;  // 0: stop by epochs only
  std::int64_t max_epochs = 0;
  std::int64_t dataset_size = 0;
  std::uint64_t data_seed = 0;
  std::uint64_t emulation_seed = 0;
  ControllerOptions controller;  // resolved: world size, global batch, caps
  PoolOptions pool;              // pooled steps; the mechanism must be resolved (counter or deadline)
  bool pipelined = false;        // reply lag 1 (see above); needs controller.plan_lag >= 1
};

class StepCoordinator {
 public:
  // A fresh run: the ledger of `ledger`, a Controller starting from `initial`.
  StepCoordinator(const StepCoordinatorOptions& options, const dds::LedgerOptions& ledger, Plan initial);

  // Restores what save() wrote under "antdt/" (the checkpoint may come from another world
  // size: see docs/session.md). `this_run` is what this run asks for; the checkpoint's sample
  // order wins. CheckpointError on a checkpoint that does not fit this run.
  static StepCoordinator restore(const detail::StateReader& in, const StepCoordinatorOptions& options,
                                 const dds::LedgerOptions& this_run);
  void save(detail::StateWriter& out) const;

  // The first exchange of a run (or of a resumed one): where the data order stands.
  [[nodiscard]] StepDecision start();
  // The step's decision from every rank's report (reports[r] from rank r). `settled`: its reply
  // reaches the ranks before they begin the next step (settles()); otherwise one step later.
  [[nodiscard]] StepDecision decide(std::span<const StepReport> reports, bool settled = true);
  // The reports of every rank from those of the ranks that take part in the step (in rank
  // order): a rank that sits out (Plan::sitting) did nothing and is reported so.
  [[nodiscard]] std::vector<StepReport> with_sitting(std::span<const StepReport> members) const;
  // Whether the step of `reports` must be settled: not pipelined, a pooled step, a rank asked to
  // stop or checkpoint, the ranks that sit out change at the next step, or the reply before it
  // (`previous`, null if none was pending) said so.
  [[nodiscard]] bool settles(std::span<const StepReport> reports, const StepReply* previous) const;

  // No rank sits out from now on (Controller::keep_every_rank).
  void keep_every_rank() noexcept { controller_.keep_every_rank(); }
  // Replaces the plan in force before the first step (a startup probe's split).
  const Plan& install_plan(Plan plan);
  // The plan of a startup probe: every rank's measured throughput x (and GPU-generation
  // priors, 0 = unknown) give the first split of a policy that rebalances; others keep theirs.
  // The probe's split is held to the bar of any change: it replaces the plan in force only
  // if, at the probed speeds, it is predicted to shorten the step by more than the min gain
  // (a few noisy steps of equal ranks otherwise leave them a few percent unequal for good);
  // otherwise the plan in force stays, and it is what this returns.
  const Plan& install_probe(std::span<const double> x, std::span<const double> priors, int repetitions);

  // Where the run stands, for the ranks that resume with it (plans go beside it).
  [[nodiscard]] ResumeState resume_state() const;

  [[nodiscard]] std::int64_t step() const noexcept { return step_; }  // the next step to decide
  [[nodiscard]] const PlanSchedule& plans() const noexcept { return plans_; }
  [[nodiscard]] const Controller& controller() const noexcept { return controller_; }
  [[nodiscard]] const dds::Coordinator& dds() const noexcept { return dds_; }
  [[nodiscard]] std::int64_t committed_total() const noexcept { return committed_total_; }
  // Steps of this run (since start or restore) that did not train all of their batch (a
  // deadline pool's slowed ranks): their undone positions went to later steps, so from the first
  // such step on, the run's steps are not the ones the data order alone gives (docs/dds.md).
  [[nodiscard]] std::int64_t altered_steps() const noexcept { return altered_steps_; }
  [[nodiscard]] bool finished() const noexcept { return finished_; }
  // The kill-restart this run ended with, if it did (the decision's ranks and nodes).
  [[nodiscard]] const std::optional<RestartDecision>& restart() const noexcept { return restart_; }
  // Some rank asked the run to stop (StepReport::stop, a signal): it ended after that step.
  [[nodiscard]] bool stopped() const noexcept { return stopped_; }
  // The measured cost of a restart (checkpoint + relaunch), for the Controller to weigh; 0 until
  // something has been measured.
  void set_restart_seconds(double seconds) noexcept { restart_seconds_ = seconds; }
  // Profiling only: a clock the coordinator reads around its DDS work (commit, coverage,
  // carrying) and around the Controller to add up dds_seconds() and controller_seconds().
  // Decisions never depend on it.
  void set_profiling_clock(std::function<double()> clock) { clock_ = std::move(clock); }
  [[nodiscard]] double dds_seconds() const noexcept { return dds_seconds_; }
  [[nodiscard]] double controller_seconds() const noexcept { return controller_seconds_; }

 private:
  StepCoordinator(const StepCoordinatorOptions& options, dds::Coordinator dds, Controller controller);
  [[nodiscard]] std::optional<std::string> lockstep_problem(std::span<const StepReport> reports) const;
  [[nodiscard]] std::vector<RankStepStats> stats_of(std::span<const StepReport> reports) const;
  [[nodiscard]] StepRecord record_of(std::vector<RankStepStats> stats, double loss_sum) const;
  [[nodiscard]] std::optional<std::string> undone_of(std::span<const StepReport> reports,
                                                     std::vector<dds::BatchRange>& undone) const;
  [[nodiscard]] bool reached_end_after(std::int64_t next_step) const;
  [[nodiscard]] bool last_step_is(std::int64_t step) const;
  [[nodiscard]] StepOutlook outlook() const;
  [[nodiscard]] double pooled_deadline() const;
  [[nodiscard]] StepDecision rejected(ReplyStatus status, std::string why) const;
  template <class F>
  auto timed(double& total, F&& f);

  StepCoordinatorOptions options_;
  dds::Coordinator dds_;
  Controller controller_;
  PlanSchedule plans_;
  std::int64_t step_ = 0;
  std::int64_t committed_total_ = 0;
  std::int64_t altered_steps_ = 0;
  bool finished_ = false;
  bool stopped_ = false;
  std::function<double()> clock_;
  double dds_seconds_ = 0.0;
  double controller_seconds_ = 0.0;
  double restart_seconds_ = 0.0;
  std::optional<RestartDecision> restart_;
};

}  // namespace antdt::protocol
