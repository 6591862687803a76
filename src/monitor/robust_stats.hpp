// Private: small robust statistics shared by the Monitor and the planner.
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

namespace antdt::detail {

// Median of `values`, reordering them. Mean of the two middle values for an even count; 0
// for none.
inline double median_in_place(std::vector<double>& values) {
  if (values.empty()) return 0.0;
  const std::size_t mid = values.size() / 2;
  std::nth_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(mid), values.end());
  const double upper = values[mid];
  if (values.size() % 2 == 1) return upper;
  const double lower = *std::max_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(mid));
  return 0.5 * (lower + upper);
}

inline double median(std::vector<double> values) { return median_in_place(values); }

// Median absolute deviation from `center`.
inline double median_abs_deviation(const std::vector<double>& values, double center) {
  std::vector<double> dev;
  dev.reserve(values.size());
  for (const double v : values) dev.push_back(v > center ? v - center : center - v);
  return median_in_place(dev);
}

}  // namespace antdt::detail
