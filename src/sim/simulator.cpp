#include "sim/simulator.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>

#include "agent/agent.hpp"
#include "antdt/error.hpp"
#include "core/log_histogram.hpp"
#include "core/plan_codec.hpp"
#include "protocol/step_coordinator.hpp"

namespace antdt::sim {

namespace {

double log2_levels(int p) { return p <= 1 ? 0.0 : std::ceil(std::log2(static_cast<double>(p))); }

void validate(const SimConfig& c) {
  if (c.speeds.empty()) throw UsageError("simulator: no ranks (empty speed list)");
  if (!(c.seconds_per_sample > 0.0)) throw UsageError("simulator: seconds per sample must be > 0");
  if (c.steps < 1) throw UsageError("simulator: steps must be at least 1");
  if (c.emulation.jitter < 0.0 || c.emulation.jitter >= 1.0) throw UsageError("simulator: jitter must be in [0, 1)");
  if (c.overhead_seconds < 0.0) throw UsageError("simulator: the per-step overhead must be >= 0");
  if (c.gradient_bytes < 0) throw UsageError("simulator: gradient bytes must be >= 0");
  if (c.controller.global_batch < 1) throw UsageError("simulator: the global batch must be at least 1");
  if (!c.network.link_factor.empty() && c.network.link_factor.size() != c.speeds.size())
    throw UsageError("simulator: one link factor per rank, or none");
}

// The job as the Session would build it: caps per rank, the ledger of the data set.
struct Job {
  ControllerOptions controller;
  dds::LedgerOptions ledger;
  EmulationOptions emulation;
  protocol::StepCoordinatorOptions coordinator;
};

Job make_job(const SimConfig& c) {
  const int n = static_cast<int>(c.speeds.size());
  Job j;
  j.controller = c.controller;
  j.controller.world_size = n;
  if (j.controller.caps.empty()) j.controller.caps = {j.controller.global_batch};
  if (j.controller.caps.size() == 1) j.controller.caps.assign(static_cast<std::size_t>(n), j.controller.caps[0]);
  j.controller.cost.gradient_bytes = c.gradient_bytes;
  const std::int64_t b = j.controller.global_batch;
  j.ledger.dataset_size = c.dataset_size > 0 ? c.dataset_size : 20 * b;
  const std::int64_t per_rank = std::max<std::int64_t>(1, ceil_div(b, n));
  const std::int64_t cap = *std::min_element(j.controller.caps.begin(), j.controller.caps.end());
  j.ledger.shard_size =
      c.shard_size > 0 ? c.shard_size : dds::default_shard_size(j.ledger.dataset_size, std::min(cap, per_rank));
  j.ledger.max_epochs = c.max_epochs;
  j.emulation = c.emulation;
  j.emulation.speeds = c.speeds;
  j.emulation.virtual_seconds_per_sample = c.seconds_per_sample;
  j.coordinator.prefetch_steps = c.prefetch_steps;
  j.coordinator.max_steps = c.steps;
  j.coordinator.max_epochs = c.max_epochs;
  j.coordinator.dataset_size = j.ledger.dataset_size;
  j.coordinator.emulation_seed = c.emulation.seed;
  j.coordinator.controller = j.controller;
  return j;
}

double wall_now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// The simulated ranks: one Agent and one virtual clock each.
class Ranks {
 public:
  Ranks(const Job& job, const Plan& first) : clocks_(job.emulation.speeds.size()) {
    const int n = static_cast<int>(clocks_.size());
    agents_.reserve(clocks_.size());
    auto plan = std::make_shared<const Plan>(first);
    for (int i = 0; i < n; ++i) {
      agents_.emplace_back(i, n, job.ledger, job.emulation, clocks_[static_cast<std::size_t>(i)]);
      agents_.back().reset_plan(plan);
    }
    ready_.resize(clocks_.size());
  }

  // Every rank's step up to the gradient all-reduce, which ends when the last rank is ready.
  // Returns the step's reports; `mean_t`/`max_t`: the ranks' data + compute times.
  std::vector<protocol::StepReport> run_step(double t0, double overhead, double allreduce, double& end, double& mean_t,
                                             double& max_t) {
    double sum_t = 0.0, last = t0;
    for (std::size_t i = 0; i < agents_.size(); ++i) {
      clocks_[i].set(t0);
      (void)agents_[i].begin();
      clocks_[i].wait(overhead);
      agents_[i].mark_data_ready();
      agents_[i].mark_compute_done(0.0);  // waits out b * c / speed_i on the virtual clock
      ready_[i] = clocks_[i].now();
      last = std::max(last, ready_[i]);
      sum_t += ready_[i] - t0;
    }
    end = last + allreduce;
    max_t = last - t0;
    mean_t = sum_t / static_cast<double>(agents_.size());
    std::vector<protocol::StepReport> reports(agents_.size());
    for (std::size_t i = 0; i < agents_.size(); ++i) {
      agents_[i].add_reduce_seconds(end - ready_[i]);
      reports[i] = agents_[i].report(0.0, 0);
    }
    return reports;
  }

  // Hands each rank its reply; returns the largest reply's bytes.
  std::size_t apply(const protocol::StepDecision& d) {
    std::size_t largest = 0;
    for (std::size_t i = 0; i < agents_.size(); ++i) {
      const protocol::StepReply reply = d.reply_for(static_cast<int>(i));
      largest = std::max(largest, protocol::encoded_size(reply));
      (void)agents_[i].apply(reply, d.plan);
    }
    return largest;
  }

  // Sum of the ranks' standalone throughputs at `step` (scheduled speed changes included).
  [[nodiscard]] double ideal_throughput(std::int64_t step) const {
    double sum = 0.0;
    for (const auto& a : agents_) sum += a.emulator().virtual_throughput(step);
    return sum;
  }

 private:
  std::vector<agent::VirtualClock> clocks_;
  std::vector<agent::Agent> agents_;
  std::vector<double> ready_;
};

std::size_t plan_bytes(const Plan& p) {
  detail::ByteWriter w;
  encode_plan(p, w);
  return w.bytes().size();
}

}  // namespace

double NetworkModel::worst_beta(int p) const {
  double factor = 1.0;
  for (int i = 0; i < p && i < static_cast<int>(link_factor.size()); ++i)
    factor = std::max(factor, link_factor[static_cast<std::size_t>(i)]);
  return beta * factor;
}

double NetworkModel::allreduce_seconds(int p, double bytes) const {
  if (p <= 1) return 0.0;
  const double b = worst_beta(p);
  const double ring = 2.0 * (p - 1) * (alpha + bytes / p * b);
  const double tree = 2.0 * log2_levels(p) * alpha + 2.0 * bytes * b;
  switch (allreduce) {
    case Allreduce::ring:
      return ring;
    case Allreduce::tree:
      return tree;
    case Allreduce::automatic:
      break;
  }
  return std::min(ring, tree);
}

double NetworkModel::gather_seconds(int p, double bytes_each) const {
  if (p <= 1) return 0.0;
  return log2_levels(p) * alpha + (p - 1) * bytes_each * worst_beta(p);
}

double NetworkModel::broadcast_seconds(int p, double bytes) const {
  return log2_levels(p) * (alpha + bytes * worst_beta(p));
}

SimResult simulate(const SimConfig& config) {
  validate(config);
  const Job job = make_job(config);
  const int n = job.controller.world_size;
  protocol::StepCoordinator coordinator(job.coordinator, job.ledger,
                                        equal_plan(job.controller.global_batch, job.controller.caps));
  Ranks ranks(job, coordinator.plans().current());
  (void)ranks.apply(coordinator.start());

  SimResult r;
  r.policy = coordinator.controller().policy_name();
  r.ranks = n;
  r.report_bytes = protocol::encoded_size(protocol::StepReport{});
  r.gather_bytes = r.report_bytes * static_cast<std::size_t>(n);
  r.allreduce_seconds = config.network.allreduce_seconds(n, static_cast<double>(config.gradient_bytes));
  detail::LogHistogram decision, in_controller, in_dds, control, error;
  coordinator.set_profiling_clock(wall_now);
  // The ideal time of the work done: each step's samples at the sum of the ranks' speeds then.
  double ideal_seconds = 0.0, settled_ideal = 0.0;
  double error_sum = 0.0, sum_mean_t = 0.0, sum_max_t = 0.0, now = 0.0, settled_seconds = 0.0;
  while (!coordinator.finished()) {
    double end = 0.0, mean_t = 0.0, max_t = 0.0;
    const auto reports = ranks.run_step(now, config.overhead_seconds, r.allreduce_seconds, end, mean_t, max_t);
    const double t_decide = wall_now(), controller_before = coordinator.controller_seconds();
    const double dds_before = coordinator.dds_seconds();
    const protocol::StepDecision d = coordinator.decide(reports);
    const double decided = wall_now() - t_decide;
    in_controller.add(coordinator.controller_seconds() - controller_before);
    in_dds.add(coordinator.dds_seconds() - dds_before);
    if (d.reply.status != protocol::ReplyStatus::ok)
      throw Error("simulator: the coordinator rejected a step: " + d.reply.error);
    const std::size_t reply_bytes = ranks.apply(d);
    const double exchange =
        config.network.gather_seconds(n, static_cast<double>(r.report_bytes)) +
        config.network.gather_seconds(n, static_cast<double>(reply_bytes)) +
        (d.plan ? config.network.broadcast_seconds(n, static_cast<double>(plan_bytes(*d.plan))) : 0.0);
    const double step_seconds = end - now + exchange + (config.charge_decision_time ? decided : 0.0);
    decision.add(decided);
    control.add(exchange);
    r.reply_bytes_max = std::max(r.reply_bytes_max, reply_bytes + (d.plan ? plan_bytes(*d.plan) : 0));
    if (!d.plan) r.reply_bytes_typical = std::max(r.reply_bytes_typical, reply_bytes);
    if (d.record && d.record->predicted_seconds > 0.0) {
      const double e = std::abs(d.record->predicted_seconds - step_seconds) / step_seconds;
      error.add(e);
      error_sum += e;
    }
    if (d.plan) {
      ++r.plan_changes;
      r.last_change_effective_step = d.plan->effective_step;
      if (r.plan_changes == 1) r.settled_from_step = d.plan->effective_step;
    }
    // From the step the first plan change takes effect, the run starts over for `settled`.
    if (r.plan_changes > 0 && d.record && d.record->step == r.settled_from_step) {
      settled_seconds = settled_ideal = 0.0;
    }
    const double ideal = static_cast<double>(d.reply.samples) / ranks.ideal_throughput(r.steps);
    ideal_seconds += ideal;
    settled_ideal += ideal;
    settled_seconds += step_seconds;
    r.samples += d.reply.samples;
    r.seconds += step_seconds;
    sum_mean_t += mean_t;
    sum_max_t += max_t;
    now += step_seconds;
    ++r.steps;
  }
  r.throughput = r.seconds > 0.0 ? static_cast<double>(r.samples) / r.seconds : 0.0;
  r.ideal_throughput = ideal_seconds > 0.0 ? static_cast<double>(r.samples) / ideal_seconds : ranks.ideal_throughput(0);
  r.efficiency = r.seconds > 0.0 ? ideal_seconds / r.seconds : 0.0;
  r.settled_efficiency = settled_seconds > 0.0 ? settled_ideal / settled_seconds : r.efficiency;
  r.idle_fraction = sum_max_t > 0.0 ? 1.0 - sum_mean_t / sum_max_t : 0.0;
  r.prediction_error_median = error.median();
  r.prediction_error_mean = error.count() > 0 ? error_sum / static_cast<double>(error.count()) : 0.0;
  r.decision_seconds_median = decision.median();
  r.decision_seconds_max = decision.max();
  r.controller_seconds_median = in_controller.median();
  r.dds_seconds_median = in_dds.median();
  r.control_seconds_median = control.median();
  r.coverage = coordinator.dds().coverage();
  for (const auto& c : r.coverage) r.duplicated += c.duplicated, r.missing += c.missing;
  r.plans = coordinator.controller().history();
  return r;
}

}  // namespace antdt::sim
