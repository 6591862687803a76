// antdt-train's step loop (Trainer) and what it needs: the data sets, the gradient
// reduction, the streamed output files.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "antdt/data.hpp"
#include "antdt/device.hpp"
#include "antdt/evaluate.hpp"
#include "antdt/launcher.hpp"
#include "antdt/model.hpp"
#include "antdt/read_ahead.hpp"
#include "antdt/reduce.hpp"
#include "antdt/report.hpp"
#include "antdt/session.hpp"
#include "train/options.hpp"

namespace antdt::train {

struct Data {
  std::unique_ptr<data::Dataset> train;
  std::unique_ptr<data::Dataset> eval;  // null without --eval-data
  std::int64_t dropped = 0;             // samples of --data left out for a non-finite feature
  std::int64_t eval_dropped = 0;        // the same of --eval-data
};

// Rows trained from the read-ahead, and rows read while the step waited, over all ranks.
struct ReadAheadCounts {
  std::int64_t ahead = 0, now = 0;
};

// Each step's gradient reduction, and whether it overlaps the backward pass (docs/compute.md
// has the measurements behind auto). Every rank decides alike: same flags, same reducer.
struct Reduction {
  std::unique_ptr<GradientReducer> reducer;
  std::vector<GradientBucket> buckets;
  bool overlap = false;
};

// The metrics and timeline files, opened before the first step and fed as each step ends.
struct Outputs {
  std::optional<MetricsWriter> metrics;
  std::optional<TimelineWriter> timeline;

  Outputs(const TrainOptions& o, Session& session, const std::string& job) {
    if (session.rank() != 0) return;
    if (!o.metrics.empty()) {
      const auto path = expand_job_id(o.metrics, job);
      metrics.emplace(path, metrics_format_for(path));
      session.add_record_sink([this](const StepRecord& r, const Plan&) { metrics->write(r); });
    }
    if (!o.timeline.empty()) {
      timeline.emplace(expand_job_id(o.timeline, job));
      session.add_record_sink([this](const StepRecord& r, const Plan& p) { timeline->write(r, p); });
    }
  }
  void close() {
    if (metrics) metrics->close();
    if (timeline) timeline->close();
  }
};

// The step loop and everything that happens between steps.
struct Trainer {
  const TrainOptions& o;
  Session& session;
  Model& model;
  Data& data;
  Reduction& reduction;
  const DeviceInfo& device;
  const std::vector<std::int64_t>& layers;
  std::int64_t cap;
  std::string job, ckpt_dir;
  // Batch buffers, page-locked on a GPU. Reserved for an even share now; they grow (rarely,
  // geometrically) when the Controller gives this rank more.
  data::Batch batch{o.pin_memory && device.backend == Backend::cuda};
  // Reads each step's samples; with --read-ahead also the next step's while this one computes
  // (docs/data.md). It is gone (its read waited for) before the data sets close.
  data::ReadAhead ahead{*data.train, o.pin_memory&& device.backend == Backend::cuda};
  bool read_ahead = !policy_pools(o.policy) &&  // a pooled step's samples are claimed as it goes
                    (o.read_ahead == "on" ||
                     (o.read_ahead == "auto" && device.backend == Backend::cuda && o.read_mode == "independent"));
  double t_start = 0;
  double relaunch_seconds = 0;  // measured: this job's start, plus earlier restarts' queue wait
  std::int64_t committed_at_start = 0, step_at_start = 0;  // > 0 after a resume
  std::vector<double> recent_loss{};
  double local_loss = 0;  // this rank's loss sum of the step in progress
  std::optional<Evaluation> eval_result{};
  double t_checkpoint = 0;        // MPI_Wtime of the last checkpoint (or the loop's start)
  std::string last_checkpoint{};  // rank 0: its path
  // --sample-log: this rank's file, and the samples of the step under way.
  struct FileCloser {
    void operator()(std::FILE* f) const noexcept { (void)std::fclose(f); }
  };
  std::unique_ptr<std::FILE, FileCloser> sample_log{};
  std::string sample_log_path{};
  std::vector<std::int64_t> trained{};

  bool root() const { return session.rank() == 0; }
  void reserve_batch();
  // Rank 0 writes the checkpoint; every rank learns whether that worked (cli::agree), so a
  // failed write stops the job with exit 3 and one line. Between steps only.
  void save_checkpoint();
  // A non-finite reduced gradient or global loss, found alike on every rank: every rank
  // stops (AgreedFailure, exit 4) before this step is checkpointed (and, for the gradient,
  // before it updates anything: `updated` false). `what` says which it was; one small
  // all-reduce finds the ranks whose own loss was not finite.
  [[noreturn]] void stop_non_finite(const std::string& what, double local_loss, bool updated);
  // One training step: read, compute in micro-batches, reduce, update, end the step.
  StepSummary step();
  // After the reduction: the non-finite check, the update, this rank's requests (a stop
  // signal; rank 0's checkpoint timer), end_step and the sample log.
  StepSummary finish_step(const BatchResult& total);
  [[nodiscard]] bool checkpoint_by_time_due() const;
  void open_sample_log();
  void log_samples(std::int64_t step);
  // A pooled step's compute (nd): claim, read and accumulate micro-chunks until the pool is empty.
  BatchResult pooled_compute();
  void between_steps(const StepSummary& s);
  void progress(const StepSummary& s, std::int64_t done) const;
  // Runs every step; returns the wall time of the loop.
  double run();
  // Collective: the read-ahead rows of every rank.
  ReadAheadCounts read_ahead_counts();
  // Rank 0's report: the text, --summary-json (written whole or not at all: WriteError).
  void report(double wall, const ReadAheadCounts& counts);
};

}  // namespace antdt::train
