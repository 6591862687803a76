// antdt::Job: a training run's whole life, for a training code with its own model.
//
//   int main(int argc, char** argv) {
//     antdt::Environment env(argc, argv);                 // MPI (+ Kokkos), if you have not
//     CLI::App app{"my trainer"};
//     antdt::JobOptions opt;
//     antdt::add_job_options(app, opt);                   // antdt/cli.hpp: --global-batch, --policy,
//     /* your own options */                              //   --checkpoint-*, --resume, ...
//     if (int code = antdt::parse(app, argc, argv, opt); code >= 0) return code;
//     return antdt::run_main("my-trainer", [&] {
//       opt.session.dataset_size = my_data.size();
//       antdt::Job job(opt);
//       job.add_state("w", weights);                      // saved in every checkpoint, back on --resume
//       job.add_state("adam/m", moments);
//       while (job.next_step()) {
//         for (auto batch = job.next_micro_batch(); !batch.empty(); batch = job.next_micro_batch())
//           /* forward, backward: add gradient SUMS over the batch's samples */;
//         job.reduce(gradient_sums);                      // now the mean over the step's B samples
//         /* the optimizer's update */
//         job.add_loss(loss_sum);
//       }
//       return job.exit_code();                           // 0, 75 (kill-restart) or 76 (stopped)
//     });
//   }
//
// What the Job does for the program (docs/job.md):
//  - checks every option and every output path on every rank before anything is read or
//    trained: an output is never an input, never another output, on any rank;
//  - claims the checkpoint directory for this run (a lock, and the run's identity recorded
//    once a resume has checked it), resumes from the newest usable checkpoint on any number of
//    ranks, checkpoints every K steps and every M minutes, atomically: the program's state and
//    antdt's (the data ledger, the Controller) in one file;
//  - turns a stop signal (SIGTERM, SIGUSR1, Ctrl-C) into a checkpoint at a step boundary and
//    exit code 76; a kill-restart into a checkpoint, the nodes to leave out and exit code 75;
//    a stalled rank into exit code 5 on every rank, naming it and its node;
//  - writes the summary, metrics, timeline and progress line, with %j (the Slurm job id) in
//    their paths.
//
// Every call is made by every rank, in the same order, unless it says "local".
#pragma once

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "antdt/options.hpp"
#include "antdt/report.hpp"
#include "antdt/step.hpp"

namespace antdt {

namespace detail {
struct JobAccess;
}

// Where checkpoints go and how often: --checkpoint-dir, --checkpoint-every,
// --checkpoint-minutes, --checkpoint-keep, --resume, --checkpoint-overwrite.
struct CheckpointOptions {
  std::string dir;               // "" = no checkpoints; %j = the Slurm job id
  std::int64_t every_steps = 0;  // 0: by minutes only
  double every_minutes = 10.0;   // since the last checkpoint, rank 0's clock; 0: off
  int keep = 3;                  // the newest K are kept
  bool resume = false;           // continue from the newest usable checkpoint in dir (none: start fresh)
  bool overwrite = false;        // start over in a dir that holds another run's checkpoints, deleting them
};

// The run's outputs, written by rank 0 (%j in a path is the job id): --summary-json,
// --metrics, --timeline, --progress, --progress-every, --log-level, --quiet, --sample-log.
struct OutputOptions {
  std::string summary_json;
  std::string metrics;            // .csv, otherwise JSON lines
  std::string timeline;           // Chrome trace (Perfetto)
  std::string progress = "auto";  // auto (on a terminal), always, never
  std::int64_t progress_every = 10;
  std::string log_level;  // "" = ANTDT_LOG_LEVEL or info
  bool quiet = false;     // no end-of-run report on stdout
  // Every rank writes PATH.RANK: one line "STEP i i ..." per step with the sample indices it
  // trained on (an audit of every sample once per epoch that does not trust antdt's counters).
  std::string sample_log;
};

// Fault injection for tests: --fail-at-step, --fail-rank, --fail-in-checkpoint.
struct FaultOptions {
  std::int64_t fail_at_step = -1;  // --fail-rank kills itself (SIGKILL) as it begins this step
  int fail_rank = 0;
  std::int64_t fail_in_checkpoint = -1;  // rank 0 kills itself half-way through this step's checkpoint
};

struct JobOptions {
  SessionOptions session;  // the data, the schedule, the policy, the emulation, the step timeout
  CheckpointOptions checkpoint;
  OutputOptions output;
  FaultOptions faults;
  std::string stop_signals = "TERM,INT,USR1";  // --stop-signals: TERM, INT, USR1, ... or none
  bool probe = true;                           // --probe: time a few micro-steps first (set_probe)

  // What the program tells the job (no flags):
  // Its name in messages ("my-trainer: error: ...").
  std::string program = "antdt";
  // What makes this run's checkpoints its own besides the registered state, the data set size
  // and the seeds (which the job adds): e.g. {"data", path}, {"model", "cnn-2x32"}. A resume
  // into a directory recorded with other values is refused, naming the difference.
  std::vector<std::pair<std::string, std::string>> identity;
  // The program's input files ({"--data", path}): no output may be one of them, on any rank,
  // through any link.
  std::vector<std::pair<std::string, std::string>> inputs;
  // The --config file, if the program read one: an input too.
  std::string config_file;
};

class Job {
 public:
  // Collective over `comm` (MPI must be initialised: antdt::Environment). Checks the options
  // and every output path on every rank, claims the checkpoint directory, installs the stop
  // signals. Throws on every rank alike: UsageError (exit 2), FileError, ...
  explicit Job(JobOptions options, MPI_Comm comm = MPI_COMM_WORLD);
  ~Job();
  Job(const Job&) = delete;
  Job& operator=(const Job&) = delete;

  // --- The program's own state (before the first next_step; UsageError after it) ----------
  // Saved by rank 0 in every checkpoint under <name> and, on a resume, read back into
  // the same memory on every rank, whatever the number of ranks. So it must be the same on
  // every rank (parameters, optimizer moments, a shared RNG's state). The memory must stay
  // valid and keep its size for the life of the job. Names: [A-Za-z0-9_.-] components joined
  // by '/'. A resume whose checkpoint lacks a name, or holds it at another size, is refused.
  void add_state(const std::string& name, std::span<float> values);
  void add_state(const std::string& name, std::span<double> values);
  void add_state(const std::string& name, std::span<std::int64_t> values);
  // Anything else: `save` gives the bytes to store; `load` gets them back on a resume.
  void add_state(const std::string& name, std::function<std::vector<std::byte>()> save,
                 std::function<void(std::span<const std::byte>)> load);

  // Optional, before the first next_step: one micro-step of n samples (forward and backward,
  // returning when its compute is done), timed a few times at the start of a fresh run under a
  // policy that rebalances, so that the first split follows the ranks' speeds.
  void set_probe(std::function<void(std::int64_t n)> micro_step);
  // Optional: called on every rank after each step has ended (before any checkpoint of it),
  // with what the step came to: for an evaluation every K steps, or the program's own logs.
  void on_step_end(std::function<void(const StepSummary&)> hook);
  // Optional: called on rank 0 before the summary is written, to add the program's figures
  // (its model, an evaluation, a parameter checksum).
  void on_report(std::function<void(RunSummary&)> hook);

  // --- The loop ---------------------------------------------------------------------------
  // Ends the step under way (if any): commits its samples, takes a checkpoint when one is due,
  // handles a stop or a kill-restart. Then begins the next step and returns true, or returns
  // false when the run is over (every epoch or step done, stopped, or restarting), after the
  // final checkpoint and the report. The first call resumes (--resume) or probes.
  bool next_step();
  // Local: the next micro-batch of this rank's part of the step (sample indices, in order),
  // or an empty span when it has none left. Under dd these are the plan's micro-batches of
  // this rank's share; under nd, chunks claimed from the step's pool as this rank goes, so
  // call it again only after computing the last one. The span is valid until the next call.
  std::span<const std::int64_t> next_micro_batch();
  // Sums `gradient_sums` (this rank's sums over the samples it was given this step) over the
  // ranks and divides by the step's sample count B, exact at any split; returns B.
  std::int64_t reduce(std::span<float> gradient_sums);
  // The same for sums kept in fixed point (each sample's gradient times 2^k, rounded to an
  // integer, then added): integer sums are exact and do not depend on their order, so the
  // reduced sums are bit-identical however the step was split and on any number of ranks.
  // Sums over ranks in place and returns B; the caller divides.
  std::int64_t reduce(std::span<std::int64_t> fixed_point_sums);
  // The same for sums in CUDA device memory (`count` floats on CUDA device `device`, the same
  // count on every rank), reduced as the built-in model's on a GPU: NCCL where every rank has
  // a GPU of its own, else MPI through a host copy. In place, after the work queued on the
  // device's blocking streams (libtorch's default stream is one); the sample count rides in the
  // same collective, exact at any split. Returns B; the caller divides (on its device) and
  // passes check_finite() the test of the result. The first call is collective over the job's
  // ranks and picks the reducer (the summary's "reducer"). UsageError in a build without CUDA.
  std::int64_t reduce_device(float* device_sums, std::int64_t count, int device);
  // Collective, for a reduction the program finishes itself (reduce_device): `finite` is the
  // test of the reduced gradient, the same on every rank. False stops the run as reduce() does
  // on a NaN or Inf: NonFiniteError on every rank, before the update and any checkpoint of it.
  void check_finite(bool finite);
  // Collective over the job's ranks, at the same point on every rank: `root`'s bytes into
  // every rank's buffer (the same size on every rank), its wait guarded as every wait of the
  // job is (a stalled rank is a StallError, not a hang). For a program's own start-up values:
  // initial weights drawn on one rank, a vocabulary, a seed.
  void broadcast(std::span<std::byte> bytes, int root);
  // Local: this rank's loss summed over its samples (and how many it got right), for the
  // progress line and the summary. May be called once per micro-batch.
  void add_loss(double loss_sum, std::int64_t correct = 0);
  // Local: asks the run to stop after the step under way (between steps: after the next one),
  // as a stop signal does: a checkpoint of that step, then next_step() returns false on every
  // rank and exit_code() is kExitStopped (76). For a program's own stop condition (a time
  // budget it keeps, a request it reads from a file or a scheduler).
  void request_stop() noexcept;
  // Local: asks for a checkpoint after the step under way (between steps: after the next one),
  // besides the --checkpoint-every/--checkpoint-minutes ones; every rank takes it at the same
  // step. Without a checkpoint directory there is nothing to write and it does nothing.
  void request_checkpoint() noexcept;

  // --- Where the run stands ---------------------------------------------------------------
  [[nodiscard]] int exit_code() const noexcept;         // 0, kExitRestart (75) or kExitStopped (76)
  [[nodiscard]] std::int64_t step() const noexcept;     // the step under way (or next)
  [[nodiscard]] std::int64_t epoch() const noexcept;    // the epoch of the step under way (0-based)
  [[nodiscard]] const StepWork& work() const noexcept;  // this rank's part of the step under way
  [[nodiscard]] bool resumed() const noexcept;          // the first next_step resumed a checkpoint
  [[nodiscard]] bool stopped() const noexcept;          // ended on a stop signal
  [[nodiscard]] int rank() const noexcept;
  [[nodiscard]] int size() const noexcept;
  [[nodiscard]] MPI_Comm comm() const noexcept;  // antdt's own duplicate: never the program's
  [[nodiscard]] const JobOptions& options() const noexcept;
  // The per-rank batch of the plan in force (local).
  [[nodiscard]] const std::vector<std::int64_t>& split() const noexcept;

  struct Impl;

 private:
  friend struct detail::JobAccess;
  std::unique_ptr<Impl> impl_;
};

// Runs `body` and returns its exit code. An antdt error (or any std::exception) becomes one
// line on stderr, "<program>: error: <what>", from the rank that saw it first-hand, and the
// exit code of docs/errors.md, the same on every rank: 2 usage or input, 3 a failed write,
// 4 a NaN or Inf, 5 a stalled rank, 1 anything else. A failure that some ranks did not see
// ends the job (MPI_Abort) rather than leave them waiting.
int run_main(const char* program, const std::function<int()>& body);

}  // namespace antdt
