// Backend-independent MLP code: parsing, layout, initialisation, micro-batching, and the
// make_mlp dispatch.
#include "host/mlp_common.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <string>

#include "antdt/error.hpp"
#include "antdt/plan.hpp"
#include "runtime/device_copy.hpp"

namespace antdt {

OptimizerKind parse_optimizer(std::string_view text) {
  if (text == "sgd") return OptimizerKind::sgd;
  if (text == "adam") return OptimizerKind::adam;
  throw UsageError("invalid optimizer '" + std::string(text) + "': use sgd or adam");
}

std::vector<std::int64_t> parse_layers(std::string_view text) {
  std::vector<std::int64_t> layers;
  std::size_t pos = 0;
  while (true) {
    const std::size_t comma = text.find(',', pos);
    const std::string_view item =
        text.substr(pos, comma == std::string_view::npos ? std::string_view::npos : comma - pos);
    std::int64_t value = 0;
    const auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), value);
    if (item.empty() || ec != std::errc() || end != item.data() + item.size() || value < 1) {
      throw UsageError("invalid layer list '" + std::string(text) + "': entry '" + std::string(item) +
                       "' is not a positive integer; write widths like 32,64,10");
    }
    layers.push_back(value);
    if (comma == std::string_view::npos) break;
    pos = comma + 1;
  }
  if (layers.size() < 2) {
    throw UsageError("invalid layer list '" + std::string(text) +
                     "': give at least input_dim and num_classes, e.g. 32,64,10");
  }
  return layers;
}

std::int64_t micro_steps(std::int64_t n, std::int64_t cap) {
  if (cap < 1) throw UsageError("micro-batch cap must be >= 1, got " + std::to_string(cap));
  if (n <= 0) return 0;
  return (n + cap - 1) / cap;
}

std::unique_ptr<Model> make_mlp(const MlpConfig& config, const DeviceInfo& device) {
  if (device.backend == Backend::cuda) return detail::make_cuda_mlp(config, device);
  return detail::make_host_mlp(config);
}

std::int64_t micro_batch_cap(const Model& model, const DeviceInfo& device, double fraction, std::int64_t hard_max) {
  if (!(fraction > 0.0 && fraction <= 1.0)) throw UsageError("memory fraction must be in (0, 1]");
  if (hard_max < 1) throw UsageError("micro-batch hard_max must be >= 1");
  double free_bytes = static_cast<double>(device.free_memory);
  if (device.backend == Backend::host && device.free_memory == 0) {
    free_bytes = static_cast<double>(kDefaultHostMemoryBudget);
  }
  const double budget = free_bytes * fraction - static_cast<double>(model.fixed_bytes());
  const double per_sample = static_cast<double>(std::max<std::int64_t>(model.bytes_per_sample(), 1));
  const double cap = std::floor(budget / per_sample);
  if (!(cap >= 1.0)) return 1;
  if (cap >= static_cast<double>(hard_max)) return hard_max;
  return static_cast<std::int64_t>(cap);
}

BatchResult accumulate_micro_batches(Model& model, const float* features, const std::int32_t* labels, std::int64_t n,
                                     std::int64_t cap, GradientListener* listener) {
  return accumulate_micro_batches(model, features, labels, split_micro_batches(n, cap), listener);
}

BatchResult accumulate_micro_batches(Model& model, const float* features, const std::int32_t* labels,
                                     std::span<const std::int64_t> sizes, GradientListener* listener) {
  BatchResult total;
  const auto dim = model.input_dim();
  std::int64_t first = 0;
  for (std::size_t s = 0; s < sizes.size(); ++s) {
    const std::int64_t count = sizes[s];
    const bool last = s + 1 == sizes.size();
    const BatchResult r = last && listener != nullptr
                              ? model.accumulate_overlapped(features + first * dim, labels + first, count, *listener)
                              : model.accumulate(features + first * dim, labels + first, count);
    total.loss_sum += r.loss_sum;
    total.correct += r.correct;
    total.samples += r.samples;
    total.device_seconds += r.device_seconds;
    first += count;
  }
  return total;
}

BatchResult Model::accumulate_overlapped(const float* features, const std::int32_t* labels, std::int64_t n,
                                         GradientListener& listener) {
  const BatchResult r = accumulate(features, labels, n);
  if (n <= 0) return r;
  if (float* copy = listener.host_copy(); copy != nullptr) {
    const std::vector<float> all = gradient_snapshot(*this);
    std::copy(all.begin(), all.end(), copy);
  }
  const std::size_t buckets = gradient_buckets().size();
  for (std::size_t b = 0; b < buckets; ++b) listener.ready(b);
  return r;
}

bool Model::gradients_finite() {
  const std::vector<float> all = gradient_snapshot(*this);
  return std::all_of(all.begin(), all.end(), [](float v) { return std::isfinite(v); });
}

std::vector<GradientBucket> Model::gradient_buckets() const { return {GradientBucket{0, gradient_count()}}; }

std::vector<float> gradient_snapshot(Model& model) {
  const auto count = static_cast<std::size_t>(model.gradient_count());
  std::vector<float> out(count);
  model.synchronize();
  if (model.backend() == Backend::host) {
    std::copy_n(model.gradient_buffer(), count, out.begin());
  } else {
    detail::copy_device_to_host(out.data(), model.gradient_buffer(), count * sizeof(float));
  }
  return out;
}

namespace detail {

std::vector<GradientBucket> layer_buckets(const MlpLayout& layout) {
  std::vector<GradientBucket> out;
  for (std::size_t l = layout.layers.size(); l-- > 0;) {
    const LayerShape& s = layout.layers[l];
    const bool last = l + 1 == layout.layers.size();  // ends at parameter_count: the count slots follow
    out.push_back({s.weight_offset, s.bias_offset + s.out - s.weight_offset + (last ? kSampleCountSlots : 0)});
  }
  return out;
}

MlpLayout make_layout(const MlpConfig& config) {
  if (config.layers.size() < 2) {
    throw UsageError("MLP needs at least 2 layer widths (input_dim, num_classes), got " +
                     std::to_string(config.layers.size()));
  }
  MlpLayout layout;
  std::int64_t offset = 0;
  for (std::size_t i = 0; i + 1 < config.layers.size(); ++i) {
    LayerShape s;
    s.in = config.layers[i];
    s.out = config.layers[i + 1];
    if (s.in < 1 || s.out < 1) throw UsageError("MLP layer widths must be >= 1");
    s.weight_offset = offset;
    s.bias_offset = offset + s.in * s.out;
    offset = s.bias_offset + s.out;
    layout.max_width = std::max({layout.max_width, s.in, s.out});
    layout.activation_floats += s.out;
    layout.layers.push_back(s);
  }
  if (offset >= (std::int64_t{1} << 31)) throw UsageError("MLP has too many parameters (limit 2^31)");
  layout.parameter_count = offset;
  if (!(config.learning_rate > 0.0f)) throw UsageError("learning rate must be > 0");
  if (config.momentum < 0.0f || config.momentum >= 1.0f) throw UsageError("momentum must be in [0, 1)");
  if (config.beta1 < 0.0f || config.beta1 >= 1.0f || config.beta2 < 0.0f || config.beta2 >= 1.0f) {
    throw UsageError("Adam betas must be in [0, 1)");
  }
  if (!(config.epsilon > 0.0f)) throw UsageError("Adam epsilon must be > 0");
  if (config.weight_decay < 0.0f) throw UsageError("weight decay must be >= 0");
  return layout;
}

std::vector<float> initial_parameters(const MlpLayout& layout, std::uint64_t seed) {
  std::vector<float> p(static_cast<std::size_t>(layout.parameter_count), 0.0f);
  std::uint64_t state = seed;
  auto next = [&state]() {  // SplitMix64
    std::uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  };
  for (const LayerShape& s : layout.layers) {
    const double bound = std::sqrt(6.0 / static_cast<double>(s.in));
    for (std::int64_t i = 0; i < s.in * s.out; ++i) {
      const double u = static_cast<double>(next() >> 11) * 0x1.0p-53;  // [0, 1)
      p[static_cast<std::size_t>(s.weight_offset + i)] = static_cast<float>((2.0 * u - 1.0) * bound);
    }
  }
  return p;
}

std::int64_t optimizer_state_size(OptimizerKind kind, std::int64_t parameter_count) {
  return kind == OptimizerKind::adam ? 2 * parameter_count : parameter_count;
}

void check_labels(const std::int32_t* labels, std::int64_t n, std::int64_t classes) {
  for (std::int64_t i = 0; i < n; ++i) {
    if (labels[i] < 0 || labels[i] >= classes) {
      throw UsageError("label " + std::to_string(labels[i]) + " of sample " + std::to_string(i) + " is outside [0, " +
                       std::to_string(classes) + "): check the data set's class count");
    }
  }
}

}  // namespace detail
}  // namespace antdt
