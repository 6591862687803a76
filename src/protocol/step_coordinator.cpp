#include "protocol/step_coordinator.hpp"

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <sstream>
#include <string>

#include "antdt/error.hpp"
#include "controller/planner.hpp"
#include "core/bytes.hpp"
#include "core/log.hpp"
#include "core/plan_codec.hpp"
#include "core/plan_rules.hpp"
#include "core/step_record.hpp"

namespace antdt::protocol {

StepCoordinator::StepCoordinator(const StepCoordinatorOptions& options, const dds::LedgerOptions& ledger, Plan initial)
    : StepCoordinator(options, dds::Coordinator(ledger), Controller(options.controller, std::move(initial))) {
  plans_.reset(std::make_shared<const Plan>(controller_.plan()));
}

StepCoordinator::StepCoordinator(const StepCoordinatorOptions& options, dds::Coordinator dds, Controller controller)
    : options_(options), dds_(std::move(dds)), controller_(std::move(controller)) {
  if (options_.pool.pooled && options_.pool.mechanism == PoolMechanism::automatic) {
    throw UsageError("step coordinator: pooled steps need their mechanism resolved (counter or deadline)");
  }
  if (options_.pipelined && controller_.options().plan_lag < 1) {
    throw UsageError("step coordinator: a pipelined run needs plan_lag >= 1 (a plan must reach every rank in time)");
  }
}

template <class F>
auto StepCoordinator::timed(double& total, F&& f) {
  const double t0 = clock_ ? clock_() : 0.0;
  struct Add {  // adds the time on every way out, exceptions included
    const std::function<double()>& clock;
    double t0;
    double& total;
    ~Add() {
      if (clock) total += clock() - t0;
    }
  } add{clock_, t0, total};
  return f();
}

bool StepCoordinator::reached_end_after(std::int64_t next_step) const {
  if (options_.max_steps > 0 && next_step >= options_.max_steps) return true;
  return dds_.ledger().exhausted();
}

// With the ledger standing before `step`'s batch: no step follows `step` once it trains all of
// its batch (a pipelined run settles it).
bool StepCoordinator::last_step_is(std::int64_t step) const {
  if (options_.max_steps > 0 && step + 1 >= options_.max_steps) return true;
  dds::StepStream after = dds_.ledger().stream();
  if (after.exhausted()) return true;
  after.advance(after.next(plans_.at(step).global_batch));
  return after.exhausted();
}

bool StepCoordinator::settles(std::span<const StepReport> reports, const StepReply* previous) const {
  if (!options_.pipelined || plans_.at(step_).pooled) return true;
  if (previous != nullptr && previous->settle_next) return true;
  // The ranks that sit out change at the next step: they regroup with nothing in flight.
  if (plans_.at(step_ + 1).sitting != plans_.at(step_).sitting) return true;
  return std::any_of(reports.begin(), reports.end(), [](const StepReport& r) { return r.stop || r.checkpoint; });
}

std::vector<StepReport> StepCoordinator::with_sitting(std::span<const StepReport> members) const {
  const Plan& plan = plans_.at(step_);
  std::vector<StepReport> all;
  all.reserve(members.size() + plan.sitting.size());
  std::size_t k = 0;
  for (int r = 0; r < plan.world_size(); ++r) {
    if (plan.sits_out(r)) {
      StepReport absent;
      absent.step = step_;
      absent.plan_version = plan.version;
      all.push_back(absent);
    } else if (k < members.size()) {
      all.push_back(members[k++]);
    }
  }
  return all;
}

StepDecision StepCoordinator::rejected(ReplyStatus status, std::string why) const {
  StepDecision d;
  d.reply.status = status;
  d.reply.error = std::move(why);
  return d;
}

StepDecision StepCoordinator::start() {
  finished_ = reached_end_after(step_);
  StepDecision d;
  d.reply.step = step_;
  d.reply.finished = finished_;
  d.reply.settle_next = options_.pipelined && !finished_ && last_step_is(step_);
  d.reply.completed_epochs = dds_.ledger().completed_epochs();
  d.reply.committed_total = committed_total_;
  d.reply.next_position = dds_.ledger().stream().cursor();
  return d;
}

// What each rank trained of the step's batch must be what the step's rule gives it; returns why
// not, or fills `undone` with the offsets of the batch that no rank trained (ascending):
//  - a step that is not pooled: every rank trained its whole slice (share_of);
//  - a counter pool: the claims cover a prefix of the batch, [0, sum of what the ranks trained);
//  - a deadline pool: every rank trained a prefix of its slice, and the rest of it is undone.
std::optional<std::string> StepCoordinator::undone_of(std::span<const StepReport> reports,
                                                      std::vector<dds::BatchRange>& undone) const {
  const Plan& plan = plans_.current();
  const std::int64_t n = dds_.next_batch(plan.global_batch).size();
  const auto disagree = [&](std::size_t r, const char* rule, std::int64_t count) {
    return "rank " + std::to_string(r) + " reports " + std::to_string(reports[r].consumed) + " samples consumed but " +
           rule + " of step " + std::to_string(step_) + " holds " + std::to_string(count) +
           "; its view of the data order and rank 0's disagree";
  };
  if (plan.pooled && options_.pool.mechanism == PoolMechanism::counter) {
    std::int64_t total = 0;
    for (std::size_t r = 0; r < reports.size(); ++r) {
      if (reports[r].consumed < 0 || reports[r].consumed > n - total) return disagree(r, "what is left", n - total);
      total += reports[r].consumed;
    }
    if (total < n) undone.push_back(dds::BatchRange{total, n});
    return std::nullopt;
  }
  const bool by_deadline = plan.pooled;  // a prefix of the slice; else all of it
  std::int64_t begin = 0;                // rank r's slice starts after the shares before it (O(ranks) in all)
  for (std::size_t r = 0; r < reports.size(); ++r) {
    const dds::BatchRange share = dds::slice_at(begin, plan.batch[r], n);
    begin += plan.batch[r];
    const std::int64_t c = reports[r].consumed;
    if (c < 0 || c > share.size() || (!by_deadline && c != share.size())) return disagree(r, "its slice", share.size());
    if (c < share.size()) undone.push_back(dds::BatchRange{share.begin + c, share.end});
  }
  return std::nullopt;
}

std::optional<std::string> StepCoordinator::lockstep_problem(std::span<const StepReport> reports) const {
  const int world = controller_.options().world_size;
  if (static_cast<int>(reports.size()) != world) {
    return "step coordinator: " + std::to_string(reports.size()) + " reports for " + std::to_string(world) + " ranks";
  }
  const std::int64_t version = plans_.current().version;
  for (std::size_t i = 0; i < reports.size(); ++i) {
    const StepReport& r = reports[i];
    if (r.step != step_ || r.plan_version != version) {
      return "Session: rank " + std::to_string(i) + " is at step " + std::to_string(r.step) + " plan v" +
             std::to_string(r.plan_version) + " but rank 0 is at step " + std::to_string(step_) + " plan v" +
             std::to_string(version) + " (ranks must call the step API in lockstep)";
    }
  }
  return std::nullopt;
}

std::vector<RankStepStats> StepCoordinator::stats_of(std::span<const StepReport> reports) const {
  std::vector<RankStepStats> stats(reports.size());
  double max_compute = 0.0;
  for (std::size_t i = 0; i < reports.size(); ++i) {
    const StepReport& r = reports[i];
    stats[i] = RankStepStats{r.compute_seconds, r.data_wait_seconds, r.reduce_seconds, 0.0, r.consumed, r.micro_steps};
    max_compute = std::max(max_compute, r.compute_seconds);
  }
  for (auto& s : stats) s.idle_seconds = max_compute - s.compute_seconds;
  return stats;
}

// B samples at the sum of the ranks' usual throughputs (window medians): how long the ranks
// compute in a pooled step that ends by deadline. 0 until every rank with work is timed.
double StepCoordinator::pooled_deadline() const {
  const Monitor& m = controller_.monitor();
  double sum = 0.0;
  for (int r = 0; r < m.world_size(); ++r) {
    if (!m.has_throughput(r)) return 0.0;
    sum += m.throughput(r);
  }
  return sum > 0.0 ? static_cast<double>(plans_.current().global_batch) / sum : 0.0;
}

StepOutlook StepCoordinator::outlook() const {
  StepOutlook o;
  o.restart_seconds = restart_seconds_;
  const std::int64_t b = controller_.options().global_batch;
  std::int64_t left = -1;
  if (options_.max_steps > 0) left = std::max<std::int64_t>(0, options_.max_steps - step_ - 1) * b;
  if (options_.max_epochs > 0) {
    const std::int64_t by_epochs =
        std::max<std::int64_t>(0, options_.max_epochs * options_.dataset_size - committed_total_);
    left = left < 0 ? by_epochs : std::min(left, by_epochs);
  }
  o.remaining_samples = left;
  return o;
}

StepRecord StepCoordinator::record_of(std::vector<RankStepStats> stats, double loss_sum) const {
  StepRecord rec;
  rec.step = step_;
  rec.ranks = std::move(stats);
  rec.batch = plans_.current().batch;
  rec.plan_version = plans_.current().version;
  rec.predicted_seconds = controller_.predicted_step_seconds();
  rec.loss_sum = loss_sum;
  return rec;
}

StepDecision StepCoordinator::decide(std::span<const StepReport> reports, bool settled) {
  if (finished_) return rejected(ReplyStatus::usage_error, "step coordinator: the run has finished");
  if (!settled && settles(reports, nullptr)) {
    return rejected(ReplyStatus::error, "step coordinator: step " + std::to_string(step_) +
                                            " must be settled (no pipeline, a pooled step, or a stop or checkpoint "
                                            "request), but its decision was asked for one step late");
  }
  plans_.advance_to(step_);
  if (auto problem = lockstep_problem(reports)) return rejected(ReplyStatus::error, std::move(*problem));
  std::vector<RankStepStats> stats = stats_of(reports);
  std::vector<dds::BatchRange> undone;
  if (auto problem = undone_of(reports, undone)) return rejected(ReplyStatus::error, std::move(*problem));
  dds::Coordinator::StepResult committed;
  try {
    committed = timed(dds_seconds_, [&] { return dds_.commit_step(plans_.current().global_batch, undone); });
  } catch (const UsageError& e) {
    return rejected(ReplyStatus::usage_error, e.what());
  } catch (const Error& e) {
    return rejected(ReplyStatus::error, e.what());
  }
  committed_total_ += committed.committed;
  if (!undone.empty()) ++altered_steps_;

  StepDecision d;
  StepReply& totals = d.reply;
  for (const StepReport& r : reports) {
    totals.loss_sum += r.loss_sum;
    totals.samples += r.consumed;
    totals.correct += r.correct;
    totals.max_compute_seconds = std::max(totals.max_compute_seconds, r.compute_seconds);
  }
  d.record = record_of(stats, totals.loss_sum);
  const StepOutlook ahead = outlook();
  if (std::optional<Plan> next = timed(controller_seconds_, [&] { return controller_.on_step(step_, stats, ahead); })) {
    d.plan = std::make_shared<const Plan>(std::move(*next));
    plans_.issue(d.plan);
    totals.plan_follows = true;
    ANTDT_LOG(info) << "step " << step_ << ": plan v" << d.plan->version << " from step " << d.plan->effective_step
                    << ": " << d.plan->reason << " (cost model: " << controller_.predicted_step_seconds() * 1e3
                    << " ms/step predicted; measured median " << controller_.monitor().step_seconds() * 1e3
                    << " ms under the old plan)";
  }
  if (!restart_ && controller_.restart()) {  // the run ends (here, or after the next step when pipelined)
    restart_ = controller_.restart();
    ANTDT_LOG(warn) << "step " << step_ << ": " << restart_->reason
                    << (settled ? "" : " (after the next step: rank 0 decides one step late)");
  }
  std::string asked;
  for (std::size_t r = 0; r < reports.size(); ++r) {
    if (reports[r].stop) asked += (asked.empty() ? "" : ",") + std::to_string(r);
    totals.checkpoint = totals.checkpoint || reports[r].checkpoint;
  }
  if (!asked.empty()) {  // a signal (time limit, preemption, Ctrl-C): end with this step
    stopped_ = true;
    totals.stopped = true;
    ANTDT_LOG(warn) << "step " << step_ << ": rank" << (asked.find(',') == std::string::npos ? " " : "s ") << asked
                    << " asked to stop (a signal or request_stop()): the run ends after this step";
  }
  totals.step = step_;
  if (settled) {
    totals.restart = restart_.has_value();
    finished_ = restart_.has_value() || stopped_ || reached_end_after(step_ + 1);
    totals.settle_next = options_.pipelined && !finished_ && last_step_is(step_ + 1);
  } else {
    totals.settle_next = restart_.has_value() || last_step_is(step_ + 1);
  }
  totals.next_position = dds_.ledger().stream().cursor();
  totals.undone = std::move(undone);
  if (options_.pool.pooled) totals.deadline_seconds = pooled_deadline();
  totals.ends_step = true;
  totals.finished = finished_;
  totals.completed_epochs = dds_.ledger().completed_epochs();
  totals.committed_total = committed_total_;
  ++step_;
  return d;
}

const Plan& StepCoordinator::install_plan(Plan plan) {
  const Plan& installed = controller_.install_plan(std::move(plan), -1);
  plans_.reset(std::make_shared<const Plan>(installed));
  return installed;
}

const Plan& StepCoordinator::install_probe(std::span<const double> x, std::span<const double> priors, int repetitions) {
  const ControllerOptions& o = controller_.options();
  Plan p = controller_.rebalances() ? initial_plan(o.global_batch, x, o.caps, priors, 0) : plans_.current();
  p.reason =
      "planner: initial split from a startup probe (at least " + std::to_string(repetitions) + " micro-steps per rank)";
  const bool all_probed = std::all_of(x.begin(), x.end(), [](double v) { return std::isfinite(v) && v > 0.0; });
  if (controller_.rebalances() && all_probed && p.batch != plans_.current().batch) {
    const CostModel& cost = controller_.cost_model();
    const double now = cost.predict_step_seconds(plans_.current(), x);
    const double next = cost.predict_step_seconds(p, x);
    const double gain = now > 0.0 ? (now - next) / now : 0.0;
    if (!(gain > o.min_gain)) {
      ANTDT_LOG(info) << std::setprecision(3) << "probe: x_i measured; its split would shorten the step by "
                      << 100.0 * gain << "%, not more than the min gain " << 100.0 * o.min_gain
                      << "%: the split in force is kept";
      return plans_.current();
    }
  }
  p.effective_step = 0;
  const Plan& installed = install_plan(std::move(p));
  std::string shares;
  for (auto b : installed.batch) shares += (shares.empty() ? "" : ",") + std::to_string(b);
  ANTDT_LOG(info) << "probe: x_i measured, initial split [" << shares << "], predicted step "
                  << controller_.cost_model().predict_step_seconds(installed, x) * 1e3 << " ms";
  return installed;
}

ResumeState StepCoordinator::resume_state() const {
  ResumeState s;
  s.step = step_;
  s.completed_epochs = dds_.ledger().completed_epochs();
  s.committed_total = committed_total_;
  const auto& order = dds_.ledger().options();
  s.shard_size = order.shard_size;
  s.shuffle_shards = order.shuffle_shards;
  s.shuffle_within_shard = order.shuffle_within_shard;
  s.finished = reached_end_after(step_);  // a stop or restart ends this run, not the resumed one
  s.cursor = dds_.ledger().stream().cursor();
  s.carried = dds_.ledger().stream().carried();
  return s;
}

namespace {

// What a coordinator saves under "antdt/", listed once for save and restore.
struct SavedCoordinator {
  std::vector<std::byte> dds, controller, plans;  // the plan in force, then 0 or 1 and the pending one
  std::int64_t step = 0, world_size = 0, dataset_size = 0, global_batch = 0, completed_epochs = 0, committed_total = 0;
  std::vector<std::uint64_t> seeds = std::vector<std::uint64_t>(2);  // data, emulation
  std::string policy;

  template <class Self, class F>
  static void fields(Self& m, F&& f) {
    f("antdt/dds", m.dds), f("antdt/controller", m.controller), f("antdt/plan", m.plans), f("antdt/step", m.step),
        f("antdt/world_size", m.world_size), f("antdt/dataset_size", m.dataset_size),
        f("antdt/global_batch", m.global_batch), f("antdt/completed_epochs", m.completed_epochs),
        f("antdt/committed_total", m.committed_total), f("antdt/seeds", m.seeds), f("antdt/policy", m.policy);
  }
};

// The saved plan must satisfy the plan invariant and fit the checkpoint it came with.
void check_saved_plan(const std::string& where, const Plan& p, std::int64_t saved_world, std::int64_t saved_batch) {
  if (auto problem = plan_problem(p); !problem.empty()) {
    throw CheckpointError(where + ": the saved plan is invalid: " + problem);
  }
  if (p.world_size() != saved_world || p.global_batch != saved_batch) {
    throw CheckpointError(where + ": the saved plan is for " + std::to_string(p.world_size()) +
                          " ranks and B = " + std::to_string(p.global_batch) + ", not the checkpoint's " +
                          std::to_string(saved_world) + " ranks and B = " + std::to_string(saved_batch));
  }
}

}  // namespace

void StepCoordinator::save(detail::StateWriter& out) const {
  SavedCoordinator saved;
  saved.dds = dds_.serialize();
  saved.controller = controller_.serialize();
  detail::ByteWriter plans;
  encode_plan(plans_.current(), plans);
  plans.put<std::uint8_t>(plans_.pending() ? 1 : 0);
  if (plans_.pending()) encode_plan(*plans_.pending(), plans);
  saved.plans = plans.take();
  saved.step = step_;
  saved.world_size = controller_.options().world_size;
  saved.dataset_size = options_.dataset_size;
  saved.global_batch = controller_.options().global_batch;
  saved.completed_epochs = dds_.ledger().completed_epochs();
  saved.committed_total = committed_total_;
  saved.seeds = {options_.data_seed, options_.emulation_seed};
  saved.policy = controller_.options().policy;
  detail::save_fields(out, saved);
}

StepCoordinator StepCoordinator::restore(const detail::StateReader& in, const StepCoordinatorOptions& options,
                                         const dds::LedgerOptions& this_run) {
  SavedCoordinator saved;
  detail::load_fields(in, saved);
  const std::string where = in.where();
  if (saved.dataset_size != options.dataset_size) {
    throw CheckpointError(where + " was taken on a data set of " + std::to_string(saved.dataset_size) +
                          " samples, but this run has " + std::to_string(options.dataset_size));
  }
  if (saved.seeds[0] != options.data_seed) {
    throw CheckpointError(where + " used data seed " + std::to_string(saved.seeds[0]) + " but this run uses " +
                          std::to_string(options.data_seed) + " (the epoch order would change)");
  }
  const int world = options.controller.world_size;
  auto dds = dds::Coordinator::restore(saved.dds);
  // The run's own limit wins: a resumed job may be asked to train longer.
  if (dds.ledger().options().max_epochs != options.max_epochs) dds.set_max_epochs(options.max_epochs);
  StepCoordinator c(options, std::move(dds), Controller::restore(saved.controller, options.controller));

  detail::ByteReader pr(saved.plans);
  Plan plan = decode_plan(pr);
  std::optional<Plan> pending;
  if (pr.get<std::uint8_t>() != 0) pending = decode_plan(pr);
  check_saved_plan(where, plan, saved.world_size, saved.global_batch);
  if (pending) check_saved_plan(where, *pending, saved.world_size, saved.global_batch);
  // A run resumed while a rank sat out starts with every rank in (the Controller re-planned).
  const bool sitting = !plan.sitting.empty() || (pending && !pending->sitting.empty());
  if (saved.world_size == world && saved.global_batch == options.controller.global_batch && !sitting) {
    c.plans_.reset(std::make_shared<const Plan>(std::move(plan)),
                   pending ? std::make_shared<const Plan>(std::move(*pending)) : nullptr);
  } else {
    c.plans_.reset(std::make_shared<const Plan>(c.controller_.plan()));
    ANTDT_LOG(info) << "elastic restore: checkpoint from " << saved.world_size << " ranks, now " << world
                    << "; re-planned: " << c.plans_.current().reason;
  }
  c.step_ = saved.step;
  c.committed_total_ = saved.committed_total;
  c.finished_ = c.reached_end_after(c.step_);
  const auto& saved_order = c.dds_.ledger().options();
  if (saved_order.shard_size != this_run.shard_size) {
    ANTDT_LOG(info) << "restore: keeping the checkpoint's shard size " << saved_order.shard_size
                    << " (this run asked for " << this_run.shard_size << ")";
  }
  return c;
}

}  // namespace antdt::protocol
