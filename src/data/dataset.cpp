// In-memory data sets and the synthetic generator.
#include <cmath>
#include <cstring>
#include <string>

#include "antdt/data.hpp"
#include "antdt/error.hpp"

namespace antdt::data {

namespace {

// splitmix64: a fully specified generator, so a synthetic data set is the same everywhere.
constexpr std::uint64_t mix(std::uint64_t x) noexcept {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30U)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27U)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31U);
}

class Stream {
 public:
  explicit Stream(std::uint64_t key) noexcept : state_(key) {}
  std::uint64_t next() noexcept { return mix(state_++ * 0xD1B54A32D192ED03ULL + 0x8CB92BA72F3D8DD7ULL); }
  double uniform() noexcept { return static_cast<double>(next() >> 11U) * 0x1.0p-53; }  // [0, 1)
  // Box-Muller; one draw per call keeps the stream position a simple function of the count.
  double normal() noexcept {
    const double u1 = 1.0 - uniform();  // (0, 1]
    const double u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }

 private:
  std::uint64_t state_;
};

}  // namespace

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

InMemoryDataset make_synthetic(const SyntheticSpec& spec) {
  if (spec.samples < 1 || spec.dim < 1 || spec.classes < 1 || !(spec.noise >= 0.0f)) {
    throw UsageError("data: synthetic spec needs samples >= 1, dim >= 1, classes >= 1 and noise >= 0 (got " +
                     std::to_string(spec.samples) + ", " + std::to_string(spec.dim) + ", " +
                     std::to_string(spec.classes) + ", " + std::to_string(spec.noise) + ")");
  }
  const auto dim = static_cast<std::size_t>(spec.dim);
  std::vector<float> centres(static_cast<std::size_t>(spec.classes) * dim);
  Stream centre_stream(mix(spec.seed ^ 0x43454E5452455321ULL));
  for (auto& c : centres) c = static_cast<float>(spec.separation * centre_stream.normal());

  std::vector<float> features(static_cast<std::size_t>(spec.samples) * dim);
  std::vector<std::int32_t> labels(static_cast<std::size_t>(spec.samples));
  for (std::int64_t i = 0; i < spec.samples; ++i) {
    Stream s(mix(spec.seed) ^ mix(static_cast<std::uint64_t>(i)));
    const auto label = static_cast<std::int32_t>(s.next() % static_cast<std::uint64_t>(spec.classes));
    labels[static_cast<std::size_t>(i)] = label;
    const float* centre = centres.data() + static_cast<std::size_t>(label) * dim;
    float* row = features.data() + static_cast<std::size_t>(i) * dim;
    for (std::size_t d = 0; d < dim; ++d) row[d] = centre[d] + static_cast<float>(spec.noise * s.normal());
  }
  return InMemoryDataset(std::move(features), std::move(labels), spec.dim, spec.classes);
}

}  // namespace antdt::data
