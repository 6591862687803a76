// Private: rank 0's bookkeeping of the run's step records. Each record updates the running
// totals and goes to the sinks (metrics, timeline files), then is dropped: memory stays flat
// however many steps the run has.
#pragma once

#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include "antdt/session.hpp"

namespace antdt::detail {

// A median over any number of positive values in constant memory: values are counted in
// logarithmic bins of relative width kResolution (0.1 %) between kLowest and kHighest seconds;
// the median comes back as the middle of its bin, so within 0.05 % of the exact one.
class LogHistogram {
 public:
  static constexpr double kLowest = 1e-7, kHighest = 1e6, kResolution = 1e-3;

  void add(double v) {
    if (counts_.empty()) counts_.assign(bins(), 0);
    ++counts_[bin_of(v)];
    ++total_;
  }
  // The (n/2)-th smallest value (0-based), as the upper median of n values is; 0 when empty.
  [[nodiscard]] double median() const {
    if (total_ == 0) return 0.0;
    std::uint64_t seen = 0;
    for (std::size_t b = 0; b < counts_.size(); ++b) {
      seen += counts_[b];
      if (seen > total_ / 2) return b == 0 ? 0.0 : kLowest * std::pow(1.0 + kResolution, static_cast<double>(b) - 0.5);
    }
    return kHighest;
  }

 private:
  static std::size_t bins() {
    return static_cast<std::size_t>(std::ceil(std::log(kHighest / kLowest) / std::log1p(kResolution))) + 2;
  }
  // Bin 0 holds everything below kLowest (zero included); the last one everything above.
  static std::size_t bin_of(double v) {
    if (!(v >= kLowest)) return 0;
    const double b = std::floor(std::log(v / kLowest) / std::log1p(kResolution)) + 1.0;
    return static_cast<std::size_t>(std::min(b, static_cast<double>(bins() - 1)));
  }

  std::vector<std::uint32_t> counts_;
  std::uint64_t total_ = 0;
};

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
