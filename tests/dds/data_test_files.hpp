// What the data tests share: a temporary directory per test process, removed at the end, a
// file's bytes, and a nearest-class-mean classifier.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "antdt/data.hpp"

namespace antdt::test {

class TempDir {
 public:
  explicit TempDir(const std::string& prefix = "antdt-data-test-")
      : path_(std::filesystem::temp_directory_path() / (prefix + std::to_string(::getpid()))) {
    std::filesystem::create_directories(path_);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  [[nodiscard]] std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

inline std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Fits one mean per class on `fit` and returns how many samples of `test` lie nearest (squared
// distance) to the mean of their own class. `per_class` receives fit's class counts.
inline std::int64_t nearest_mean_correct(const data::InMemoryDataset& fit, const data::InMemoryDataset& test,
                                         std::vector<std::int64_t>* per_class = nullptr) {
  const auto dim = static_cast<std::size_t>(fit.dim());
  const auto classes = static_cast<std::size_t>(fit.num_classes());
  std::vector<double> mean(classes * dim, 0.0);
  std::vector<std::int64_t> count(classes, 0);
  for (std::size_t i = 0; i < fit.labels().size(); ++i) {
    const auto c = static_cast<std::size_t>(fit.labels()[i]);
    ++count[c];
    for (std::size_t d = 0; d < dim; ++d) mean[c * dim + d] += fit.features()[i * dim + d];
  }
  for (std::size_t c = 0; c < classes; ++c) {
    for (std::size_t d = 0; d < dim; ++d) mean[c * dim + d] /= static_cast<double>(std::max<std::int64_t>(1, count[c]));
  }
  std::int64_t correct = 0;
  for (std::size_t i = 0; i < test.labels().size(); ++i) {
    std::size_t best = 0;
    double best_dist = 1e300;
    for (std::size_t c = 0; c < classes; ++c) {
      double dist = 0;
      for (std::size_t d = 0; d < dim; ++d) {
        const double e = test.features()[i * dim + d] - mean[c * dim + d];
        dist += e * e;
      }
      if (dist < best_dist) best_dist = dist, best = c;
    }
    correct += static_cast<std::int32_t>(best) == test.labels()[i] ? 1 : 0;
  }
  if (per_class != nullptr) *per_class = count;
  return correct;
}

}  // namespace antdt::test
