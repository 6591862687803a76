// Non-finite features: the scan, and the view of a data set without the samples it found.
//
// A sample with a NaN or an infinite feature poisons the gradient of every step it is in, and
// through the reduction every rank's parameters. It is found before training, not when it is
// read: the DDS must know N, the number of samples it hands out exactly once per epoch, before
// the first step, and a sample dropped only when a rank meets it would leave that epoch short.
// So the whole set is scanned once (each rank a slice), and the samples that are kept are
// renumbered 0..N'-1 by SubsetDataset; the DDS then shards N' samples and never sees the rest.
#include <algorithm>
#include <cmath>
#include <string>

#include "antdt/data.hpp"
#include "antdt/error.hpp"

namespace antdt::data {

std::vector<std::int64_t> find_non_finite(Dataset& data, std::int64_t first, std::int64_t last, std::int64_t chunk) {
  if (first < 0 || last > data.size() || first > last) {
    throw UsageError("find_non_finite: [" + std::to_string(first) + ", " + std::to_string(last) +
                     ") is not a range of the " + std::to_string(data.size()) + " samples");
  }
  if (chunk < 1) throw UsageError("find_non_finite: the chunk must be at least 1 sample");
  const auto row = static_cast<std::size_t>(data.dim());
  std::vector<std::int64_t> bad, indices;
  std::vector<float> features;
  std::vector<std::int32_t> labels;
  for (std::int64_t start = first; start < last; start += chunk) {
    const std::int64_t n = std::min(chunk, last - start);
    indices.resize(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) indices[static_cast<std::size_t>(i)] = start + i;
    features.resize(static_cast<std::size_t>(n) * row);
    labels.resize(static_cast<std::size_t>(n));
    data.read(indices, features.data(), labels.data());
    for (std::int64_t i = 0; i < n; ++i) {
      const float* x = features.data() + static_cast<std::size_t>(i) * row;
      if (!std::all_of(x, x + row, [](float v) { return std::isfinite(v); })) bad.push_back(start + i);
    }
  }
  return bad;
}

SubsetDataset::SubsetDataset(std::unique_ptr<Dataset> base, const std::vector<std::int64_t>& dropped)
    : base_(std::move(base)) {
  if (!base_) throw UsageError("SubsetDataset: no base data set");
  const std::int64_t n = base_->size();
  for (std::size_t i = 0; i < dropped.size(); ++i) {
    if (dropped[i] < 0 || dropped[i] >= n || (i > 0 && dropped[i] <= dropped[i - 1])) {
      throw UsageError("SubsetDataset: the dropped indices must be ascending, unique and in [0, " + std::to_string(n) +
                       ")");
    }
  }
  if (static_cast<std::int64_t>(dropped.size()) == n) {
    throw UsageError("every one of the " + std::to_string(n) +
                     " samples has a non-finite feature; nothing to train on");
  }
  kept_.reserve(static_cast<std::size_t>(n) - dropped.size());
  std::size_t d = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    if (d < dropped.size() && dropped[d] == i) {
      ++d;
    } else {
      kept_.push_back(i);
    }
  }
}

void SubsetDataset::read(std::span<const std::int64_t> indices, float* features, std::int32_t* labels) {
  mapped_.resize(indices.size());
  const auto n = size();
  for (std::size_t i = 0; i < indices.size(); ++i) {
    if (indices[i] < 0 || indices[i] >= n) {
      throw UsageError("data: sample index " + std::to_string(indices[i]) + " outside [0, " + std::to_string(n) + ")");
    }
    mapped_[i] = kept_[static_cast<std::size_t>(indices[i])];
  }
  base_->read(mapped_, features, labels);
}

}  // namespace antdt::data
