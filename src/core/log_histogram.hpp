// Private: a median over any number of values in constant memory (step times of a run of a
// million steps, the simulator's decision times).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

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
    max_ = std::max(max_, v);
  }
  [[nodiscard]] std::uint64_t count() const noexcept { return total_; }
  [[nodiscard]] double max() const noexcept { return max_; }
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
  double max_ = 0.0;
};

}  // namespace antdt::detail
