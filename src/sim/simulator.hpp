// Private: the step protocol's second application (docs/protocol.md): a discrete-event
// simulation of a data-parallel job that runs the REAL step code with no MPI and no sleeping.
// One Agent per simulated rank (with a virtual clock) and one StepCoordinator, exactly as in a
// job: the real DDS ledger, step batches, commits and coverage counters, the real Monitor,
// Controller and planner. Only the compute and the network are modelled:
//   - rank i's compute for b samples takes b * c / speed_i (x transient slowdowns, x jitter),
//     waited out on its virtual clock by the Agent's own speed emulator;
//   - the network is this file's own model (NetworkModel), independent of the cost model the
//     Controller plans with, so the cost model's prediction error is measured, not assumed.
// Used by antdt-sim, antdt-bench-controller, the perf/ studies and the tests.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "antdt/emulation.hpp"
#include "controller/controller.hpp"
#include "dds/dds.hpp"

namespace antdt::sim {

// The simulated interconnect: every rank's link has latency alpha and beta seconds per byte,
// some links slower (beta x factor). Collectives run at the pace of the slowest link they use.
struct NetworkModel {
  // ring: 2(p-1) latencies, 2(p-1)/p x bytes over the slowest link; tree: a pipelined double
  // binary tree, 2 ceil(log2 p) latencies and 2 x bytes; automatic: the faster of the two for
  // the size, as NCCL picks. binomial: what antdt's MPI reducer gets from Open MPI 4.1 (an
  // in-place MPI_Iallreduce, which libnbc always runs as a reduce to rank 0 along a binomial
  // tree and a broadcast back along it, the whole vector in every message): each message
  // waits for its sender's subtree, crosses the slower of its two links, and a sender's
  // concurrent broadcast messages share its link (binomial_allreduce_seconds). rabenseifner:
  // libnbc's reduce-scatter by recursive halving and all-gather by doubling, ranks beyond a
  // power of two folded in first and served last (rabenseifner_allreduce_seconds). mpi: what
  // antdt's reduction gets from Open MPI 4.1 at this size: rabenseifner from 4 ranks and
  // 64 KiB (antdt then sends from a copy), binomial below.
  enum class Allreduce { automatic, ring, tree, binomial, rabenseifner, mpi };
  Allreduce allreduce = Allreduce::automatic;
  double alpha = 5e-6;              // seconds per message on a link
  double beta = 1.0 / 10e9;         // seconds per byte on a link (10 GB/s)
  std::vector<double> link_factor;  // per rank, multiplies its beta (empty or 1: nominal)
  // A slow link limited by a token bucket (tc tbf, a cloud VM's burst credits): the first
  // `link_burst_bytes` of an all-reduce's traffic each way cross it at the nominal beta, the
  // bucket having refilled while the link idled in the compute (0: no bucket).
  double link_burst_bytes = 0.0;
  double atomic_seconds = 2e-6;  // one remote atomic on rank 0's pool counter (pooled steps)

  // The gradient all-reduce of `bytes` over `p` ranks.
  [[nodiscard]] double allreduce_seconds(int p, double bytes) const;
  // Rank 0's gather of `bytes_each` from every rank (binomial tree: log2 p latencies; the root
  // receives (p-1) x bytes_each), and the matching scatter of each rank's reply.
  [[nodiscard]] double gather_seconds(int p, double bytes_each) const;
  // A broadcast of `bytes` from rank 0 (binomial tree).
  [[nodiscard]] double broadcast_seconds(int p, double bytes) const;
  [[nodiscard]] double worst_beta(int p) const;
  [[nodiscard]] double worst_factor(int p) const;  // the largest link factor among ranks 0 .. p-1, at least 1
  // Rank r's link factor (1 where none is given).
  [[nodiscard]] double factor(int rank) const;
  // Seconds for `bytes` one way over a link of this factor, `burst` of them at the nominal beta.
  [[nodiscard]] double link_seconds(double factor, double bytes, double burst) const;
  [[nodiscard]] double binomial_allreduce_seconds(int p, double bytes) const;
  [[nodiscard]] double rabenseifner_allreduce_seconds(int p, double bytes) const;
};

struct SimConfig {
  std::vector<double> speeds;  // relative speed per rank (1 = 1/c samples/s); its size is the world
  std::int64_t steps = 500;
  std::int64_t dataset_size = 0;        // N; 0: 20 global batches
  std::int64_t max_epochs = 0;          // 0: stop by steps only
  std::int64_t shard_size = 0;          // 0: about 10 global batches, the Session's for an unshuffled order
  double seconds_per_sample = 1e-3;     // c at speed 1
  double overhead_seconds = 0.0;        // data wait of every rank in every step
  std::int64_t gradient_bytes = 0;      // bytes of the gradient all-reduce
  double chunk_overhead_seconds = 0.0;  // pooled steps: per micro-chunk (its read), on top of its claims
  int backup_workers = -1;              // pooled policies (nd): ranks a step may do without (-1: 1, or 0 alone)
  int chunks_per_share = 8;             // pooled policies: a micro-chunk is about b_i / this
  double first_chunk = 0.0;             // pooled policies: a step's first chunk is at least this part of b_i
  PoolMechanism pool_mechanism = PoolMechanism::counter;  // pooled policies: counter or deadline
  EmulationOptions emulation;                             // transient_*, jitter and seed; speeds and c come from above
  ControllerOptions controller;                           // policy, global batch, caps, thresholds, cost model
  NetworkModel network;
  // Kill-restart (policy nd): the cost of one restart (checkpoint, queue, relaunch), charged
  // to the simulated time and given to the Controller as the measured cost (0: unknown, so no
  // restart is decided). A restart replaces the ranks it leaves out with ranks at the median
  // speed, and resumes from a real checkpoint of the coordinator.
  double restart_seconds = 0.0;
  // Add the coordinator's real decision time (measured on this machine) to each simulated step:
  // it is on the critical path between the gather and the replies. Off for reproducible times.
  bool charge_decision_time = true;
  // As SessionOptions::reply_lag (docs/protocol.md): 1, rank 0 decides step t while the ranks
  // compute step t + 1 (its decision time is then charged only where the ranks must wait for
  // it); 0, every step waits for its decision.
  int reply_lag = 1;
};

struct SimResult {
  std::string policy;
  int ranks = 0;
  std::int64_t steps = 0;
  std::int64_t samples = 0;       // committed
  double seconds = 0.0;           // simulated wall time
  double throughput = 0.0;        // samples / seconds
  double ideal_throughput = 0.0;  // sum_i speed_i / c (no transients, no overhead, no network)
  double efficiency = 0.0;        // throughput / ideal_throughput; never above 1
  // The same from the step the first plan change took effect (from step 0 without a change).
  std::int64_t settled_from_step = 0;
  double settled_efficiency = 0.0;
  double idle_fraction = 0.0;  // 1 - sum_steps mean_i t_i / sum_steps max_i t_i
  std::int64_t plan_changes = 0;
  std::int64_t last_change_effective_step = 0;  // 0 when the plan never changed
  // |predicted - simulated| / simulated step time, where the Controller's cost model predicted.
  double prediction_error_median = 0.0;
  double prediction_error_mean = 0.0;
  // The coordinator's decide() per step, real wall time on this machine, and the part of it
  // spent in the Controller (Monitor, classes, policy); the rest is the DDS commit.
  double decision_seconds_median = 0.0;
  double decision_seconds_max = 0.0;
  double controller_seconds_median = 0.0;
  double dds_seconds_median = 0.0;  // the part in the DDS coordinator (commit, coverage, identity)
  // Pipelined steps (reply_lag 1): steps whose round had to wait for rank 0's decision of the
  // step before (it took longer than the step), and the simulated time they waited in all.
  std::int64_t settled_steps = 0;  // steps decided in their own round (no lag, pooled, the last)
  std::int64_t decision_waits = 0;
  double decision_wait_seconds = 0.0;
  // Control traffic: what one rank sends and receives per step (the largest reply, plan steps
  // included), and what rank 0 gathers; and the modelled time of the exchange per step.
  std::size_t report_bytes = 0;
  std::size_t reply_bytes_max = 0;
  std::size_t reply_bytes_typical = 0;  // a reply on a step without a new plan
  std::size_t gather_bytes = 0;         // at rank 0, per step
  std::int64_t claims = 0;              // pooled steps: claims on rank 0's pool counter, all ranks and steps
  double control_seconds_median = 0.0;  // gather + scatter (+ plan broadcast), modelled
  double allreduce_seconds = 0.0;       // modelled, per step
  std::vector<dds::Coordinator::EpochCoverage> coverage;
  std::int64_t duplicated = 0, missing = 0;  // over completed epochs; both must be 0
  std::vector<Plan> plans;                   // the plans of the run, in order (of the last job after restarts)
  std::vector<RestartDecision> restarts;     // the kill-restarts, in order
  PoolingStatus pooling;                     // the step mode's decisions (policy auto), of the last job
};

// Throws UsageError on an empty speed list or bad options (as the Session does).
[[nodiscard]] SimResult simulate(const SimConfig& config);

}  // namespace antdt::sim
