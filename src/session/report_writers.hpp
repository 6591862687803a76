// Private (rank 0, written by the Job): the session-derived fields of the summary, per-step
// metrics (CSV or JSONL) and a Chrome-trace timeline (open in Perfetto or chrome://tracing),
// built from the step records the Session keeps on rank 0. The summary itself is public
// (antdt/report.hpp).
#pragma once

#include <memory>
#include <string>

#include "antdt/plan.hpp"
#include "antdt/report.hpp"
#include "antdt/step.hpp"
#include "core/step_record.hpp"
#include "session/session.hpp"

namespace antdt {

// Fills the session-derived fields of `summary` (rank 0 only; elsewhere returns it unchanged).
void summarize_session(const Session& session, RunSummary& summary);

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

}  // namespace antdt
