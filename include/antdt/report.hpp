// Observability: the end-of-run summary (human and JSON), per-step metrics (CSV or JSONL),
// and a Chrome-trace timeline (open in Perfetto or chrome://tracing). All of it is built on
// rank 0 from the step records the Session keeps there; writing is local to rank 0.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "antdt/options.hpp"
#include "antdt/plan.hpp"
#include "antdt/session.hpp"

namespace antdt {

struct RunSummary {
  int ranks = 0;
  std::string policy;
  std::string backend;                       // "host" or "cuda"
  std::string device;                        // rank 0's device name, e.g. "NVIDIA H200" or "host (BLAS sgemm + Kokkos)"
  std::string reducer;                       // the gradient reducer: "mpi" or "nccl"
  bool pinned_batches = false;               // rank 0's batch buffers are page-locked (CUDA, --pin-memory)
  bool read_ahead = false;                   // the next step's samples were read during this step (--read-ahead)
  double read_ahead_fraction = 0;            // of the rows trained on, those the read-ahead had ready (all ranks)
  bool reduce_overlap = false;               // each layer's all-reduce started during backward (--reduce-overlap)
  std::string job_id;                        // Slurm job id, "" outside Slurm
  std::vector<std::int64_t> model_layers;    // the model's widths, input,hidden...,classes (if known)
  std::int64_t non_finite_dropped = 0;       // training samples left out for a NaN/Inf feature
  std::int64_t eval_non_finite_dropped = 0;  // the same of the evaluation set
  std::vector<std::string> nodes;            // each rank's node (Slurm node name or host name)
  bool emulated = false;
  std::string emulation;  // EmulationOptions::describe()
  std::vector<double> emulated_speeds;
  std::int64_t steps = 0;
  std::int64_t samples = 0;  // committed samples
  std::int64_t epochs_completed = 0;
  double wall_seconds = 0.0;            // training loop only
  double throughput = 0.0;              // samples / wall_seconds
  std::vector<double> rank_throughput;  // x_i: window median samples per compute-second
  // samples / RunTotals::ideal_seconds: sum_i x_i weighted over the steps, with x_i each
  // step's own measured b_i / compute_i (the same compute as the steps' wall time holds).
  double ideal_throughput = 0.0;
  double efficiency = 0.0;  // throughput / ideal_throughput = ideal_seconds / wall_seconds <= 1
  // The cost model's median relative error predicting a step before it ran (0: none).
  double model_error_median = 0.0;
  double idle_fraction = 0.0;           // mean over steps of 1 - mean(t_i)/max(t_i)
  double data_wait_fraction = 0.0;      // data wait / step time, mean over ranks and steps
  double reduce_fraction = 0.0;         // reduction wait after compute / step time, the same way
  double predicted_step_seconds = 0.0;  // cost model, last plan
  double measured_step_seconds = 0.0;   // median wall step time
  std::int64_t plan_changes = 0;
  std::vector<std::int64_t> final_split;
  std::int64_t duplicated_samples = 0;
  std::int64_t missing_samples = 0;
  double final_loss = 0.0;  // mean training loss over the last step(s)
  std::optional<double> eval_loss;
  std::optional<double> eval_accuracy;
  std::string parameter_checksum;  // FNV-1a 64 of the final parameters (hex)
  std::vector<RankAssessment> assessments;
  std::vector<Plan> plans;
  std::vector<EpochCoverageReport> coverage;
  std::optional<RestartDecision> restart;  // the run stopped for this kill-restart (nd)
  bool stopped = false;                    // the run stopped early on a rank's request (a signal)
  std::string stopped_by;                  // rank 0's signal ("SIGTERM"), "" when another rank's
};

// Fills the session-derived fields of `summary` (rank 0 only; elsewhere returns it unchanged).
void summarize_session(const Session& session, RunSummary& summary);

[[nodiscard]] std::string summary_json(const RunSummary& summary);
[[nodiscard]] std::string summary_text(const RunSummary& summary);

enum class MetricsFormat { csv, jsonl };
// csv when the path ends in .csv, jsonl otherwise.
[[nodiscard]] MetricsFormat metrics_format_for(const std::string& path);

// Streams one row per step and rank as steps end (Session::add_record_sink): step, rank,
// samples, micro_steps, compute/data/reduce/idle seconds, wall seconds, plan version, batch
// share, predicted step seconds. Rows reach the file at least every few seconds, so a job that
// dies keeps what it measured. FileError when the file cannot be opened or a write fails.
class MetricsWriter {
 public:
  MetricsWriter(const std::string& path, MetricsFormat format);
  ~MetricsWriter();
  MetricsWriter(const MetricsWriter&) = delete;
  MetricsWriter& operator=(const MetricsWriter&) = delete;
  void write(const StepRecord& record);
  // Flushes and checks every write; FileError on a failed one.
  void close();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// Streams a Chrome trace (the JSON array format, which a reader accepts without its closing
// bracket, so a job that dies leaves a loadable file): one track per rank with data, compute,
// idle and reduce spans for every step, and an instant event where a plan comes in force.
class TimelineWriter {
 public:
  explicit TimelineWriter(const std::string& path);
  ~TimelineWriter();
  TimelineWriter(const TimelineWriter&) = delete;
  TimelineWriter& operator=(const TimelineWriter&) = delete;
  void write(const StepRecord& record, const Plan& in_force);
  // Closes the array; FileError on a failed write.
  void close();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// FNV-1a 64-bit hash of raw bytes, as 16 hex digits.
[[nodiscard]] std::string fnv1a_hex(const void* data, std::size_t bytes);

}  // namespace antdt
