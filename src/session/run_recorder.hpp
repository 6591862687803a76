// Private: rank 0's bookkeeping of the run's step records. Each record updates the running
// totals and goes to the sinks (metrics, timeline files), then is dropped: memory stays flat
// however many steps the run has.
#pragma once

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "antdt/session.hpp"
#include "core/log_histogram.hpp"

namespace antdt::detail {

class RunRecorder {
 public:
  void add_sink(RecordSink sink) { sinks_.push_back(std::move(sink)); }

  void record(const StepRecord& rec, const Plan& in_force) {
    double max_t = 0.0, sum_t = 0.0;
    for (const auto& st : rec.ranks) {
      totals_.samples += st.samples;
      max_t = std::max(max_t, st.compute_seconds);
      sum_t += st.compute_seconds;
      if (rec.wall_seconds > 0) {
        totals_.data_wait_fraction_sum += st.data_wait_seconds / rec.wall_seconds;
        totals_.reduce_fraction_sum += st.reduce_seconds / rec.wall_seconds;
      }
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
  }

  // Scans the histogram for the median: call it for reports, not every step.
  [[nodiscard]] RunTotals totals() const {
    RunTotals t = totals_;
    t.median_wall_seconds = walls_.median();
    return t;
  }

 private:
  RunTotals totals_;
  LogHistogram walls_;
  std::vector<RecordSink> sinks_;
};

}  // namespace antdt::detail
