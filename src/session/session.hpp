// antdt::Session: the per-rank object a training loop talks to. It owns antdt's duplicate
// of the user's communicator, the data sharding (rank 0 hosts the authoritative ledger),
// the Monitor and Controller (rank 0), and this rank's Agent (plan application, timing,
// straggler emulation).
//
// Every call below is COLLECTIVE over the communicator unless it says otherwise: all ranks
// call it, in the same order. One step looks like this on every rank:
//
//   antdt::Session session(MPI_COMM_WORLD, options);
//   while (!session.finished()) {
//     antdt::StepWork work = session.begin_step();        // local: my sample indices + micro-batches
//     load(work.samples);  session.mark_data_ready();     // local (optional mark)
//     for (auto m : work.micro_batches) accumulate gradient SUMS over m samples;
//     session.mark_compute_done();                         // local (optional; CUDA users may pass event time)
//     session.reduce(grads, work.samples.size());          // collective: (1/B) * sum over ranks
//     apply the update;
//     session.end_step(loss_sum);                          // collective: stats, commit, next plan
//   }
//
// A step's global batch is fixed by the data order alone: step t trains on the next B positions
// of the epochs' seeded order, whatever the policy, plan, world size or timing, and the plan
// only divides them among the ranks (docs/dds.md). They are committed (marked trained-on,
// exactly once per epoch) only in end_step, after the reduction. The user's communicator is
// duplicated, never modified.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <mpi.h>

#include "antdt/options.hpp"
#include "antdt/plan.hpp"
#include "antdt/step.hpp"
#include "core/step_record.hpp"
#include "runtime/device.hpp"
#include "transport/comm.hpp"

namespace antdt {

class GradientReducer;
class OverlappedReduction;
class CheckpointWriter;
class CheckpointReader;

class Session {
 public:
  // Collective. Validates options (UsageError), duplicates `comm`, builds the rank-0 state.
  Session(MPI_Comm comm, SessionOptions options);
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // Collective, optional, before the first step: times `micro_step(n)` (which must run one
  // micro-step of n samples and return only when its compute is finished) `repetitions` times,
  // and more while they add up to less than 20 ms (at most 64: a millisecond micro-step timed 3
  // times is noise), on every rank, and lets the planner start from the best predicted split
  // instead of equal batches, where that is predicted to gain more than the min gain. Emulated
  // speeds apply. Returns this rank's measured samples/s (the median of its repetitions).
  double probe(const std::function<void(std::int64_t)>& micro_step, int repetitions = 3);

  // Local. Applies a plan whose effective step has come, and hands out this rank's samples: its
  // slice of the step's batch. The first call is collective (where the data order stands).
  StepWork begin_step();
  // Local, optional: marks the end of data loading for this step.
  void mark_data_ready();
  // Local: the samples the next begin_step() will hand this rank, for reading them ahead
  // (data::ReadAhead): its slice of the next step's batch under the plan that will be in force
  // then. Exact when that plan is known; a plan that arrives in between, a step that leaves
  // part of its batch undone (a deadline pool) or a restore can change them, so a reader must
  // check them against begin_step()'s, as ReadAhead does. Empty for pooled steps.
  [[nodiscard]] std::vector<std::int64_t> next_samples() const;
  // Local, optional: marks local gradients ready (before any sync). `measured_seconds` >= 0
  // overrides the host clock (e.g. CUDA event time). Applies the speed emulation (waits).
  void mark_compute_done(double measured_seconds = -1.0);

  // A pooled step (StepWork::pooled; policy nd, docs/nd.md): this rank's next micro-chunk of
  // the step's global batch, claimed from rank 0's pool by one one-sided atomic; empty when all
  // B samples are claimed (or this rank holds no more). Then: read the chunk,
  // accumulate its gradient sums, chunk_done(); after the last, reduce as in any step.
  [[nodiscard]] std::vector<std::int64_t> next_chunk();
  // Local: the chunk's compute took `measured_seconds` (CUDA event or host time; < 0: the
  // host clock since next_chunk returned). Waits out the emulated slowdown of the chunk.
  void chunk_done(double measured_seconds = -1.0);

  // Collective, the fused fast path of the built-in model: sums `buffer` (count floats,
  // host or device memory matching `reducer`) over ranks in place. Its LAST kSampleCountSlots
  // elements carry the sample count as digits (src/comm/sample_count.hpp), so after the call they
  // hold B, exactly, and the caller divides (antdt::Model's apply_update does). One reduction
  // carries gradients and count together.
  // `call` (a program's own reduction: "Job::reduce_device"): first checks, inside the timed
  // reduction, that every rank passes the same count (transport/collectives.hpp, agree_on_call).
  void reduce_sums(float* buffer, std::int64_t count, GradientReducer& reducer, const char* call = nullptr);
  // Collective: the same for a reduction begun during the compute
  // (GradientReducer::begin_overlapped, fed by Model::accumulate_overlapped); finishes it. The
  // step's reduce time is what is left to wait for here.
  void reduce_sums(OverlappedReduction& reduction);
  // Collective convenience for host buffers without count slots: sums `gradient_sums` over
  // ranks and divides by the global sample count (local_samples >= 0 on every rank; exact at
  // any count: it rides in digit slots of the same all-reduce), which it returns.
  // `call` names the program's call for the check that every rank passes the same size and type
  // (as reduce_sums; nullptr: no check).
  std::int64_t reduce(std::span<float> gradient_sums, std::int64_t local_samples, const char* call = nullptr);
  // Collective: sums integer `sums` (fixed-point gradient sums, say) over ranks in place, exactly
  // and in any order, and returns the global sample count; the caller divides. UsageError, on
  // every rank alike, outside a step or when local_samples is not what this rank was given.
  std::int64_t reduce(std::span<std::int64_t> sums, std::int64_t local_samples, const char* call = nullptr);

  // Collective. Sends this step's report to rank 0 and returns at once with what rank 0 decided
  // about the step before (its totals, a new plan): rank 0 decides this step while every rank
  // computes the next one (the reply lag, SessionOptions::reply_lag, docs/protocol.md). A
  // checkpoint or stop request, a pooled step and the last step are settled: their own decision
  // comes back in the same call. Rank 0 commits each step's samples in its decision.
  StepSummary end_step(double loss_sum = 0.0, std::int64_t correct = 0);

  // True once max_steps are done or every epoch of max_epochs is committed, or the Controller
  // decided a kill-restart (same on all ranks).
  [[nodiscard]] bool finished() const noexcept;
  // The run ended with a kill-restart decision (policy nd, docs/nd.md): checkpoint (rank 0),
  // record the nodes to leave out, and exit with the "restart without these nodes" code.
  [[nodiscard]] bool restart_requested() const noexcept;
  // Local, async-signal-safe: asks the run to stop after the current step (or the next one,
  // between steps). The request rides in this rank's next end_step report; rank 0 then ends
  // the run for every rank at that step, so finished() and stopped() turn true together on all
  // of them. For a signal handler (SIGTERM before a time limit, preemption, Ctrl-C).
  void request_stop() noexcept;
  // Local: asks every rank to checkpoint after the current step (a timer on rank 0, say). The
  // request rides in this rank's next report; end_step then returns a StepSummary with
  // checkpoint_requested set, on every rank at the same step.
  void request_checkpoint() noexcept;
  // The run ended because some rank called request_stop (same on all ranks).
  [[nodiscard]] bool stopped() const noexcept;
  // Rank 0: the decision (its ranks, nodes and the numbers behind it); empty elsewhere.
  [[nodiscard]] std::optional<RestartDecision> restart_decision() const;
  // Rank 0 (no-op elsewhere): the measured cost of a restart of this job, checkpoint plus
  // relaunch, in seconds. Until it is set the Controller decides no restart.
  void set_restart_cost(double seconds);

  // Checkpoint: rank 0 writes the library's state (ledger, controller, plan, step, seeds)
  // under "antdt/" in `writer`; other ranks write nothing. Call after end_step (a step still
  // being decided is decided first, so the checkpoint holds every step that ended).
  void save(CheckpointWriter& writer) const;
  // Collective: rank 0 reads "antdt/" from `reader` (which may come from another world
  // size: the ledger returns uncommitted tails to TODO and the controller re-plans) and
  // every rank resumes at the saved step. `reader` is only dereferenced on rank 0.
  void restore(const CheckpointReader* reader);

  // The ranks that take part in the steps now: every rank, unless some sit out (backup workers,
  // docs/nd.md): then the others. Collectives of a step (a program's own too) go over it.
  [[nodiscard]] const Communicator& comm() const noexcept;
  // Every rank, always.
  [[nodiscard]] const Communicator& world_comm() const noexcept;
  // Between steps (the Job calls it before it checks finished()): the regroup the next step's
  // plan asks for, or at the end of the run the return of every rank that sits out. A rank that
  // sits out waits in here until it rejoins or the run ends.
  void await_turn();
  // The program's state from rank 0 to every rank of comm(), called on each of them when a rank
  // rejoins (antdt::Job broadcasts its registered state). Needs SessionOptions::can_sit_out.
  void set_share_state(std::function<void()> share);
  // Local, on every rank alike: no rank sits out from now on. For a reduction that keeps the
  // communicator it was made with and cannot follow comm() (NCCL; Job::reduce_device).
  void keep_every_rank();
  // This rank sits out now (only between await_turn and its return: false otherwise).
  [[nodiscard]] bool sitting_out() const noexcept;
  // The ranks that sit out now (every rank knows them: they are in the step replies).
  [[nodiscard]] const std::vector<std::int32_t>& sitting_ranks() const noexcept;
  // Rank 0: sit-outs and rejoins decided over the run; elsewhere this rank's own.
  [[nodiscard]] std::int64_t sit_outs() const;
  [[nodiscard]] std::int64_t rejoins() const;
  [[nodiscard]] int rank() const noexcept;
  [[nodiscard]] int size() const noexcept;
  [[nodiscard]] std::int64_t step() const noexcept;                      // the next step to run
  [[nodiscard]] const Plan& plan() const noexcept;                       // plan in force
  [[nodiscard]] const std::vector<Plan>& plan_history() const noexcept;  // rank 0; others: applied plans
  [[nodiscard]] const SessionOptions& options() const noexcept;
  [[nodiscard]] bool emulated() const noexcept;

  // Rank 0 only (empty or no-op elsewhere): the step records as they are made, running
  // totals, coverage, throughput estimates.
  void add_record_sink(RecordSink sink);
  [[nodiscard]] RunTotals totals() const;
  [[nodiscard]] std::vector<EpochCoverageReport> coverage() const;
  [[nodiscard]] std::vector<double> rank_throughput() const;  // x_i: median samples per compute-second
  [[nodiscard]] std::vector<RankAssessment> assessments() const;
  [[nodiscard]] std::int64_t samples_committed() const noexcept;
  // Rank 0 (0 elsewhere): steps of this run that did not train all of their batch (a deadline
  // pool's slowed ranks); their undone samples went to later steps, so from the first such step
  // on the run's steps differ from the ones the data order alone gives (docs/dds.md).
  [[nodiscard]] std::int64_t altered_steps() const;
  [[nodiscard]] double elapsed_seconds() const noexcept;
  // Rank 0: wall time spent in the DDS coordinator (commit, coverage), all steps.
  [[nodiscard]] double dds_seconds() const;
  // Rank 0: wall time the step loop waited for rank 0's own decision of a pipelined step
  // (made on a thread of its own while the ranks compute the next step), all steps.
  [[nodiscard]] double decision_wait_seconds() const noexcept;
  // Every rank's micro-batch cap m_i, as gathered by the constructor (on every rank).
  [[nodiscard]] const std::vector<std::int64_t>& micro_batch_caps() const noexcept;
  // Rank 0: every rank's node name, in rank order (empty elsewhere).
  [[nodiscard]] const std::vector<std::string>& node_names() const noexcept;
  // Bytes this rank received in the last control exchange (its reply; plus a new plan on the
  // steps that issue one): independent of the number of ranks otherwise.
  [[nodiscard]] std::size_t control_bytes_received() const noexcept;
  // Pooled steps: this rank's one-sided atomics on rank 0's pool counter so far, and the wall
  // time they took (the cost of knowing when a step's B samples are claimed).
  struct PoolCost {
    std::int64_t atomics = 0;
    double seconds = 0.0;
  };
  [[nodiscard]] PoolCost pool_cost() const noexcept;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace antdt
