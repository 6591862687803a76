// Element-wise kernels of the CUDA MLP. GEMMs are cuBLAS (mlp_cuda.cpp); these are the
// O(n * width) parts. Grid-stride loops keep every launch at a bounded grid size; the maths
// of each element is in mlp_kernel_math.hpp, shared with the emulated runtime of the tests.
#include "cuda/mlp_kernel_math.hpp"
#include "cuda/mlp_kernels.hpp"

namespace antdt::cuda {
namespace {

constexpr int kThreads = 256;

int blocks_for(std::int64_t count) {
  const std::int64_t b = (count + kThreads - 1) / kThreads;
  return static_cast<int>(b < 1 ? 1 : (b > 65535 ? 65535 : b));
}

// Every kernel is a grid-stride loop around one function of mlp_kernel_math.hpp.
#define ANTDT_GRID_STRIDE(i, count)                                                                    \
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < (count); \
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)

__global__ void bias_activation_kernel(float* z, const float* b, std::int64_t n, std::int64_t width, bool relu) {
  ANTDT_GRID_STRIDE(i, n * width) { math::bias_activation(z, b, i, width, relu); }
}

// One thread per row: the class count of a classifier head is small, and the row work is
// O(classes). The block's loss and hit count are combined in shared memory, then one atomic
// per block.
__global__ void softmax_cross_entropy_kernel(float* logits, const std::int32_t* labels, std::int64_t n,
                                             std::int64_t classes, bool write_gradient, math::BatchTotals* totals) {
  __shared__ double block_loss[kThreads];
  __shared__ unsigned int block_hits[kThreads];
  double loss = 0.0;
  unsigned int hits = 0;
  ANTDT_GRID_STRIDE(i, n) {
    math::softmax_cross_entropy_row(logits + i * classes, classes, labels[i], write_gradient, loss, hits);
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
    atomicAdd(&totals->loss_sum, block_loss[0]);
    atomicAdd(&totals->correct, static_cast<unsigned long long>(block_hits[0]));
  }
}

__global__ void relu_mask_kernel(float* delta, const float* activation, std::int64_t count) {
  ANTDT_GRID_STRIDE(i, count) { math::relu_mask(delta, activation, i); }
}

__global__ void add_sample_count_kernel(float* slots, std::int64_t n) { antdt::add_sample_count(slots, n); }

__global__ void fill_kernel(float* x, float value, std::int64_t count) {
  ANTDT_GRID_STRIDE(i, count) { x[i] = value; }
}

// Any thread that meets a non-finite value sets the flag; a plain store suffices (every writer
// writes 1), and most threads write nothing.
__global__ void flag_non_finite_kernel(const float* x, std::int64_t count, unsigned int* flag) {
  ANTDT_GRID_STRIDE(i, count) {
    if (math::non_finite(x[i])) *flag = 1u;
  }
}

__global__ void prepare_update_kernel(const float* count_slots, std::int64_t* steps, float beta1, float beta2,
                                      math::UpdateCoefficients* out) {
  math::update_coefficients(antdt::decode_sample_count(count_slots), *steps, beta1, beta2, *out);
}

// The coefficients are read once per thread (one cached 16-byte load), not passed by value:
// they exist only on the device.
__global__ void sgd_kernel(float* p, float* momentum, const float* grad_sum, std::int64_t count,
                           const math::UpdateCoefficients* coefficients, float lr, float mu, float wd) {
  const math::UpdateCoefficients k = *coefficients;
  if (k.active == 0) return;
  ANTDT_GRID_STRIDE(i, count) { math::sgd(p, momentum, grad_sum, i, k.inv_count, lr, mu, wd); }
}

__global__ void adam_kernel(float* p, float* m, float* v, const float* grad_sum, std::int64_t count,
                            const math::UpdateCoefficients* coefficients, float lr, float beta1, float beta2, float eps,
                            float wd) {
  const math::UpdateCoefficients k = *coefficients;
  if (k.active == 0) return;
  ANTDT_GRID_STRIDE(i, count) { math::adam(p, m, v, grad_sum, i, k.inv_count, lr, beta1, beta2, eps, wd, k.c1, k.c2); }
}

#undef ANTDT_GRID_STRIDE

}  // namespace

cudaError_t bias_activation(cudaStream_t stream, float* z, const float* b, std::int64_t n, std::int64_t width,
                            bool relu) {
  if (n * width == 0) return cudaSuccess;
  bias_activation_kernel<<<blocks_for(n * width), kThreads, 0, stream>>>(z, b, n, width, relu);
  return cudaGetLastError();
}

cudaError_t softmax_cross_entropy(cudaStream_t stream, float* logits, const std::int32_t* labels, std::int64_t n,
                                  std::int64_t classes, bool write_gradient, math::BatchTotals* totals) {
  if (n == 0) return cudaSuccess;
  softmax_cross_entropy_kernel<<<blocks_for(n), kThreads, 0, stream>>>(logits, labels, n, classes, write_gradient,
                                                                       totals);
  return cudaGetLastError();
}

cudaError_t relu_mask(cudaStream_t stream, float* delta, const float* activation, std::int64_t count) {
  if (count == 0) return cudaSuccess;
  relu_mask_kernel<<<blocks_for(count), kThreads, 0, stream>>>(delta, activation, count);
  return cudaGetLastError();
}

cudaError_t add_sample_count(cudaStream_t stream, float* slots, std::int64_t n) {
  add_sample_count_kernel<<<1, 1, 0, stream>>>(slots, n);
  return cudaGetLastError();
}

cudaError_t fill(cudaStream_t stream, float* x, float value, std::int64_t count) {
  if (count == 0) return cudaSuccess;
  fill_kernel<<<blocks_for(count), kThreads, 0, stream>>>(x, value, count);
  return cudaGetLastError();
}

cudaError_t flag_non_finite(cudaStream_t stream, const float* x, std::int64_t count, unsigned int* flag) {
  if (count == 0) return cudaSuccess;
  flag_non_finite_kernel<<<blocks_for(count), kThreads, 0, stream>>>(x, count, flag);
  return cudaGetLastError();
}

cudaError_t prepare_update(cudaStream_t stream, const float* count_slots, std::int64_t* steps, float beta1, float beta2,
                           math::UpdateCoefficients* out) {
  prepare_update_kernel<<<1, 1, 0, stream>>>(count_slots, steps, beta1, beta2, out);
  return cudaGetLastError();
}

cudaError_t sgd_step(cudaStream_t stream, float* p, float* momentum, const float* grad_sum, std::int64_t count,
                     const math::UpdateCoefficients* k, float lr, float mu, float wd) {
  if (count == 0) return cudaSuccess;
  sgd_kernel<<<blocks_for(count), kThreads, 0, stream>>>(p, momentum, grad_sum, count, k, lr, mu, wd);
  return cudaGetLastError();
}

cudaError_t adam_step(cudaStream_t stream, float* p, float* m, float* v, const float* grad_sum, std::int64_t count,
                      const math::UpdateCoefficients* k, float lr, float beta1, float beta2, float eps, float wd) {
  if (count == 0) return cudaSuccess;
  adam_kernel<<<blocks_for(count), kThreads, 0, stream>>>(p, m, v, grad_sum, count, k, lr, beta1, beta2, eps, wd);
  return cudaGetLastError();
}

}  // namespace antdt::cuda
