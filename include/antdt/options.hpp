// The options of the step policy and what it reports about the ranks: the part of the
// Controller (policy, Monitor, cost model: docs/controller.md) that a training code sets or reads.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "antdt/emulation.hpp"

namespace antdt {

// alpha: latency of one allreduce (s); beta: seconds per byte on the slowest link (1/bandwidth);
// gradient_bytes: bytes reduced per step (0: the allreduce costs its latency alpha only).
struct CostModelParams {
  double alpha = 20e-6;
  double beta = 1.0 / 5e9;
  std::int64_t gradient_bytes = 0;
};

// Kill-restart (policies that restart, such as nd; docs/nd.md): when a rank has been a
// persistent straggler (it was fine, then stayed slow: lasting contention) for `window` steps
// and the predicted gain beats the measured cost of a restart, the Controller decides to
// checkpoint and restart without it.
struct RestartOptions {
  int max_restarts = 3;             // decisions over the whole run (they survive a restart)
  std::int64_t cooldown_steps = 0;  // steps after a restart before the next decision; 0: window
  int window = 0;                   // steps a rank stays a persistent straggler first; 0: the Monitor window
  bool replaces = true;             // the resubmitted job gets a replacement node at the median speed
};

struct ControllerOptions {
  std::string policy = "dd";       // a registered policy name: "static", "dd", "nd", "auto", or a plugin's
  int world_size = 0;              // 0 = the initial plan's (or, on restore, caps.size() or the saved one)
  std::int64_t global_batch = 0;   // B; 0 = take it from the initial plan
  std::vector<std::int64_t> caps;  // m_i per rank (or one for all); empty = the initial plan's
  double min_gain = 0.05;          // dd: change only if the predicted step time drops by more
  // auto: switch between pooled and plain steps only if the predicted mean step time drops by
  // more (besides the decision model's measured error and the noise of its estimate).
  double min_pool_gain = 0.02;
  std::int64_t min_interval = 10;  // dd: at least this many steps between plan changes
  std::int64_t warmup_steps = 3;   // stats of steps < warmup_steps are not recorded
  int window = 20;                 // Monitor window (steps)
  int persistence = 5;             // consecutive steps a condition must hold before it counts
  double straggler_ratio = 0.85;   // slow: throughput < ratio * cluster median throughput
  std::int64_t plan_lag = 0;       // extra steps between deciding and applying a plan
  // Backup workers: how many ranks may sit out at once (docs/nd.md, "Sitting out"): a rank that
  // is away or costs more than it gives gets no samples and leaves the reduction until a trial
  // shows it pays again. 0: none (the Session sets it from SessionOptions::backup_workers).
  // Policies that rebalance (dd, nd, auto) only.
  int backup_workers = 0;
  // Seconds of steps before a rank that sits out rejoins for its first trial; each trial that
  // fails doubles it, up to 8x. A longer time costs less when ranks stay away long, and finds a
  // rank that came back later.
  double rejoin_after = 1.0;
  // Ranks that never sit out (ascending), e.g. the rank a test kills at a given step.
  std::vector<std::int32_t> never_sit_out;
  CostModelParams cost;
  RestartOptions restart;
  // Each rank's node (empty: one node per rank). A restart leaves out whole nodes, so every
  // rank on a slow rank's node goes with it.
  std::vector<std::string> nodes;
};

// What a rank is to the Controller, and so what the policies do about it (docs/controller.md):
//  - deterministic straggler: slow since it was first assessed (a slower device): dd, nd and
//    auto rebalance its share; a restart would not help;
//  - persistent straggler: was fine, then stayed slow for `persistence` steps (lasting
//    contention): dd, nd and auto rebalance; nd and auto restart without it when that pays;
//  - transient straggler: slow for fewer steps: dd waits it out; nd's pooled steps absorb it;
//    auto pools steps while that pays;
//  - leader: rebalanced like every rank (its share follows its speed) / normal: nothing.
enum class RankClass { normal, leader, transient_straggler, persistent_straggler, deterministic_straggler };
[[nodiscard]] const char* rank_class_name(RankClass c) noexcept;

// The Controller's view of one rank after the latest step. A rank is "slow" in a step when
// its throughput that step is below straggler_ratio x the cluster reference (the median over
// ranks of the window-median throughputs). slow_streak counts consecutive slow steps:
// >= persistence: persistent straggler (a slower GPU or lasting contention); 1..persistence-1:
// transient straggler; otherwise leader if its window median is >= reference / ratio, else normal.
struct RankAssessment {
  RankClass kind = RankClass::normal;
  double throughput = 0.0;       // window median, samples/s
  double relative = 1.0;         // throughput / reference
  double last_throughput = 0.0;  // this step's, samples/s (0: no timed samples)
  std::int64_t batch = 0;        // its batch in the plan in force at the step
  int slow_streak = 0;
  bool was_fine = false;  // has been at or above straggler_ratio x the reference at some step
  // One line with the numbers behind `kind`. Formatted when read through
  // Controller::assessments() (reports), not every step: not current in ControllerContext.
  std::string reason;
};

// A decision to checkpoint and restart the job without some ranks (their nodes).
struct RestartDecision {
  std::int64_t step = -1;          // decided after this step
  std::vector<int> ranks;          // every rank on the nodes left out (the persistent stragglers' nodes)
  std::vector<std::string> nodes;  // those nodes (ControllerOptions::nodes; empty without)
  double x_now = 0.0;              // the job's throughput now, samples/s
  double x_after = 0.0;            // predicted after the restart
  std::int64_t remaining_samples = 0;
  double gain_seconds = 0.0;  // remaining x (1/x_now - 1/x_after)
  double cost_seconds = 0.0;  // measured restart cost
  std::string reason;         // one line with all of the above
};

// How the ranks of a pooled step (nd) learn that its B samples are done (docs/nd.md): counter
// (one-sided atomics on rank 0: exactly B), deadline (a predicted compute time; for jobs across
// nodes), or automatic (counter on one node, else deadline).
enum class PoolMechanism : std::uint8_t { automatic, counter, deadline };

// What a Session (and a Job) trains: the data set size, the schedule, the policy, the
// emulation and the step timeout. Every rank passes the same values (the micro-batch cap and
// the node may differ).
struct SessionOptions {
  std::int64_t dataset_size = 0;     // N samples, indices [0, N)
  std::int64_t global_batch = 0;     // B samples per step across all ranks
  std::int64_t micro_batch_cap = 0;  // this rank's m_i (most samples per micro-step); 0 = global_batch
  std::int64_t shard_size = 0;       // DDS shard length; 0 = one shard, each epoch a full shuffle (docs/dds.md)
  std::uint64_t seed = 0;            // data order seed (shard order, order within shards)
  bool shuffle_shards = true;        // each epoch visits the shards in its own order
  bool shuffle_within_shard = true;  // ... and the samples of each shard (off: contiguous reads)
  std::int64_t max_epochs = 0;       // 0 = unlimited (stop by steps)
  std::int64_t max_steps = 0;        // 0 = unlimited (stop by epochs)
  // Steps a rank runs before it needs rank 0's reply to a step: 1 (rank 0 decides step t while
  // the ranks compute t + 1; plans take effect at t + 2) or 0 (every rank waits for each
  // decision, as before). Stops, checkpoints and the last step are settled either way.
  int reply_lag = 1;
  ControllerOptions controller;  // policy, hysteresis, windows (global_batch/caps are filled in)
  // Policy static only: this split b_i (one per rank, summing to global_batch) instead of equal
  // batches, e.g. the best fixed split found offline to compare dd against. Empty: equal.
  std::vector<std::int64_t> fixed_split;
  // Backup workers (docs/nd.md, "Sitting out"): how many ranks may sit out at once, in
  // [0, ranks - 1]; -1: 1, or 0 on a single rank. 0 turns sitting out off. Policies dd, nd and
  // auto, in programs that can hand their state to a rank that rejoins (can_sit_out).
  int backup_workers = -1;
  // Set by antdt::Job, which hands its registered state to a rank that rejoins: without it no
  // rank sits out (a bare Session cannot bring a rank's model back up to date).
  bool can_sit_out = false;
  int chunks_per_share = 8;  // pooled policies: a micro-chunk is about b_i / this
  double first_chunk = 0.0;  // pooled policies: a step's first chunk is at least this part of b_i, in [0, 1)
  PoolMechanism pool_mechanism = PoolMechanism::automatic;  // pooled policies: counter or deadline
  EmulationOptions emulation;                               // straggler emulation (tests, benchmarks)
  std::int64_t gradient_bytes = 0;                          // size of the reduced buffer, for the cost model
  double device_prior = 0.0;  // this rank's relative speed prior (gpu_relative_throughput),
                              // 0 = unknown; seeds the first split before any measurement
  std::string node_name;      // this rank's node (LaunchInfo::node_name); "" = discover it
  // Seconds rank 0 waits at a step's reduction for the other ranks before it names the ones
  // that did not arrive and every rank throws StallError (docs/errors.md); 0: wait forever,
  // inside the blocking collectives. A waiting rank polls without pause for
  // wait_spin_seconds, then sleeps between polls.
  double step_timeout_seconds = 600.0;
  // Seconds a guarded wait polls before it starts to nap (docs/errors.md). Polling answers
  // fastest. A rank whose cgroup CPU quota binds (fewer cores than it may run on) naps at once
  // whatever this says: polling would spend its quota (docs/controller.md, "A rank the kernel
  // holds back"). In [0, 1].
  double wait_spin_seconds = 0.02;
};

// The policies a ControllerOptions::policy may name ("auto", "dd", "nd", "static", ...), sorted.
[[nodiscard]] std::vector<std::string> policy_names();
// Whether the named policy moves work between ranks (dd, nd: a startup probe is worth it), and
// whether it pools steps (nd: every rank claims micro-chunks of each step until B are done).
// UsageError, listing the known names, for an unknown one.
[[nodiscard]] bool policy_rebalances(const std::string& name);
[[nodiscard]] bool policy_pools(const std::string& name);

// How antdt's messages name an option: as the field a program sets in code
// ("JobOptions::session.emulation.speeds", the default), as the command-line flag that sets it
// ("--emulate-speed": add_job_options in antdt/cli.hpp chooses this), or as a Python keyword
// ("emulate_speed", the Python module's). One style per process.
enum class OptionNames : std::uint8_t { fields, flags, keywords };
void set_option_names(OptionNames style) noexcept;

}  // namespace antdt
