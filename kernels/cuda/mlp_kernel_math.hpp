// The arithmetic of the CUDA MLP's element-wise kernels, one element (or one row) at a time.
// mlp_kernels.cu wraps each function in a grid-stride loop; the emulated CUDA runtime of
// tests/compute/cuda_emulation/ runs the same functions on the host, so the kernels' maths is
// tested on machines without a GPU. Only the launch geometry and the block reduction of the
// loss stay GPU-only. Plain C++17, no CUDA headers: nvcc and the host compiler both read it.
#pragma once

#include <math.h>  // NOLINT(modernize-deprecated-headers): exp/log/sqrtf/fmaxf in host and device code

#include <cstdint>

#include "comm/sample_count.hpp"

#if defined(__CUDACC__)
#define ANTDT_KERNEL_MATH __host__ __device__ __forceinline__
#else
#define ANTDT_KERNEL_MATH inline
#endif

namespace antdt::cuda::math {

// z[i] += b[i % width]; then ReLU when relu. z is [n][width] row-major.
ANTDT_KERNEL_MATH void bias_activation(float* z, const float* b, std::int64_t i, std::int64_t width, bool relu) {
  const float x = z[i] + b[i % width];
  z[i] = relu ? fmaxf(x, 0.0f) : x;
}

// One row of softmax cross-entropy over `classes` logits z, label y. Adds the row's loss (in
// double) to loss and 1 to hits when the arg-max is y (first maximum wins, as on the host).
// When write_gradient, z becomes softmax(z) - onehot(y).
ANTDT_KERNEL_MATH void softmax_cross_entropy_row(float* z, std::int64_t classes, std::int32_t y, bool write_gradient,
                                                 double& loss, unsigned int& hits) {
  std::int64_t arg = 0;
  for (std::int64_t j = 1; j < classes; ++j) arg = z[j] > z[arg] ? j : arg;
  const float zmax = z[arg];
  double denom = 0.0;
  for (std::int64_t j = 0; j < classes; ++j) denom += exp(static_cast<double>(z[j] - zmax));
  loss += log(denom) - static_cast<double>(z[y] - zmax);
  hits += arg == y ? 1u : 0u;
  if (write_gradient) {
    for (std::int64_t j = 0; j < classes; ++j) {
      z[j] = static_cast<float>(exp(static_cast<double>(z[j] - zmax)) / denom) - (j == y ? 1.0f : 0.0f);
    }
  }
}

// What a forward pass reports back to the host: one struct, so one copy and one wait.
struct BatchTotals {
  double loss_sum;             // summed cross-entropy
  unsigned long long correct;  // arg-max hits
};

// True for a NaN or an infinity: x - x is 0 for every finite x and NaN otherwise (no
// isfinite, whose host and device overloads differ between the compilers reading this file).
ANTDT_KERNEL_MATH bool non_finite(float x) { return !(x - x == 0.0f); }

// delta[i] = 0 where the layer's ReLU output was not positive.
ANTDT_KERNEL_MATH void relu_mask(float* delta, const float* activation, std::int64_t i) {
  if (!(activation[i] > 0.0f)) delta[i] = 0.0f;
}

// What one optimizer step needs beyond its hyper-parameters. prepare_update computes it on the
// device from the reduced sample count, so apply_update never waits for the host.
struct UpdateCoefficients {
  float inv_count;  // 1 / B
  float c1, c2;     // Adam's bias corrections 1 - beta1^t and 1 - beta2^t (1 for SGD)
  int active;       // 0 when B <= 0: the step is skipped and t is left alone
};

// From the summed sample count B (decoded from the count slots: decode_sample_count) and the
// step counter t: when B > 0, t += 1 and the coefficients of that step (1 / float(B) as the host
// backend computes it; c1, c2 in double, then rounded); otherwise an inactive step. One thread.
ANTDT_KERNEL_MATH void update_coefficients(std::int64_t count, std::int64_t& t, float beta1, float beta2,
                                           UpdateCoefficients& out) {
  if (count <= 0) {
    out = UpdateCoefficients{0.0f, 1.0f, 1.0f, 0};
    return;
  }
  t += 1;
  const double td = static_cast<double>(t);
  out = UpdateCoefficients{1.0f / static_cast<float>(count),
                           static_cast<float>(1.0 - pow(static_cast<double>(beta1), td)),
                           static_cast<float>(1.0 - pow(static_cast<double>(beta2), td)), 1};
}

// SGD with momentum on the mean gradient g = grad_sum*inv_count + wd*p (PyTorch convention).
ANTDT_KERNEL_MATH void sgd(float* p, float* momentum, const float* grad_sum, std::int64_t i, float inv_count, float lr,
                           float mu, float wd) {
  const float g = grad_sum[i] * inv_count + wd * p[i];
  const float m = mu * momentum[i] + g;
  momentum[i] = m;
  p[i] -= lr * m;
}

// Adam with bias corrections c1 = 1 - beta1^t and c2 = 1 - beta2^t.
ANTDT_KERNEL_MATH void adam(float* p, float* m, float* v, const float* grad_sum, std::int64_t i, float inv_count,
                            float lr, float beta1, float beta2, float eps, float wd, float c1, float c2) {
  const float g = grad_sum[i] * inv_count + wd * p[i];
  const float mi = beta1 * m[i] + (1.0f - beta1) * g;
  const float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
  m[i] = mi;
  v[i] = vi;
  p[i] -= lr * (mi / c1) / (sqrtf(vi / c2) + eps);
}

}  // namespace antdt::cuda::math
