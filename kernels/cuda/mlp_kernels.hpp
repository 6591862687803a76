// Launchers for the MLP's element-wise CUDA kernels (kernels/cuda/mlp_kernels.cu). Plain C++
// declarations so the model itself (mlp_cuda.cpp) is compiled by the host compiler with full
// warnings; only this small file goes through nvcc. Every launcher enqueues on `stream` and
// returns the launch error (cudaSuccess when queued).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "cuda/mlp_kernel_math.hpp"

namespace antdt::cuda {

// z[i][j] += b[j] for n rows of `width`; then ReLU when relu.
cudaError_t bias_activation(cudaStream_t stream, float* z, const float* b, std::int64_t n, std::int64_t width,
                            bool relu);

// Softmax cross-entropy per row of logits [n][classes]. Adds the summed loss and the number of
// arg-max hits to *totals (device memory, zeroed by the caller). When write_gradient, the
// logits are replaced by softmax - onehot.
cudaError_t softmax_cross_entropy(cudaStream_t stream, float* logits, const std::int32_t* labels, std::int64_t n,
                                  std::int64_t classes, bool write_gradient, math::BatchTotals* totals);

// delta[i] = activation[i] > 0 ? delta[i] : 0
cudaError_t relu_mask(cudaStream_t stream, float* delta, const float* activation, std::int64_t count);

// Adds n to the sample count in slots[0, kSampleCountSlots) (src/comm/sample_count.hpp); one thread.
cudaError_t add_sample_count(cudaStream_t stream, float* slots, std::int64_t n);

// x[i] = value
cudaError_t fill(cudaStream_t stream, float* x, float value, std::int64_t count);

// *flag = 1 if any of x[0..count) is NaN or infinite; *flag is left as it was otherwise (the
// caller zeroes it first). Device memory both.
cudaError_t flag_non_finite(cudaStream_t stream, const float* x, std::int64_t count, unsigned int* flag);

// From the reduced count in count_slots[0, kSampleCountSlots) and the step counter *steps (device
// memory), the coefficients of this step into *out (math::update_coefficients); one thread.
cudaError_t prepare_update(cudaStream_t stream, const float* count_slots, std::int64_t* steps, float beta1, float beta2,
                           math::UpdateCoefficients* out);

// The optimizers of src/model/model.hpp, on the mean gradient g*inv_count + wd*p, with the
// coefficients prepare_update wrote (device memory; no-op when they are inactive).
cudaError_t sgd_step(cudaStream_t stream, float* p, float* momentum, const float* grad_sum, std::int64_t count,
                     const math::UpdateCoefficients* k, float lr, float mu, float wd);
cudaError_t adam_step(cudaStream_t stream, float* p, float* m, float* v, const float* grad_sum, std::int64_t count,
                      const math::UpdateCoefficients* k, float lr, float beta1, float beta2, float eps, float wd);

}  // namespace antdt::cuda
