// The end-of-run summary: what a run came to (RunSummary), as JSON and as text. Job::on_report
// hands it to the program on rank 0 to add its own figures before it is written. The metrics
// and timeline files are written by the Job itself (--metrics, --timeline).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "antdt/options.hpp"
#include "antdt/plan.hpp"
#include "antdt/step.hpp"

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
  // A run resumed from its checkpoints goes on in segments, one per process (a requeue, a
  // resume after a stop or a kill; docs/job.md, "Segments"). The figures below are this
  // segment's, except samples, epochs_completed, run_steps, duplicated_samples,
  // missing_samples and coverage: those are the whole run's.
  int segment = 1;                      // 1 for a fresh run, one more for each resume
  std::int64_t segment_first_step = 0;  // the step of the run this segment began at
  std::int64_t steps = 0;               // this segment's steps
  std::int64_t segment_samples = 0;     // samples trained in this segment's steps
  std::int64_t run_steps = 0;           // the run's steps, every segment's
  std::int64_t samples = 0;             // the run's committed samples, every segment's
  std::int64_t epochs_completed = 0;    // the run's
  double wall_seconds = 0.0;            // training loop only
  double throughput = 0.0;              // samples / wall_seconds
  std::vector<double> rank_throughput;  // x_i: window median samples per compute-second
  // samples / the ideal time: sum_i x_i weighted over the steps, with x_i each
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
  // Backup workers (docs/nd.md, "Sitting out"): how often a rank sat out, and rejoined.
  std::int64_t sit_outs = 0;
  std::int64_t rejoins = 0;
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

// The summary as JSON (what --summary-json writes) and as the end-of-run text report.
[[nodiscard]] std::string summary_json(const RunSummary& summary);
[[nodiscard]] std::string summary_text(const RunSummary& summary);

// FNV-1a 64-bit hash of raw bytes, as 16 hex digits.
[[nodiscard]] std::string fnv1a_hex(const void* data, std::size_t bytes);

}  // namespace antdt
