// Private: one rank's side of a step (docs/protocol.md). The Agent owns the rank's view of the
// data order (a dds::StepStream and the ShardMap: every step's batch, from which it cuts its own
// slice under the plan, docs/dds.md), the plan in force and the pending one, the step's timers
// and the speed emulator. It does no MPI: the Session carries its reports and replies over the
// communicator; the simulator hands them to the StepCoordinator directly, with a virtual clock.
//
//   StepWork w = agent.begin();          // plan due -> in force; my samples; micro-batches
//   agent.mark_data_ready();             // optional
//   agent.mark_compute_done(seconds);    // before any synchronisation; waits out emulation
//   agent.add_reduce_seconds(seconds);
//   StepReport r = agent.report(loss, correct);
//   ... StepReply for this rank ...
//   StepSummary s = agent.apply(reply, plan);   // the order moves on; next plan, counters
//
// A pooled (non-dedicated) step takes no fixed share: between begin() and mark_compute_done()
// the rank claims micro-chunks from the step's pool (next_chunk) and computes each
// (chunk_done), until the pool is empty (docs/nd.md).
#pragma once

#include <array>
#include <csignal>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "agent/emulation.hpp"
#include "agent/step_pool.hpp"
#include "antdt/plan.hpp"
#include "antdt/step.hpp"
#include "core/plan_rules.hpp"
#include "dds/dds.hpp"
#include "protocol/step_messages.hpp"

namespace antdt::agent {

// The Agent's sense of time. The job's is the steady clock and waits by sleeping; the
// simulator's is virtual: waiting advances it, nothing sleeps.
class Clock {
 public:
  virtual ~Clock() = default;
  [[nodiscard]] virtual double now() = 0;  // seconds, any fixed origin
  virtual void wait(double seconds) = 0;   // <= 0: returns at once
  // Seconds the calling thread has spent ready to run but not running, any fixed origin: the
  // kernel held it (a CPU quota used up, another job on its core). 0 where not known.
  [[nodiscard]] virtual double held() { return 0.0; }
  // CPU seconds the whole process has used, any fixed origin: what a CPU quota charges. < 0
  // where not known.
  [[nodiscard]] virtual double cpu() { return -1.0; }
};

// The calling thread's run delay from /proc/thread-self/schedstat (Linux), in seconds; 0 where
// the kernel does not give it. About a microsecond a call: the file stays open, per thread.
[[nodiscard]] double thread_run_delay_seconds();

class SteadyClock final : public Clock {
 public:
  [[nodiscard]] double now() override;
  void wait(double seconds) override { wait_for(seconds); }
  [[nodiscard]] double held() override { return thread_run_delay_seconds(); }
  [[nodiscard]] double cpu() override;
};

class VirtualClock final : public Clock {
 public:
  [[nodiscard]] double now() override { return now_; }
  void wait(double seconds) override {
    if (seconds > 0.0) now_ += seconds;
  }
  void set(double t) noexcept { now_ = t; }

 private:
  double now_ = 0.0;
};

class Agent {
 public:
  // `clock` must outlive the Agent. UsageError on bad emulation options for this world. `node`
  // names this rank's node for the emulation entries that name one.
  Agent(int rank, int world_size, const dds::LedgerOptions& ledger, const EmulationOptions& emulation, Clock& clock,
        const std::string& node = {}, PoolOptions pool = {});

  // The plan in force from now (start, probe, restore), and any pending one.
  void reset_plan(std::shared_ptr<const Plan> current, std::shared_ptr<const Plan> pending = nullptr);
  // Where a restored run resumes (ResumeState from rank 0): its step, and where its data order
  // stands (`saved_order`: this run's ledger options with the checkpoint's order).
  void resume(const protocol::ResumeState& state, const dds::LedgerOptions& saved_order);

  // Starts the next step: puts a due plan in force, composes the step's batch from the data
  // order and takes this rank's slice of it (b_i samples, fewer only at the end of the data),
  // in micro-batches by the plan's rule. UsageError when a step is open or the run has finished.
  StepWork begin();
  void mark_data_ready();
  // `measured` >= 0 overrides the clock (CUDA event time). Waits out the emulated slowdown.
  // Only the first call of a step counts. In a pooled step it ends the claiming (the
  // chunks' compute was counted by chunk_done) and `measured` is not used.
  void mark_compute_done(double measured = -1.0);
  // Pooled steps: claims this rank's next micro-chunk from `pool`, whose count is an offset into
  // the step's batch, so the chunk is those positions of the batch; empty when the pool is empty
  // (all of the batch is claimed). UsageError outside a pooled step.
  // With `pool` null (PoolMechanism::deadline) the rank computes its own slice, chunk by chunk,
  // until the reply's deadline (or all of it while there is no deadline yet); the rest of the
  // slice is left undone and carried to the next steps.
  std::vector<std::int64_t> next_chunk(StepPool* pool);
  // Pooled steps: the last chunk's compute took `measured` seconds (< 0: since next_chunk
  // returned); waits out the emulated slowdown of the chunk.
  void chunk_done(double measured = -1.0);
  void add_reduce_seconds(double seconds) { reduce_seconds_ += seconds; }
  // Whether a CPU quota binds this rank (its cgroup's, read by the caller), from the next
  // begin(): then report() charges it the time the kernel holds it back (see there).
  // `cores`: what the quota allows (0 where not known). Under a quota of less than one core the
  // report models the rank's own time from its CPU use instead (see report()).
  void set_capped(bool capped, double cores = 0.0) noexcept {
    capped_ = capped;
    quota_cores_ = capped ? cores : 0.0;
  }
  // Asks the run to stop after the current (or next) step: the next report carries it. Safe to
  // call from a signal handler (one volatile sig_atomic_t store).
  void request_stop() noexcept { stop_asked_ = 1; }
  // Asks every rank to checkpoint after the current step (only that one: the request is cleared
  // by the report that carries it).
  void request_checkpoint() noexcept { checkpoint_asked_ = true; }
  // Closes the step's timing and says what the rank did. UsageError without begin(). On a rank
  // under a CPU quota (set_capped) the reported compute time also counts the time the kernel
  // held it back (Clock::held) since its last report outside its compute windows, which count
  // it already: in its data, its update, its waits. Such a rank is stopped wherever its quota
  // runs out, so its slowness need not land where its compute is timed; it does not poll as it
  // waits, so being held there too means its own work used up the quota (docs/controller.md,
  // "A rank the kernel holds back"). Under a quota of less than one core (set_capped's `cores`)
  // and a Clock that knows the process's CPU time, the added time is modelled instead: the CPU
  // used since the last report times (1 / cores - 1), and the compute windows count without the
  // time held in them, so the report is the wall time its CPU use takes at its share, less its
  // CPU outside the windows. Both are the mean over its last 8 reports.
  [[nodiscard]] protocol::StepReport report(double loss_sum, std::int64_t correct);
  // Takes this rank's reply (and the plan that came with it, when reply.plan_follows): the data
  // order moves past the step (carrying what the reply says was left undone). Throws the error
  // rank 0 sent when it rejected the step, and antdt::Error if this rank's view of the order
  // disagrees with rank 0's.
  StepSummary apply(const protocol::StepReply& reply, std::shared_ptr<const Plan> plan = nullptr);
  // A pipelined step (docs/protocol.md): ends the open step before rank 0's reply to it, which
  // comes with the next step's round (apply() takes it then). The data order moves past the
  // whole batch (a pipelined step is never pooled, so it leaves nothing undone).
  void pass();
  // The step passed whose reply has not come yet, or -1.
  [[nodiscard]] std::int64_t passed_step() const noexcept { return passed_step_; }

  // Times `micro_step(n)` `repetitions` times after a warm-up, and more while the timed ones
  // add up to less than kProbeMinSeconds (at most kProbeMaxRepetitions), emulation applied
  // (without transients); returns this rank's samples per second, from the median time.
  double probe(const std::function<void(std::int64_t)>& micro_step, std::int64_t n, int repetitions);
  static constexpr double kProbeMinSeconds = 0.02;
  static constexpr int kProbeMaxRepetitions = 64;

  // The samples the next begin() will take, as far as the Agent knows now (Session::next_samples):
  // exact unless a plan for that step arrives in between or the step now open leaves part of
  // its batch undone.
  [[nodiscard]] std::vector<std::int64_t> next_samples() const;

  [[nodiscard]] int rank() const noexcept { return rank_; }
  [[nodiscard]] std::int64_t step() const noexcept { return step_; }  // the next (or open) step
  [[nodiscard]] bool started() const noexcept { return started_; }
  [[nodiscard]] bool in_step() const noexcept { return in_step_; }
  // The samples this rank took in the step under way (a pooled step: claimed so far).
  [[nodiscard]] std::int64_t samples() const noexcept { return samples_; }
  [[nodiscard]] bool finished() const noexcept { return finished_; }
  // The run ended with a kill-restart decision (finished() is true then too).
  [[nodiscard]] bool restart_requested() const noexcept { return restart_; }
  // The run ended because some rank asked to stop (finished() is true then too).
  [[nodiscard]] bool stopped() const noexcept { return stopped_; }
  [[nodiscard]] const Plan& plan() const noexcept { return plans_.current(); }
  [[nodiscard]] const PlanSchedule& plans() const noexcept { return plans_; }
  [[nodiscard]] std::int64_t completed_epochs() const noexcept { return completed_epochs_; }
  [[nodiscard]] std::int64_t committed_total() const noexcept { return committed_total_; }
  [[nodiscard]] const SpeedEmulator& emulator() const noexcept { return emulator_; }
  // Where the data order stands on this rank (the next batch starts from it).
  [[nodiscard]] const dds::StepStream& stream() const noexcept { return stream_; }
  [[nodiscard]] const PoolOptions& pool() const noexcept { return pool_; }

 private:
  int rank_;
  int world_;
  PoolOptions pool_;
  Clock* clock_;
  dds::ShardMap map_;
  dds::StepStream stream_;
  dds::StepBatch batch_;                    // the open (or last) step's batch
  dds::BatchRange share_;                   // this rank's slice of it
  std::shared_ptr<const Plan> share_plan_;  // the plan share_begin_ is for (held: no address reuse)
  std::int64_t share_begin_ = 0;            // sum of the shares of the ranks before this one
  SpeedEmulator emulator_;
  PlanSchedule plans_;

  std::int64_t step_ = 0;
  bool started_ = false;
  bool finished_ = false;
  bool restart_ = false;
  bool stopped_ = false;
  volatile std::sig_atomic_t stop_asked_ = 0;  // written by request_stop, maybe in a signal handler
  bool checkpoint_asked_ = false;
  std::int64_t completed_epochs_ = 0;
  std::int64_t committed_total_ = 0;
  std::int64_t passed_step_ = -1;   // pass(): the step whose reply is due
  std::int64_t passed_cursor_ = 0;  // ... and where the data order stood after it

  // The open step.
  bool in_step_ = false;
  bool step_pooled_ = false;  // its plan pools it
  bool compute_marked_ = false;
  double t_begin_ = 0.0, t_data_ready_ = 0.0;
  double data_wait_seconds_ = 0.0, compute_seconds_ = 0.0, reduce_seconds_ = 0.0;
  std::int64_t samples_ = 0;
  std::int32_t micro_steps_ = 0;
  // The open pooled step.
  std::int64_t claimed_seen_ = 0;  // the pool's count as of this rank's last claim
  bool pool_empty_ = false;
  std::int64_t chunk_ = 0;  // samples of the chunk being computed
  double deadline_ = 0.0;   // deadline pools: compute-seconds for this step's chunks (0: none)
  double t_chunk_ = 0.0;
  // Clock::held() accounting between two reports, on a capped rank: at the last report (< 0:
  // none), at the start of the open compute window, and summed over the windows since.
  bool capped_ = false, step_capped_ = false;  // set_capped; its value at the open step's begin()
  double quota_cores_ = 0.0, step_quota_cores_ = 0.0;
  double held_at_report_ = -1.0, held_window_start_ = 0.0, held_in_windows_ = 0.0;
  double cpu_at_report_ = -1.0;                  // Clock::cpu() at the last report of a rank under such a quota
  static constexpr std::size_t kHeldWindow = 8;  // reports whose held time is averaged
  std::array<double, kHeldWindow> recent_held_{};
  std::size_t held_count_ = 0;
  // This rank's usual pooled throughput (samples per compute-second): the median of its last
  // kRateWindow steps', what "slowed this step" is measured against.
  static constexpr std::size_t kRateWindow = 5;
  std::vector<double> recent_rates_;
  [[nodiscard]] double usual_rate() const;
  std::vector<std::int64_t> next_chunk_by_deadline(std::int64_t want, double usual);
  std::vector<std::int64_t> claim_chunk(StepPool& pool, std::int64_t want, std::int64_t total);
};

}  // namespace antdt::agent
