// In-memory data sets and the synthetic generator.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <string>

#include "antdt/data.hpp"
#include "antdt/error.hpp"
#include "data/random_stream.hpp"

namespace antdt::data {

using synth::mix;
using synth::Stream;

InMemoryDataset::InMemoryDataset(std::vector<float> features, std::vector<std::int32_t> labels, std::int64_t dim,
                                 std::int32_t num_classes)
    : features_(std::move(features)), labels_(std::move(labels)), dim_(dim), num_classes_(num_classes) {
  if (dim_ < 1) throw UsageError("data: dim must be at least 1, got " + std::to_string(dim_));
  if (num_classes_ < 1) throw UsageError("data: num_classes must be at least 1, got " + std::to_string(num_classes_));
  if (features_.size() != labels_.size() * static_cast<std::size_t>(dim_)) {
    throw UsageError("data: " + std::to_string(features_.size()) + " feature values do not make " +
                     std::to_string(labels_.size()) + " samples of dim " + std::to_string(dim_));
  }
  for (std::size_t i = 0; i < labels_.size(); ++i) {
    if (labels_[i] < 0 || labels_[i] >= num_classes_) {
      throw UsageError("data: label " + std::to_string(labels_[i]) + " of sample " + std::to_string(i) +
                       " is outside [0, " + std::to_string(num_classes_) + ")");
    }
  }
}

void InMemoryDataset::read(std::span<const std::int64_t> indices, float* features, std::int32_t* labels) {
  const auto n = size();
  const auto row = static_cast<std::size_t>(dim_);
  for (std::size_t i = 0; i < indices.size(); ++i) {
    const std::int64_t index = indices[i];
    if (index < 0 || index >= n) {
      throw UsageError("data: sample index " + std::to_string(index) + " outside [0, " + std::to_string(n) + ")");
    }
    std::memcpy(features + i * row, features_.data() + static_cast<std::size_t>(index) * row, row * sizeof(float));
    labels[i] = labels_[static_cast<std::size_t>(index)];
  }
}

void InMemoryDataset::set_sample_shape(std::vector<std::int64_t> shape) {
  std::int64_t product = 1;
  std::string text;
  for (const std::int64_t extent : shape) {
    text += (text.empty() ? "" : ", ") + std::to_string(extent);
    if (extent < 1) throw UsageError("data: sample shape [" + text + "...] has an extent < 1");
    product = product > dim_ / extent ? dim_ + 1 : product * extent;  // saturates above dim_
  }
  if (!shape.empty() && product != dim_) {
    throw UsageError("data: sample shape [" + text + "] does not have dim = " + std::to_string(dim_) + " values");
  }
  sample_shape_ = std::move(shape);
}

InMemoryDataset sorted_by_class(const InMemoryDataset& data) {
  const auto& labels = data.labels();
  std::vector<std::size_t> order(labels.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return labels[a] < labels[b]; });
  const auto row = static_cast<std::size_t>(data.dim());
  std::vector<float> features(data.features().size());
  std::vector<std::int32_t> sorted(labels.size());
  for (std::size_t i = 0; i < order.size(); ++i) {
    std::memcpy(features.data() + i * row, data.features().data() + order[i] * row, row * sizeof(float));
    sorted[i] = labels[order[i]];
  }
  InMemoryDataset out(std::move(features), std::move(sorted), data.dim(), data.num_classes());
  out.set_sample_shape(data.sample_shape());
  return out;
}

InMemoryDataset make_synthetic(const SyntheticSpec& spec) {
  if (spec.samples < 1 || spec.dim < 1 || spec.classes < 1 || !(spec.noise >= 0.0f) || spec.first < 0 ||
      spec.first > std::numeric_limits<std::int64_t>::max() - spec.samples) {
    throw UsageError(
        "data: synthetic spec needs samples >= 1, dim >= 1, classes >= 1, noise >= 0 and first >= 0 (got " +
        std::to_string(spec.samples) + ", " + std::to_string(spec.dim) + ", " + std::to_string(spec.classes) + ", " +
        std::to_string(spec.noise) + ", " + std::to_string(spec.first) + ")");
  }
  const auto dim = static_cast<std::size_t>(spec.dim);
  std::vector<float> centres(static_cast<std::size_t>(spec.classes) * dim);
  Stream centre_stream(mix(spec.seed ^ 0x43454E5452455321ULL));
  for (auto& c : centres) c = static_cast<float>(spec.separation * centre_stream.normal());

  std::vector<float> features(static_cast<std::size_t>(spec.samples) * dim);
  std::vector<std::int32_t> labels(static_cast<std::size_t>(spec.samples));
  for (std::int64_t i = 0; i < spec.samples; ++i) {
    Stream s(mix(spec.seed) ^ mix(static_cast<std::uint64_t>(spec.first + i)));
    const auto label = static_cast<std::int32_t>(s.next() % static_cast<std::uint64_t>(spec.classes));
    labels[static_cast<std::size_t>(i)] = label;
    const float* centre = centres.data() + static_cast<std::size_t>(label) * dim;
    float* row = features.data() + static_cast<std::size_t>(i) * dim;
    for (std::size_t d = 0; d < dim; ++d) row[d] = centre[d] + static_cast<float>(spec.noise * s.normal());
  }
  return InMemoryDataset(std::move(features), std::move(labels), spec.dim, spec.classes);
}

}  // namespace antdt::data
