// Backend-independent parts of the MLP: configuration checks, the flat parameter layout,
// deterministic initialisation, and the bridge to the CUDA backend. Private to libantdt.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "model/model.hpp"
#include "runtime/device.hpp"

namespace antdt::detail {

// Layer l maps in -> out. Its weights W_l (row-major [out][in]) start at weight_offset and
// its bias (out floats) at bias_offset = weight_offset + out*in, in the flat parameter vector.
struct LayerShape {
  std::int64_t in = 0;
  std::int64_t out = 0;
  std::int64_t weight_offset = 0;
  std::int64_t bias_offset = 0;
};

struct MlpLayout {
  std::vector<LayerShape> layers;
  std::int64_t parameter_count = 0;
  std::int64_t max_width = 0;          // widest of all layer inputs and outputs
  std::int64_t activation_floats = 0;  // sum of out_l: one sample's stored activations

  [[nodiscard]] std::int64_t input_dim() const { return layers.front().in; }
  [[nodiscard]] std::int64_t num_classes() const { return layers.back().out; }
};

// Validates the config (UsageError with the reason) and lays out the parameters.
[[nodiscard]] MlpLayout make_layout(const MlpConfig& config);

// The MLP's gradient buckets: one per layer (W_l then b_l), last layer first, which is the
// order backward finishes them; the last layer's ends at parameter_count, so the count slots
// join it.
[[nodiscard]] std::vector<GradientBucket> layer_buckets(const MlpLayout& layout);

// He-uniform weights U(-sqrt(6/in), sqrt(6/in)) and zero biases, from a SplitMix64 stream seeded
// with `seed`: bit-identical on every rank, compiler and backend (no std:: distributions, whose
// output is implementation-defined).
[[nodiscard]] std::vector<float> initial_parameters(const MlpLayout& layout, std::uint64_t seed);

// Floats of optimizer state: P for SGD momentum, 2P for Adam's moments.
[[nodiscard]] std::int64_t optimizer_state_size(OptimizerKind kind, std::int64_t parameter_count);

// Throws UsageError naming the first label outside [0, classes).
void check_labels(const std::int32_t* labels, std::int64_t n, std::int64_t classes);

[[nodiscard]] std::unique_ptr<Model> make_host_mlp(const MlpConfig& config);

// Defined by kernels/cuda in CUDA builds; by kernels/host/cuda_absent.cpp otherwise (where it
// throws DeviceError).
[[nodiscard]] std::unique_ptr<Model> make_cuda_mlp(const MlpConfig& config, const DeviceInfo& device);

}  // namespace antdt::detail
