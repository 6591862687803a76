// Host MLP. Shapes are row-major, n samples per micro-batch:
//   forward   Z_l = A_{l-1} W_l^T (sgemm NoTrans/Trans), then one pass A_l = ReLU(Z_l + b_l);
//             the last layer's bias is added inside the softmax pass
//   loss      per row: softmax cross-entropy; dZ_L = softmax - onehot (a SUM over samples, so
//             no 1/n here: apply_update divides by the reduced count B)
//   backward  dW_l += dZ_l^T A_{l-1} (sgemm Trans/NoTrans, beta 1),
//             dA_{l-1} = dZ_l W_l (sgemm), then one pass dZ_{l-1} = dA_{l-1} * [A_{l-1} > 0]
//             that also adds the column sums of dZ_{l-1} to db_{l-1}
// A_l > 0 exactly where Z_l > 0, so only A_l is stored. Every O(n * width^2) operation is a
// BLAS call; the O(n * width) rest is one fused element-wise pass per layer and direction.
//
// Speed notes (measured by antdt-bench-compute, docs/compute.md):
// - The element-wise kernels are small functions over contiguous rows with __restrict
//   pointers, whose main loop runs a multiple of kVectorMultiple iterations and a scalar tail
//   does the rest. GCC's -O2 vectoriser (cost model "very-cheap") only vectorises loops that
//   need neither alias checks nor an epilogue, so this is what makes them SIMD at -O2.
// - Kokkos (Serial on Debian) dispatches rows or blocks, never single elements, and the
//   kernels are noinline: inlined into the lambdas they lose __restrict and stay scalar (the
//   scalar ReLU compiles to a branch that mispredicts on half the elements).
// - The bias gradient is summed inside the pass that produces dZ (no GEMV against a ones
//   vector, no second read of dZ). Those sums are parallel over column blocks and run over the
//   rows in order, so they are race-free and their rounding does not depend on the thread count.
#include "host/mlp_host.hpp"

#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <string>

#include "antdt/config.hpp"
#include "antdt/error.hpp"

#if ANTDT_HAVE_KOKKOS
#include <Kokkos_Core.hpp>
#endif

namespace antdt::detail {

namespace {

// Element-wise loops. Kokkos when built and initialised (antdt::Environment does that);
// otherwise a plain loop, so a host model also works in a program that never set Kokkos up.
template <class Body>
void for_each_index(std::int64_t n, const Body& body) {
#if ANTDT_HAVE_KOKKOS
  if (Kokkos::is_initialized()) {
    Kokkos::parallel_for("antdt::mlp",
                         Kokkos::RangePolicy<Kokkos::DefaultHostExecutionSpace, Kokkos::IndexType<std::int64_t>>(0, n),
                         body);
    return;
  }
#endif
  for (std::int64_t i = 0; i < n; ++i) body(i);
}

template <class T, class Body>
T sum_over_index(std::int64_t n, const Body& body) {
  T total = 0;
#if ANTDT_HAVE_KOKKOS
  if (Kokkos::is_initialized()) {
    Kokkos::parallel_reduce(
        "antdt::mlp_sum", Kokkos::RangePolicy<Kokkos::DefaultHostExecutionSpace, Kokkos::IndexType<std::int64_t>>(0, n),
        body, total);
    return total;
  }
#endif
  for (std::int64_t i = 0; i < n; ++i) body(i, total);
  return total;
}

// Main-loop trip counts are multiples of this (a power of two, and of every SIMD width in floats).
constexpr std::int64_t kVectorMultiple = 16;
// Column block of the bias-gradient passes (floats): rows up to this wide are one block, so
// the pass walks memory in order.
constexpr std::int64_t kColumnBlock = 1024;
// Elements per Kokkos work item in the optimizer.
constexpr std::int64_t kUpdateBlock = 4096;

// op(i) for i in [0, n): a main loop GCC vectorises at -O2, then the scalar tail.
template <class Op>
inline void simd_loop(std::int64_t n, const Op& op) {
  const std::int64_t main = n & ~(kVectorMultiple - 1);
  for (std::int64_t i = 0; i < main; ++i) op(i);
  for (std::int64_t i = main; i < n; ++i) op(i);
}

// z = max(z + b, 0) over one row.
[[gnu::noinline]] void bias_relu_row(float* __restrict z, const float* __restrict b, std::int64_t count) {
  simd_loop(count, [=](std::int64_t j) { z[j] = std::max(z[j] + b[j], 0.0f); });
}

// d = d * [a > 0] over one row piece, and db += d (after the mask).
[[gnu::noinline]] void relu_mask_sum_row(float* __restrict d, const float* __restrict a, float* __restrict db,
                                         std::int64_t count) {
  simd_loop(count, [=](std::int64_t j) {
    const float v = a[j] > 0.0f ? d[j] : 0.0f;
    d[j] = v;
    db[j] += v;
  });
}

// db += d over one row piece.
[[gnu::noinline]] void sum_row(const float* __restrict d, float* __restrict db, std::int64_t count) {
  simd_loop(count, [=](std::int64_t j) { db[j] += d[j]; });
}

[[gnu::noinline]] void sgd_block(float* __restrict p, float* __restrict m, const float* __restrict g, float inv,
                                 float wd, float mu, float lr, std::int64_t count) {
  simd_loop(count, [=](std::int64_t i) {
    const float grad = g[i] * inv + wd * p[i];
    m[i] = mu * m[i] + grad;
    p[i] -= lr * m[i];
  });
}

[[gnu::noinline]] void adam_block(float* __restrict p, float* __restrict m, float* __restrict v,
                                  const float* __restrict g, float inv, float wd, float b1, float b2, float c1,
                                  float c2, float lr, float eps, std::int64_t count) {
  simd_loop(count, [=](std::int64_t i) {
    const float grad = g[i] * inv + wd * p[i];
    m[i] = b1 * m[i] + (1.0f - b1) * grad;
    v[i] = b2 * v[i] + (1.0f - b2) * grad * grad;
    p[i] -= lr * (m[i] / c1) / (std::sqrt(v[i] / c2) + eps);
  });
}

// For a row-major [rows][cols] d: d *= [a > 0] when a is not null, and db[j] += sum_i d[i][j].
// Parallel over column blocks; each block adds its rows in order (see the notes at the top).
void mask_and_sum_columns(float* d, const float* a, float* db, std::int64_t rows, std::int64_t cols) {
  const std::int64_t blocks = (cols + kColumnBlock - 1) / kColumnBlock;
  for_each_index(blocks, [=](std::int64_t blk) {
    const std::int64_t j0 = blk * kColumnBlock;
    const std::int64_t width = std::min(kColumnBlock, cols - j0);
    for (std::int64_t i = 0; i < rows; ++i) {
      const std::int64_t at = i * cols + j0;
      if (a != nullptr) {
        relu_mask_sum_row(d + at, a + at, db + j0, width);
      } else {
        sum_row(d + at, db + j0, width);
      }
    }
  });
}

int blas_int(std::int64_t v) {
  if (v > INT_MAX) throw UsageError("micro-batch too large for 32-bit BLAS: " + std::to_string(v));
  return static_cast<int>(v);
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

HostMlp::HostMlp(const MlpConfig& config)
    : config_(config),
      layout_(make_layout(config)),
      parameters_(initial_parameters(layout_, config.seed)),
      gradients_(static_cast<std::size_t>(layout_.parameter_count + kSampleCountSlots), 0.0f),
      state_(static_cast<std::size_t>(optimizer_state_size(config.optimizer, layout_.parameter_count)), 0.0f),
      activations_(layout_.layers.size()) {}

void HostMlp::zero_gradients() { std::fill(gradients_.begin(), gradients_.end(), 0.0f); }

void HostMlp::reserve(std::int64_t n) {
  if (n <= capacity_) return;
  const auto un = static_cast<std::size_t>(n);
  for (std::size_t l = 0; l < layout_.layers.size(); ++l) {
    activations_[l].resize(un * static_cast<std::size_t>(layout_.layers[l].out));
  }
  delta_a_.resize(un * static_cast<std::size_t>(layout_.max_width));
  delta_b_.resize(un * static_cast<std::size_t>(layout_.max_width));
  row_correct_.resize(un);
  capacity_ = n;
}

BatchResult HostMlp::forward(const float* features, const std::int32_t* labels, std::int64_t n, bool want_gradient) {
  check_labels(labels, n, layout_.num_classes());
  reserve(n);
  const int rows = blas_int(n);
  const float* input = features;
  const std::size_t last = layout_.layers.size() - 1;
  for (std::size_t l = 0; l < layout_.layers.size(); ++l) {
    const LayerShape& s = layout_.layers[l];
    float* z = activations_[l].data();
    const float* w = parameters_.data() + s.weight_offset;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, blas_int(s.out), blas_int(s.in), 1.0f, input,
                blas_int(s.in), w, blas_int(s.in), 0.0f, z, blas_int(s.out));
    if (l != last) {
      const float* b = parameters_.data() + s.bias_offset;
      const std::int64_t out = s.out;
      for_each_index(n, [=](std::int64_t i) { bias_relu_row(z + i * out, b, out); });
    }
    input = z;
  }

  // One pass per row: add the last bias, then softmax cross-entropy in place, so the logits
  // become dLoss/dlogits. exp is taken once per logit, in float; the sums are in double.
  float* logits = activations_[last].data();
  const float* bias = parameters_.data() + layout_.layers[last].bias_offset;
  std::int32_t* row_correct = row_correct_.data();
  const std::int64_t classes = layout_.num_classes();
  BatchResult result;
  result.samples = n;
  result.loss_sum = sum_over_index<double>(n, [=](std::int64_t i, double& loss) {
    float* z = logits + i * classes;
    for (std::int64_t j = 0; j < classes; ++j) z[j] += bias[j];
    std::int64_t arg = 0;
    for (std::int64_t j = 1; j < classes; ++j) arg = z[j] > z[arg] ? j : arg;
    const float zmax = z[arg];
    const std::int32_t y = labels[i];
    const float zy = z[y] - zmax;
    double denom = 0.0;
    for (std::int64_t j = 0; j < classes; ++j) {
      const float e = std::exp(z[j] - zmax);
      denom += static_cast<double>(e);
      if (want_gradient) z[j] = e;
    }
    loss += std::log(denom) - static_cast<double>(zy);
    row_correct[i] = arg == y ? 1 : 0;
    if (want_gradient) {
      for (std::int64_t j = 0; j < classes; ++j) {
        z[j] = static_cast<float>(static_cast<double>(z[j]) / denom) - (j == y ? 1.0f : 0.0f);
      }
    }
  });
  result.correct = sum_over_index<std::int64_t>(n, [=](std::int64_t i, std::int64_t& c) { c += row_correct[i]; });
  return result;
}

BatchResult HostMlp::evaluate(const float* features, const std::int32_t* labels, std::int64_t n) {
  const auto t0 = std::chrono::steady_clock::now();
  if (n <= 0) return {};
  BatchResult r = forward(features, labels, n, false);
  r.device_seconds = seconds_since(t0);
  return r;
}

BatchResult HostMlp::backward(const float* features, const std::int32_t* labels, std::int64_t n,
                              GradientListener* listener) {
  const auto t0 = std::chrono::steady_clock::now();
  if (n <= 0) return {};
  BatchResult r = forward(features, labels, n, true);
  // The count slots (exact digits, src/comm/sample_count.hpp), reported with the last layer.
  add_sample_count(gradients_.data() + layout_.parameter_count, n);
  const int rows = blas_int(n);
  // delta starts as the last layer's dZ (in its activation buffer), then ping-pongs. Each
  // layer's bias gradient is summed by the pass that produced its dZ.
  const float* delta = activations_.back().data();
  {
    const LayerShape& s = layout_.layers.back();
    mask_and_sum_columns(activations_.back().data(), nullptr, gradients_.data() + s.bias_offset, n, s.out);
  }
  for (std::size_t l = layout_.layers.size(); l-- > 0;) {
    const LayerShape& s = layout_.layers[l];
    const float* input = l == 0 ? features : activations_[l - 1].data();
    const int in = blas_int(s.in), out = blas_int(s.out);
    float* dw = gradients_.data() + s.weight_offset;
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, out, in, rows, 1.0f, delta, out, input, in, 1.0f, dw, in);
    if (listener != nullptr) {                         // W_l is final now, b_l was summed with dZ_l
      listener->ready(layout_.layers.size() - 1 - l);  // bucket order: last layer first
      listener->poll();
    }
    if (l > 0) {
      float* next = delta == delta_a_.data() ? delta_b_.data() : delta_a_.data();
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, in, out, 1.0f, delta, out,
                  parameters_.data() + s.weight_offset, in, 0.0f, next, in);
      mask_and_sum_columns(next, input, gradients_.data() + layout_.layers[l - 1].bias_offset, n, s.in);
      delta = next;
    }
  }
  r.device_seconds = seconds_since(t0);
  return r;
}

// A plain loop: P floats against the step's O(n P) GEMM work, in the cache right after the
// reduction wrote them.
bool HostMlp::gradients_finite() {
  return std::all_of(gradients_.begin(), gradients_.end(), [](float v) { return std::isfinite(v); });
}

void HostMlp::apply_update() {
  const std::int64_t count = decode_sample_count(gradients_.data() + layout_.parameter_count);
  if (count <= 0) return;
  ++steps_;
  const float inv = 1.0f / static_cast<float>(count);  // B exact; its float the nearest to it
  const float lr = config_.learning_rate, wd = config_.weight_decay;
  const std::int64_t pcount = layout_.parameter_count;
  float* p = parameters_.data();
  const float* g = gradients_.data();
  float* m = state_.data();
  const std::int64_t blocks = (pcount + kUpdateBlock - 1) / kUpdateBlock;
  if (config_.optimizer == OptimizerKind::sgd) {
    const float mu = config_.momentum;
    for_each_index(blocks, [=](std::int64_t blk) {
      const std::int64_t at = blk * kUpdateBlock;
      sgd_block(p + at, m + at, g + at, inv, wd, mu, lr, std::min(kUpdateBlock, pcount - at));
    });
  } else {
    const float b1 = config_.beta1, b2 = config_.beta2, eps = config_.epsilon;
    const auto t = static_cast<double>(steps_);
    const auto c1 = static_cast<float>(1.0 - std::pow(static_cast<double>(b1), t));
    const auto c2 = static_cast<float>(1.0 - std::pow(static_cast<double>(b2), t));
    float* v = m + pcount;
    for_each_index(blocks, [=](std::int64_t blk) {
      const std::int64_t at = blk * kUpdateBlock;
      adam_block(p + at, m + at, v + at, g + at, inv, wd, b1, b2, c1, c2, lr, eps, std::min(kUpdateBlock, pcount - at));
    });
  }
}

void HostMlp::set_parameters(std::span<const float> values) {
  if (static_cast<std::int64_t>(values.size()) != layout_.parameter_count) {
    throw UsageError("set_parameters: got " + std::to_string(values.size()) + " values for a model with " +
                     std::to_string(layout_.parameter_count) + " parameters; check the layer widths");
  }
  std::copy(values.begin(), values.end(), parameters_.begin());
}

void HostMlp::set_optimizer_state(std::span<const float> values) {
  if (values.size() != state_.size()) {
    throw UsageError("set_optimizer_state: got " + std::to_string(values.size()) + " values, the optimizer has " +
                     std::to_string(state_.size()) + "; check the optimizer kind and layer widths");
  }
  std::copy(values.begin(), values.end(), state_.begin());
}

void HostMlp::set_optimizer_steps(std::int64_t steps) {
  if (steps < 0) throw UsageError("optimizer steps must be >= 0");
  steps_ = steps;
}

std::int64_t HostMlp::bytes_per_sample() const {
  // Stored activations, two backward buffers and the per-row flag.
  return static_cast<std::int64_t>(sizeof(float)) * (layout_.activation_floats + 2 * layout_.max_width) +
         static_cast<std::int64_t>(sizeof(std::int32_t));
}

std::int64_t HostMlp::fixed_bytes() const {
  return static_cast<std::int64_t>(sizeof(float)) *
         (2 * layout_.parameter_count + kSampleCountSlots + static_cast<std::int64_t>(state_.size()));
}

std::unique_ptr<Model> make_host_mlp(const MlpConfig& config) { return std::make_unique<HostMlp>(config); }

}  // namespace antdt::detail
