// Element-wise kernels of the CUDA MLP. GEMMs are cuBLAS (mlp_cuda.cpp); these are the
// O(n * width) parts. Grid-stride loops keep every launch at a bounded grid size.
#include "cuda/mlp_kernels.hpp"

namespace antdt::cuda {
namespace {

constexpr int kThreads = 256;

int blocks_for(std::int64_t count) {
  const std::int64_t b = (count + kThreads - 1) / kThreads;
  return static_cast<int>(b < 1 ? 1 : (b > 65535 ? 65535 : b));
}

__global__ void bias_activation_kernel(float* z, const float* b, std::int64_t n, std::int64_t width, bool relu) {
  const std::int64_t total = n * width;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const float x = z[i] + b[i % width];
    z[i] = relu ? fmaxf(x, 0.0f) : x;
  }
}

// One thread per row: the class count of a classifier head is small, and the row work is
// O(classes). The block's loss and hit count are combined in shared memory, then one atomic
// per block.
__global__ void softmax_cross_entropy_kernel(float* logits, const std::int32_t* labels, std::int64_t n,
                                             std::int64_t classes, bool write_gradient, double* loss_sum,
                                             unsigned long long* correct) {
  __shared__ double block_loss[kThreads];
  __shared__ unsigned int block_hits[kThreads];
  double loss = 0.0;
  unsigned int hits = 0;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    float* z = logits + i * classes;
    std::int64_t arg = 0;
    for (std::int64_t j = 1; j < classes; ++j) arg = z[j] > z[arg] ? j : arg;
    const float zmax = z[arg];
    double denom = 0.0;
    for (std::int64_t j = 0; j < classes; ++j) denom += exp(static_cast<double>(z[j] - zmax));
    const std::int32_t y = labels[i];
    loss += log(denom) - static_cast<double>(z[y] - zmax);
    hits += arg == y ? 1u : 0u;
    if (write_gradient) {
      for (std::int64_t j = 0; j < classes; ++j) {
        z[j] = static_cast<float>(exp(static_cast<double>(z[j] - zmax)) / denom) - (j == y ? 1.0f : 0.0f);
      }
    }
  }
  block_loss[threadIdx.x] = loss;
  block_hits[threadIdx.x] = hits;
  __syncthreads();
  for (unsigned int stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) {
      block_loss[threadIdx.x] += block_loss[threadIdx.x + stride];
      block_hits[threadIdx.x] += block_hits[threadIdx.x + stride];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    atomicAdd(loss_sum, block_loss[0]);
    atomicAdd(correct, static_cast<unsigned long long>(block_hits[0]));
  }
}

__global__ void relu_mask_kernel(float* delta, const float* activation, std::int64_t count) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    if (!(activation[i] > 0.0f)) delta[i] = 0.0f;
  }
}

__global__ void add_to_scalar_kernel(float* slot, float value) { *slot += value; }

__global__ void fill_kernel(float* x, float value, std::int64_t count) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    x[i] = value;
  }
}

__global__ void sgd_kernel(float* p, float* momentum, const float* grad_sum, std::int64_t count, float inv_count,
                           float lr, float mu, float wd) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const float g = grad_sum[i] * inv_count + wd * p[i];
    const float m = mu * momentum[i] + g;
    momentum[i] = m;
    p[i] -= lr * m;
  }
}

__global__ void adam_kernel(float* p, float* m, float* v, const float* grad_sum, std::int64_t count, float inv_count,
                            float lr, float beta1, float beta2, float eps, float wd, float c1, float c2) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const float g = grad_sum[i] * inv_count + wd * p[i];
    const float mi = beta1 * m[i] + (1.0f - beta1) * g;
    const float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
    m[i] = mi;
    v[i] = vi;
    p[i] -= lr * (mi / c1) / (sqrtf(vi / c2) + eps);
  }
}

}  // namespace

cudaError_t bias_activation(cudaStream_t stream, float* z, const float* b, std::int64_t n, std::int64_t width,
                            bool relu) {
  if (n * width == 0) return cudaSuccess;
  bias_activation_kernel<<<blocks_for(n * width), kThreads, 0, stream>>>(z, b, n, width, relu);
  return cudaGetLastError();
}

cudaError_t softmax_cross_entropy(cudaStream_t stream, float* logits, const std::int32_t* labels, std::int64_t n,
                                  std::int64_t classes, bool write_gradient, double* loss_sum,
                                  unsigned long long* correct) {
  if (n == 0) return cudaSuccess;
  softmax_cross_entropy_kernel<<<blocks_for(n), kThreads, 0, stream>>>(logits, labels, n, classes, write_gradient,
                                                                       loss_sum, correct);
  return cudaGetLastError();
}

cudaError_t relu_mask(cudaStream_t stream, float* delta, const float* activation, std::int64_t count) {
  if (count == 0) return cudaSuccess;
  relu_mask_kernel<<<blocks_for(count), kThreads, 0, stream>>>(delta, activation, count);
  return cudaGetLastError();
}

cudaError_t add_to_scalar(cudaStream_t stream, float* slot, float value) {
  add_to_scalar_kernel<<<1, 1, 0, stream>>>(slot, value);
  return cudaGetLastError();
}

cudaError_t fill(cudaStream_t stream, float* x, float value, std::int64_t count) {
  if (count == 0) return cudaSuccess;
  fill_kernel<<<blocks_for(count), kThreads, 0, stream>>>(x, value, count);
  return cudaGetLastError();
}

cudaError_t sgd_step(cudaStream_t stream, float* p, float* momentum, const float* grad_sum, std::int64_t count,
                     float inv_count, float lr, float mu, float wd) {
  if (count == 0) return cudaSuccess;
  sgd_kernel<<<blocks_for(count), kThreads, 0, stream>>>(p, momentum, grad_sum, count, inv_count, lr, mu, wd);
  return cudaGetLastError();
}

cudaError_t adam_step(cudaStream_t stream, float* p, float* m, float* v, const float* grad_sum, std::int64_t count,
                      float inv_count, float lr, float beta1, float beta2, float eps, float wd, float bias_correction1,
                      float bias_correction2) {
  if (count == 0) return cudaSuccess;
  adam_kernel<<<blocks_for(count), kThreads, 0, stream>>>(p, m, v, grad_sum, count, inv_count, lr, beta1, beta2, eps,
                                                          wd, bias_correction1, bias_correction2);
  return cudaGetLastError();
}

}  // namespace antdt::cuda
