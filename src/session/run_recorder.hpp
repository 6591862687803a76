// Private: rank 0's bookkeeping of the run's step records. Each record updates the running
// totals and goes to the sinks (metrics, timeline files), then is dropped: memory stays flat
// however many steps the run has.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include "antdt/step.hpp"
#include "core/log_histogram.hpp"
#include "core/step_record.hpp"

namespace antdt::detail {

class RunRecorder {
 public:
  void add_sink(RecordSink sink) { sinks_.push_back(std::move(sink)); }

  void record(const StepRecord& rec, const Plan& in_force) {
    double max_t = 0.0, sum_t = 0.0;
    // The step's ideal: its timed samples at the sum of the rates its ranks measured in it.
    // The same compute times make the measured step (below), so ideal <= max_i compute_i.
    double rate = 0.0, timed_samples = 0.0, max_busy = 0.0, min_reduce = -1.0;
    for (const auto& st : rec.ranks) {
      totals_.samples += st.samples;
      max_t = std::max(max_t, st.compute_seconds);
      sum_t += st.compute_seconds;
      if (st.samples > 0 && st.compute_seconds > 0.0) {
        rate += static_cast<double>(st.samples) / st.compute_seconds;
        timed_samples += static_cast<double>(st.samples);
      }
      max_busy = std::max(max_busy, st.data_wait_seconds + st.compute_seconds);
      min_reduce = min_reduce < 0.0 ? st.reduce_seconds : std::min(min_reduce, st.reduce_seconds);
      if (rec.wall_seconds > 0) {
        totals_.data_wait_fraction_sum += st.data_wait_seconds / rec.wall_seconds;
        totals_.reduce_fraction_sum += st.reduce_seconds / rec.wall_seconds;
      }
    }
    if (rate > 0.0) totals_.ideal_seconds += timed_samples / rate;
    // The Monitor's measured step time, max_i(data wait + compute) + min_i reduce, is what the
    // cost model predicts.
    if (const double measured = max_busy + std::max(0.0, min_reduce); rec.predicted_seconds > 0.0 && measured > 0.0) {
      errors_.add(std::abs(rec.predicted_seconds - measured) / measured);
    }
    if (max_t > 0) totals_.idle_fraction_sum += 1.0 - (sum_t / static_cast<double>(rec.ranks.size())) / max_t;
    walls_.add(rec.wall_seconds);
    ++totals_.steps;
    totals_.last_predicted_seconds = rec.predicted_seconds;
    for (const auto& sink : sinks_) sink(rec, in_force);
  }

  // A restored run reports on its own steps only.
  void clear() {
    totals_ = RunTotals{};
    walls_ = LogHistogram{};
    errors_ = LogHistogram{};
  }

  // Scans the histogram for the median: call it for reports, not every step.
  [[nodiscard]] RunTotals totals() const {
    RunTotals t = totals_;
    t.median_wall_seconds = walls_.median();
    t.model_error_median = errors_.median();
    t.model_error_steps = static_cast<std::int64_t>(errors_.count());
    return t;
  }

 private:
  RunTotals totals_;
  LogHistogram walls_;
  LogHistogram errors_;  // the cost model's relative error per step
  std::vector<RecordSink> sinks_;
};

}  // namespace antdt::detail
