// Host MLP. Shapes are row-major, n samples per micro-batch:
//   forward   Z_l = A_{l-1} W_l^T + b_l  (sgemm NoTrans/Trans), A_l = ReLU(Z_l) except the last
//   loss      per row: softmax cross-entropy; dZ_L = softmax - onehot (a SUM over samples, so
//             no 1/n here: apply_update divides by the reduced count B)
//   backward  dW_l += dZ_l^T A_{l-1} (sgemm Trans/NoTrans, beta 1), db_l += dZ_l^T 1 (sgemv),
//             dA_{l-1} = dZ_l W_l (sgemm), dZ_{l-1} = dA_{l-1} * [A_{l-1} > 0]
// A_l > 0 exactly where Z_l > 0, so only A_l is stored. Every O(n * width^2) operation is a
// BLAS call; the O(n * width) rest is element-wise, run through Kokkos.
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
    Kokkos::parallel_for("antdt::mlp", Kokkos::RangePolicy<Kokkos::DefaultHostExecutionSpace, Kokkos::IndexType<std::int64_t>>(0, n),
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
    Kokkos::parallel_reduce("antdt::mlp_sum",
                            Kokkos::RangePolicy<Kokkos::DefaultHostExecutionSpace, Kokkos::IndexType<std::int64_t>>(0, n),
                            body, total);
    return total;
  }
#endif
  for (std::int64_t i = 0; i < n; ++i) body(i, total);
  return total;
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
      gradients_(static_cast<std::size_t>(layout_.parameter_count + 1), 0.0f),
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
  ones_.assign(un, 1.0f);
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
    const float* b = parameters_.data() + s.bias_offset;
    const std::int64_t out = s.out;
    if (l == last) {
      for_each_index(n, [=](std::int64_t i) {
        for (std::int64_t j = 0; j < out; ++j) z[i * out + j] += b[j];
      });
    } else {
      for_each_index(n, [=](std::int64_t i) {
        for (std::int64_t j = 0; j < out; ++j) z[i * out + j] = std::max(z[i * out + j] + b[j], 0.0f);
      });
    }
    input = z;
  }

  // Softmax cross-entropy per row, in place: the logits become dLoss/dlogits.
  float* logits = activations_[last].data();
  std::int32_t* row_correct = row_correct_.data();
  const std::int64_t classes = layout_.num_classes();
  BatchResult result;
  result.samples = n;
  result.loss_sum = sum_over_index<double>(n, [=](std::int64_t i, double& loss) {
    float* z = logits + i * classes;
    std::int64_t arg = 0;
    for (std::int64_t j = 1; j < classes; ++j) arg = z[j] > z[arg] ? j : arg;
    const float zmax = z[arg];
    double denom = 0.0;
    for (std::int64_t j = 0; j < classes; ++j) denom += std::exp(static_cast<double>(z[j] - zmax));
    const std::int32_t y = labels[i];
    loss += std::log(denom) - static_cast<double>(z[y] - zmax);
    row_correct[i] = arg == y ? 1 : 0;
    if (want_gradient) {
      for (std::int64_t j = 0; j < classes; ++j) {
        z[j] = static_cast<float>(std::exp(static_cast<double>(z[j] - zmax)) / denom) - (j == y ? 1.0f : 0.0f);
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

BatchResult HostMlp::accumulate(const float* features, const std::int32_t* labels, std::int64_t n) {
  const auto t0 = std::chrono::steady_clock::now();
  if (n <= 0) return {};
  BatchResult r = forward(features, labels, n, true);
  const int rows = blas_int(n);
  // delta starts as the last layer's dZ (in its activation buffer), then ping-pongs.
  const float* delta = activations_.back().data();
  for (std::size_t l = layout_.layers.size(); l-- > 0;) {
    const LayerShape& s = layout_.layers[l];
    const float* input = l == 0 ? features : activations_[l - 1].data();
    const int in = blas_int(s.in), out = blas_int(s.out);
    float* dw = gradients_.data() + s.weight_offset;
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, out, in, rows, 1.0f, delta, out, input, in, 1.0f, dw, in);
    cblas_sgemv(CblasRowMajor, CblasTrans, rows, out, 1.0f, delta, out, ones_.data(), 1, 1.0f,
                gradients_.data() + s.bias_offset, 1);
    if (l > 0) {
      float* next = delta == delta_a_.data() ? delta_b_.data() : delta_a_.data();
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, in, out, 1.0f, delta, out,
                  parameters_.data() + s.weight_offset, in, 0.0f, next, in);
      const float* a = input;
      const std::int64_t count = n * s.in;
      for_each_index(count, [=](std::int64_t i) { next[i] = a[i] > 0.0f ? next[i] : 0.0f; });
      delta = next;
    }
    if (layer_done_) layer_done_(s.weight_offset, s.bias_offset + s.out - s.weight_offset);
  }
  gradients_.back() += static_cast<float>(n);
  r.device_seconds = seconds_since(t0);
  return r;
}

void HostMlp::apply_update() {
  const float count = gradients_.back();
  if (count <= 0.0f) return;
  ++steps_;
  const float inv = 1.0f / count;
  const float lr = config_.learning_rate, wd = config_.weight_decay;
  const std::int64_t pcount = layout_.parameter_count;
  float* p = parameters_.data();
  const float* g = gradients_.data();
  float* m = state_.data();
  if (config_.optimizer == OptimizerKind::sgd) {
    const float mu = config_.momentum;
    for_each_index(pcount, [=](std::int64_t i) {
      const float grad = g[i] * inv + wd * p[i];
      m[i] = mu * m[i] + grad;
      p[i] -= lr * m[i];
    });
  } else {
    const float b1 = config_.beta1, b2 = config_.beta2, eps = config_.epsilon;
    const auto t = static_cast<double>(steps_);
    const auto c1 = static_cast<float>(1.0 - std::pow(static_cast<double>(b1), t));
    const auto c2 = static_cast<float>(1.0 - std::pow(static_cast<double>(b2), t));
    float* v = m + pcount;
    for_each_index(pcount, [=](std::int64_t i) {
      const float grad = g[i] * inv + wd * p[i];
      m[i] = b1 * m[i] + (1.0f - b1) * grad;
      v[i] = b2 * v[i] + (1.0f - b2) * grad * grad;
      p[i] -= lr * (m[i] / c1) / (std::sqrt(v[i] / c2) + eps);
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
  // Stored activations, two backward buffers, the ones vector and the per-row flag.
  return static_cast<std::int64_t>(sizeof(float)) * (layout_.activation_floats + 2 * layout_.max_width + 1) +
         static_cast<std::int64_t>(sizeof(std::int32_t));
}

std::int64_t HostMlp::fixed_bytes() const {
  return static_cast<std::int64_t>(sizeof(float)) *
         (2 * layout_.parameter_count + 1 + static_cast<std::int64_t>(state_.size()));
}

std::unique_ptr<Model> make_host_mlp(const MlpConfig& config) { return std::make_unique<HostMlp>(config); }

}  // namespace antdt::detail
