#include "sim/simulator.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <queue>

#include "agent/agent.hpp"
#include "antdt/error.hpp"
#include "core/log_histogram.hpp"
#include "core/plan_codec.hpp"
#include "core/plan_rules.hpp"
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
  // The simulated ranks read no data and their times do not depend on which samples they
  // train: the order is not shuffled within shards, which saves every simulated rank a
  // permutation per sample in each step (100,000 ranks compute B indices per step). So the
  // default shards are the Session's for that order: about 10 global batches.
  j.ledger.shuffle_within_shard = false;
  j.ledger.shard_size = c.shard_size > 0 ? c.shard_size : dds::default_shard_size(j.ledger.dataset_size, b, false);
  j.ledger.max_epochs = c.max_epochs;
  j.emulation = c.emulation;
  j.emulation.speeds = c.speeds;
  j.emulation.virtual_seconds_per_sample = c.seconds_per_sample;
  j.coordinator.max_steps = c.steps;
  j.coordinator.max_epochs = c.max_epochs;
  j.coordinator.dataset_size = j.ledger.dataset_size;
  j.coordinator.emulation_seed = c.emulation.seed;
  if (c.reply_lag < 0 || c.reply_lag > 1) throw UsageError("simulator: the reply lag must be 0 or 1");
  j.coordinator.pipelined = c.reply_lag > 0;
  j.controller.plan_lag = std::max<std::int64_t>(j.controller.plan_lag, c.reply_lag);
  j.coordinator.controller = j.controller;
  j.coordinator.pool.pooled = policy_pools(j.controller.policy);
  // Backup workers sit out as in a job (docs/nd.md): the same Controller decides; the
  // all-reduce of a step is over the ranks that take part.
  const int backups = c.backup_workers < 0 ? std::min(1, n - 1) : c.backup_workers;
  j.coordinator.pool.backup_workers = j.coordinator.pool.pooled ? backups : 0;
  if (const std::string why = backup_workers_problem(backups, n); !why.empty()) throw UsageError("simulator: " + why);
  j.coordinator.controller.backup_workers = backups;
  j.coordinator.pool.chunks_per_share = c.chunks_per_share;
  j.coordinator.pool.first_chunk = c.first_chunk;
  j.coordinator.pool.mechanism =
      c.pool_mechanism == PoolMechanism::deadline ? PoolMechanism::deadline : PoolMechanism::counter;
  return j;
}

// The pool of a simulated pooled step: a plain counter whose claims (and looks) cost the
// claiming rank one remote atomic on its virtual clock.
class SimPool final : public agent::StepPool {
 public:
  explicit SimPool(double atomic_seconds) : atomic_seconds_(atomic_seconds) {}
  void begin_step() { counter_.reset(); }
  void use_clock(agent::VirtualClock* clock) { clock_ = clock; }
  std::int64_t claim(std::int64_t want, std::int64_t global_batch, std::int64_t& before) override {
    charge();
    return counter_.claim(want, global_batch, before);
  }
  [[nodiscard]] std::int64_t claimed() override {
    charge();
    return counter_.claimed();
  }
  [[nodiscard]] std::int64_t atomics() const noexcept { return atomics_; }

 private:
  void charge() {
    ++atomics_;
    if (clock_) clock_->wait(atomic_seconds_);
  }
  agent::CounterPool counter_;
  double atomic_seconds_;
  agent::VirtualClock* clock_ = nullptr;
  std::int64_t atomics_ = 0;
};

double wall_now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// The simulated ranks: one Agent and one virtual clock each.
class Ranks {
 public:
  Ranks(const Job& job, const Plan& first, double atomic_seconds)
      : clocks_(job.emulation.speeds.size()),
        pool_(atomic_seconds),
        by_deadline_(job.coordinator.pool.mechanism == PoolMechanism::deadline) {
    const int n = static_cast<int>(clocks_.size());
    agents_.reserve(clocks_.size());
    auto plan = std::make_shared<const Plan>(first);
    for (int i = 0; i < n; ++i) {
      agents_.emplace_back(i, n, job.ledger, job.emulation, clocks_[static_cast<std::size_t>(i)], std::string(),
                           job.coordinator.pool);
      agents_.back().reset_plan(plan);
    }
    ready_.resize(clocks_.size());
  }

  // Every rank's step up to the gradient all-reduce, which ends when the last rank is ready.
  // Returns the step's reports; `mean_t`/`max_t`: the ranks' data + compute times.
  std::vector<protocol::StepReport> run_step(double t0, double overhead, double chunk_overhead, double allreduce,
                                             double& end, double& mean_t, double& max_t) {
    for (std::size_t i = 0; i < agents_.size(); ++i) {
      clocks_[i].set(t0);
      (void)agents_[i].begin();
      clocks_[i].wait(overhead);
      agents_[i].mark_data_ready();
    }
    if (agents_.front().plan().pooled) {
      claim_until_drained(chunk_overhead);
    } else {
      for (auto& a : agents_) a.mark_compute_done(0.0);  // waits out b * c / speed_i on the virtual clock
    }
    double sum_t = 0.0, last = t0;
    for (std::size_t i = 0; i < agents_.size(); ++i) {
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

  // A pooled step: every rank claims and computes micro-chunks until the pool is drained, the
  // claims taken in the order of the ranks' virtual times (ties by rank), as a job's would.
  void claim_until_drained(double chunk_overhead) {
    pool_.begin_step();
    using Event = std::pair<double, std::size_t>;
    std::priority_queue<Event, std::vector<Event>, std::greater<>> next;
    for (std::size_t i = 0; i < agents_.size(); ++i) next.emplace(clocks_[i].now(), i);
    while (!next.empty()) {
      const std::size_t i = next.top().second;
      next.pop();
      pool_.use_clock(&clocks_[i]);
      if (agents_[i].next_chunk(by_deadline_ ? nullptr : &pool_).empty()) {
        agents_[i].mark_compute_done();
        continue;
      }
      clocks_[i].wait(chunk_overhead);
      agents_[i].chunk_done(0.0);  // waits out the chunk's modelled compute
      next.emplace(clocks_[i].now(), i);
    }
    pool_.use_clock(nullptr);
  }

  [[nodiscard]] std::int64_t atomics() const noexcept { return pool_.atomics(); }

  // After a restart: every rank resumes where the restored coordinator stands.
  void resume(const protocol::StepCoordinator& c, const dds::LedgerOptions& ledger) {
    const protocol::ResumeState state = c.resume_state();
    dds::LedgerOptions order = ledger;
    order.shard_size = state.shard_size;
    order.shuffle_shards = state.shuffle_shards;
    order.shuffle_within_shard = state.shuffle_within_shard;
    for (auto& a : agents_) {
      a.reset_plan(c.plans().current_ptr(), c.plans().pending());
      a.resume(state, order);
    }
  }

  // Every rank ends its open step before its reply (a pipelined step: Agent::pass).
  void pass() {
    for (auto& a : agents_) a.pass();
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
  SimPool pool_;
  bool by_deadline_;
};

// A restart's job: the ranks it leaves out come back as ranks at the median speed (a replacement
// node), with no scheduled change of their own.
Job replacement_job(Job job, const RestartDecision& d) {
  std::vector<double> sorted = job.emulation.speeds;
  std::nth_element(sorted.begin(), sorted.begin() + static_cast<std::ptrdiff_t>(sorted.size() / 2), sorted.end());
  const double median = sorted[sorted.size() / 2];
  for (const int rank : d.ranks) {
    job.emulation.speeds[static_cast<std::size_t>(rank)] = median;
    std::erase_if(job.emulation.schedule, [&](const SpeedChange& c) { return c.rank == rank; });
  }
  return job;
}

std::size_t plan_bytes(const Plan& p) {
  detail::ByteWriter w;
  encode_plan(p, w);
  return w.bytes().size();
}

}  // namespace

double NetworkModel::worst_factor(int p) const {
  double worst = 1.0;
  for (int i = 0; i < p && i < static_cast<int>(link_factor.size()); ++i)
    worst = std::max(worst, link_factor[static_cast<std::size_t>(i)]);
  return worst;
}

double NetworkModel::worst_beta(int p) const { return beta * worst_factor(p); }

double NetworkModel::factor(int rank) const {
  return rank < static_cast<int>(link_factor.size()) ? std::max(1.0, link_factor[static_cast<std::size_t>(rank)]) : 1.0;
}

double NetworkModel::link_seconds(double f, double bytes, double burst) const {
  if (f <= 1.0) return bytes * beta;
  const double fast = std::min(bytes, burst);
  return (fast + (bytes - fast) * f) * beta;
}

namespace {

// Each rank's link over one all-reduce, out of it and into it: the time of the bytes that cross
// it, what is left of its token bucket spent in the order the messages are priced.
class LinkBuckets {
 public:
  LinkBuckets(const NetworkModel& m, int p) : m_(m), out_(static_cast<std::size_t>(p), m.link_burst_bytes), in_(out_) {}
  double out(int rank, double n) { return spend(out_, rank, n); }
  double in(int rank, double n) { return spend(in_, rank, n); }
  // `n` bytes from `from` to `to`: the slower of their way out and their way in.
  double way(int from, int to, double n) { return std::max(out(from, n), in(to, n)); }

 private:
  double spend(std::vector<double>& left, int rank, double n) {
    double& burst = left[static_cast<std::size_t>(rank)];
    const double t = m_.link_seconds(m_.factor(rank), n, burst);
    burst = std::max(0.0, burst - n);
    return t;
  }
  const NetworkModel& m_;
  std::vector<double> out_, in_;
};

}  // namespace

double NetworkModel::binomial_allreduce_seconds(int p, double bytes) const {
  LinkBuckets links(*this, p);
  // A message of the whole vector to `to`, `out` seconds on its sender's way out: the slower of
  // its way out and its way in.
  const auto message = [&](double out, int to) { return alpha + std::max(out, links.in(to, bytes)); };
  // The reduce (libnbc's order, root 0): in round r, rank v (a multiple of 2^r) receives the
  // sum of v + 2^(r-1)'s subtree once both have theirs; held[v]: when v holds its subtree's sum.
  std::vector<double> held(static_cast<std::size_t>(p), 0.0);
  for (int half = 1; half < p; half *= 2) {
    for (int v = 0; v + half < p; v += 2 * half) {
      const auto u = static_cast<std::size_t>(v);
      held[u] = std::max(held[u], held[u + static_cast<std::size_t>(half)]) + message(links.out(v + half, bytes), v);
    }
  }
  // The broadcast: rank v, once it has the result, sends it to all its children at once,
  // v + 2^r for every 2^r > v with v + 2^r < p (rank 0: every power of two below p).
  std::vector<double> has(static_cast<std::size_t>(p), 0.0);
  has[0] = held[0];
  double done = has[0];
  for (int v = 0; v < p; ++v) {
    int first = 1;
    while (first <= v) first *= 2;
    int children = 0;
    for (int step = first; v + step < p; step *= 2) ++children;
    if (children == 0) continue;
    // Its messages leave at once and share its link: each takes as long as all of them.
    const double out = links.out(v, bytes * children);
    for (int step = first; v + step < p; step *= 2) {
      const auto c = static_cast<std::size_t>(v + step);
      has[c] = has[static_cast<std::size_t>(v)] + message(out, v + step);
      done = std::max(done, has[c]);
    }
  }
  return done;
}

double NetworkModel::rabenseifner_allreduce_seconds(int p, double bytes) const {
  LinkBuckets links(*this, p);
  std::vector<double> clock(static_cast<std::size_t>(p), 0.0);
  // a and b exchange (b_to_a may be 0: a one-way message); both wait for the other.
  const auto exchange = [&](int a, int b, double a_to_b, double b_to_a) {
    double& ta = clock[static_cast<std::size_t>(a)];
    double& tb = clock[static_cast<std::size_t>(b)];
    const double took = alpha + std::max(links.way(a, b, a_to_b), b_to_a > 0.0 ? links.way(b, a, b_to_a) : 0.0);
    ta = tb = std::max(ta, tb) + took;
  };
  int pof2 = 1;
  while (pof2 * 2 <= p) pof2 *= 2;
  const int folded = p - pof2;
  // Ranks 0 .. 2 folded - 1 in pairs: they swap halves, and the odd one sends its reduced half
  // to the even one, which stands for both from then on.
  for (int i = 0; i < folded; ++i) {
    exchange(2 * i, 2 * i + 1, bytes / 2.0, bytes / 2.0);
    exchange(2 * i + 1, 2 * i, bytes / 2.0, 0.0);
  }
  const auto rank_of = [&](int v) { return v < folded ? 2 * v : v + folded; };
  // The reduce-scatter: distance 1, 2, 4, ...; half the window each way, the window halved.
  double window = bytes;
  for (int mask = 1; mask < pof2; mask *= 2) {
    for (int v = 0; v < pof2; ++v) {
      if ((v & mask) == 0) exchange(rank_of(v), rank_of(v | mask), window / 2.0, window / 2.0);
    }
    window /= 2.0;
  }
  // The all-gather: the distances back down, the window doubled.
  for (int mask = pof2 / 2; mask >= 1; mask /= 2) {
    for (int v = 0; v < pof2; ++v) {
      if ((v & mask) == 0) exchange(rank_of(v), rank_of(v | mask), window, window);
    }
    window *= 2.0;
  }
  for (int i = 0; i < folded; ++i) exchange(2 * i, 2 * i + 1, bytes, 0.0);  // the result to the folded ranks
  return *std::max_element(clock.begin(), clock.end());
}

double NetworkModel::allreduce_seconds(int p, double bytes) const {
  if (p <= 1) return 0.0;
  // The slowest link carries 2(p-1)/p x bytes each way in a ring, 2 x bytes in a tree.
  const double worst = worst_factor(p);
  const double ring = 2.0 * (p - 1) * alpha + link_seconds(worst, 2.0 * (p - 1) / p * bytes, link_burst_bytes);
  const double tree = 2.0 * log2_levels(p) * alpha + link_seconds(worst, 2.0 * bytes, link_burst_bytes);
  switch (allreduce) {
    case Allreduce::ring:
      return ring;
    case Allreduce::tree:
      return tree;
    case Allreduce::binomial:
      return binomial_allreduce_seconds(p, bytes);
    case Allreduce::rabenseifner:
      return rabenseifner_allreduce_seconds(p, bytes);
    case Allreduce::mpi:  // antdt's MPI reducer (transport/guard.hpp, send_copy_pays)
      return p >= 4 && bytes >= 65536.0 ? rabenseifner_allreduce_seconds(p, bytes)
                                        : binomial_allreduce_seconds(p, bytes);
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

namespace {

// A kill-restart, as a job does it: checkpoint the coordinator (in memory), then a
// new job on as many ranks, the left-out ones replaced, restores it and resumes.
void restart(std::unique_ptr<protocol::StepCoordinator>& coordinator, std::unique_ptr<Ranks>& ranks, Job& job,
             const SimConfig& config, SimResult& r) {
  const RestartDecision decision = *coordinator->restart();
  r.restarts.push_back(decision);
  r.claims += ranks->atomics();
  detail::MemoryState saved;
  coordinator->save(saved);
  job = replacement_job(std::move(job), decision);
  coordinator = std::make_unique<protocol::StepCoordinator>(
      protocol::StepCoordinator::restore(saved, job.coordinator, job.ledger));
  coordinator->set_restart_seconds(config.restart_seconds);
  coordinator->set_profiling_clock(wall_now);
  ranks = std::make_unique<Ranks>(job, coordinator->plans().current(), config.network.atomic_seconds);
  ranks->resume(*coordinator, job.ledger);
}

}  // namespace

SimResult simulate(const SimConfig& config) {
  validate(config);
  Job job = make_job(config);
  const int n = job.controller.world_size;
  auto coordinator = std::make_unique<protocol::StepCoordinator>(
      job.coordinator, job.ledger, equal_plan(job.controller.global_batch, job.controller.caps));
  auto ranks = std::make_unique<Ranks>(job, coordinator->plans().current(), config.network.atomic_seconds);
  coordinator->set_restart_seconds(config.restart_seconds);
  SimResult r;
  r.policy = coordinator->controller().policy_name();
  r.ranks = n;
  r.report_bytes = protocol::encoded_size(protocol::StepReport{});
  r.gather_bytes = r.report_bytes * static_cast<std::size_t>(n);
  r.allreduce_seconds = config.network.allreduce_seconds(n, static_cast<double>(config.gradient_bytes));
  detail::LogHistogram decision, in_controller, in_dds, control, error;
  coordinator->set_profiling_clock(wall_now);
  // The ideal time of the work done: each step's samples at the sum of the ranks' speeds then.
  double ideal_seconds = 0.0, settled_ideal = 0.0;
  double error_sum = 0.0, sum_mean_t = 0.0, sum_max_t = 0.0, now = 0.0, settled_seconds = 0.0;
  // A pipelined step's decision (reply lag 1): made on rank 0's decider while the ranks compute
  // the next step, ready at `ready_at` (simulated time), sent in the next step's round.
  struct Pending {
    protocol::StepDecision decision;
    double ready_at = 0.0;
  };
  std::optional<Pending> pending;
  bool settle_next = false;
  // (coordinator step, simulated seconds) of this step and the one before: a record arrives with
  // its step's decision, one step late when pipelined.
  std::pair<std::int64_t, double> this_step{-1, 0.0}, last_step{-1, 0.0};
  // What rank 0 does with one decision: times it, and counts what its record says.
  const auto decide = [&](std::span<const protocol::StepReport> reports, bool settled) {
    const double t_decide = wall_now(), controller_before = coordinator->controller_seconds();
    const double dds_before = coordinator->dds_seconds();
    protocol::StepDecision d = coordinator->decide(reports, settled);
    const double decided = wall_now() - t_decide;
    in_controller.add(coordinator->controller_seconds() - controller_before);
    in_dds.add(coordinator->dds_seconds() - dds_before);
    decision.add(decided);
    if (d.reply.status != protocol::ReplyStatus::ok)
      throw Error("simulator: the coordinator rejected a step: " + d.reply.error);
    return std::pair{std::move(d), config.charge_decision_time ? decided : 0.0};
  };
  // What the ranks do with a decision sent to them; returns its control bytes and time.
  const auto deliver = [&](const protocol::StepDecision& d) {
    const std::size_t reply_bytes = ranks->apply(d);
    r.reply_bytes_max = std::max(r.reply_bytes_max, reply_bytes + (d.plan ? plan_bytes(*d.plan) : 0));
    if (!d.plan) r.reply_bytes_typical = std::max(r.reply_bytes_typical, reply_bytes);
    if (d.record && d.record->predicted_seconds > 0.0) {
      const double seconds = d.record->step == this_step.first ? this_step.second : last_step.second;
      const double e = std::abs(d.record->predicted_seconds - seconds) / seconds;
      error.add(e);
      error_sum += e;
    }
    if (d.plan) {
      ++r.plan_changes;
      r.last_change_effective_step = d.plan->effective_step;
      if (r.plan_changes == 1) r.settled_from_step = d.plan->effective_step;
    }
    return std::pair{reply_bytes,
                     d.plan ? config.network.broadcast_seconds(n, static_cast<double>(plan_bytes(*d.plan))) : 0.0};
  };
  const auto start = [&] {
    const protocol::StepDecision d = coordinator->start();
    settle_next = d.reply.settle_next;
    (void)ranks->apply(d);
  };
  start();
  for (;;) {
    if (coordinator->finished()) {
      if (!coordinator->restart()) break;
      restart(coordinator, ranks, job, config, r);
      start();
      now += config.restart_seconds;
      r.seconds += config.restart_seconds;
      continue;
    }
    double end = 0.0, mean_t = 0.0, max_t = 0.0;
    const auto sitting = static_cast<int>(coordinator->plans().at(coordinator->step()).sitting.size());
    const double allreduce =
        sitting == 0 ? r.allreduce_seconds
                     : config.network.allreduce_seconds(n - sitting, static_cast<double>(config.gradient_bytes));
    const auto reports =
        ranks->run_step(now, config.overhead_seconds, config.chunk_overhead_seconds, allreduce, end, mean_t, max_t);
    // The round: rank 0 must hold the decision of the step before; it was made meanwhile.
    double waited = 0.0;
    if (pending && pending->ready_at > end) {
      waited = pending->ready_at - end;
      ++r.decision_waits;
      r.decision_wait_seconds += waited;
    }
    std::size_t reply_bytes = 0;
    double exchange = config.network.gather_seconds(n, static_cast<double>(r.report_bytes));
    const bool settle = std::exchange(settle_next, false) ||
                        coordinator->settles(reports, pending ? &pending->decision.reply : nullptr);
    last_step = this_step;
    this_step = {reports.front().step, 0.0};
    if (pending) {
      const auto [bytes, plan_time] = deliver(pending->decision);
      reply_bytes += bytes;
      exchange += plan_time;
      pending.reset();
    }
    double charged = 0.0;
    std::int64_t samples = 0;
    for (const auto& rep : reports) samples += rep.consumed;
    if (settle) {
      auto [d, decided] = decide(reports, true);
      settle_next = d.reply.settle_next;
      charged = decided;
      ++r.settled_steps;
      exchange += config.network.gather_seconds(n, static_cast<double>(reply_bytes + protocol::encoded_size(d.reply)));
      this_step.second = end - now + waited + exchange + charged;
      const auto [bytes, plan_time] = deliver(d);
      reply_bytes += bytes;
      exchange += plan_time;
      this_step.second += plan_time;
    } else {
      exchange += config.network.gather_seconds(n, static_cast<double>(reply_bytes));
      ranks->pass();
      this_step.second = end - now + waited + exchange;
      auto [d, decided] = decide(reports, false);
      pending = Pending{std::move(d), end + waited + exchange + decided};
    }
    const double step_seconds = this_step.second;
    control.add(exchange);
    // From the step the first plan change takes effect, the run starts over for `settled`.
    if (r.plan_changes > 0 && r.steps == r.settled_from_step) settled_seconds = settled_ideal = 0.0;
    const double ideal = static_cast<double>(samples) / ranks->ideal_throughput(r.steps);
    ideal_seconds += ideal;
    settled_ideal += ideal;
    settled_seconds += step_seconds;
    r.samples += samples;
    r.seconds += step_seconds;
    sum_mean_t += mean_t;
    sum_max_t += max_t;
    now += step_seconds;
    ++r.steps;
  }
  r.throughput = r.seconds > 0.0 ? static_cast<double>(r.samples) / r.seconds : 0.0;
  r.ideal_throughput =
      ideal_seconds > 0.0 ? static_cast<double>(r.samples) / ideal_seconds : ranks->ideal_throughput(0);
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
  r.coverage = coordinator->dds().coverage();
  for (const auto& c : r.coverage) r.duplicated += c.duplicated, r.missing += c.missing;
  r.plans = coordinator->controller().history();
  r.pooling = coordinator->controller().pooling_status();
  r.claims += ranks->atomics();
  return r;
}

}  // namespace antdt::sim
