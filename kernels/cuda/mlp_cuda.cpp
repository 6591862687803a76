// CUDA MLP: the same maths as kernels/host/mlp_host.cpp, with the device owning parameters,
// gradients, optimizer state and activations. cuBLAS is column-major; a row-major [n][w]
// matrix is the column-major [w][n] one, so with Wc = W^T (column-major view of W [out][in]):
//   forward   Zc [out][n] = Wc^T Xc                        sgemm(T, N, out, n, in)
//   backward  dWc [in][out] += Xc dZc^T                    sgemm(N, T, in, out, n), beta 1
//             db [out] += dZc 1                            sgemv(N, out, n), beta 1
//             dAc [in][n] = Wc dZc                         sgemm(N, N, in, n, out)
// cuBLAS runs in its default (full fp32, no TF32) math mode, so host and device agree to
// float summation order.
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <string>
#include <vector>

#include "antdt/error.hpp"
#include "cuda/cuda_raii.hpp"
#include "cuda/mlp_kernels.hpp"
#include "host/mlp_common.hpp"
#include "runtime/device.hpp"

namespace antdt::detail {
namespace {

int cublas_int(std::int64_t v) {
  if (v > INT_MAX) throw UsageError("micro-batch too large for 32-bit cuBLAS: " + std::to_string(v));
  return static_cast<int>(v);
}

class CudaMlp final : public Model {
 public:
  CudaMlp(const MlpConfig& config, int device_id)
      : config_(config), layout_(make_layout(config)), device_id_(device_id), guard_(device_id) {
    ANTDT_CHECK_CUBLAS(cublasSetStream(cublas_.get(), stream_.get()));
    const auto pcount = static_cast<std::size_t>(layout_.parameter_count);
    parameters_.resize(pcount);
    gradients_.resize(pcount + kSampleCountSlots);
    state_.resize(std::max<std::size_t>(
        1, static_cast<std::size_t>(optimizer_state_size(config.optimizer, layout_.parameter_count))));
    totals_.resize(1);
    steps_.resize(1);
    coefficients_.resize(1);
    ANTDT_CHECK_CUDA(cudaMemsetAsync(steps_.data(), 0, steps_.bytes(), stream_.get()));
    activations_.resize(layout_.layers.size());
    const std::vector<float> init = initial_parameters(layout_, config.seed);
    upload(parameters_.data(), init.data(), init.size());
    ANTDT_CHECK_CUDA(cudaMemsetAsync(state_.data(), 0, state_.bytes(), stream_.get()));
    zero_gradients();
    stream_.synchronize();
  }

  [[nodiscard]] Backend backend() const override { return Backend::cuda; }
  [[nodiscard]] std::int64_t parameter_count() const override { return layout_.parameter_count; }
  [[nodiscard]] std::int64_t input_dim() const override { return layout_.input_dim(); }
  [[nodiscard]] std::int64_t num_classes() const override { return layout_.num_classes(); }

  void zero_gradients() override {
    cuda::DeviceGuard guard(device_id_);
    ANTDT_CHECK_CUDA(cudaMemsetAsync(gradients_.data(), 0, gradients_.bytes(), stream_.get()));
  }

  BatchResult accumulate(const float* features, const std::int32_t* labels, std::int64_t n) override {
    return run(features, labels, n, true, nullptr);
  }
  // Each layer's bucket is copied to the listener's host memory on the model's stream right
  // behind its gradient kernels, then marked by an event; the host polls the events in order
  // and reports each bucket while the earlier layers' backward still runs on the device.
  BatchResult accumulate_overlapped(const float* features, const std::int32_t* labels, std::int64_t n,
                                    GradientListener& listener) override {
    return run(features, labels, n, true, &listener);
  }
  BatchResult evaluate(const float* features, const std::int32_t* labels, std::int64_t n) override {
    return run(features, labels, n, false, nullptr);
  }
  [[nodiscard]] std::vector<GradientBucket> gradient_buckets() const override { return buckets_; }

  [[nodiscard]] float* gradient_buffer() override { return gradients_.data(); }
  [[nodiscard]] std::int64_t gradient_count() const override { return layout_.parameter_count + kSampleCountSlots; }

  // On the model's stream, behind the reduction: zero the flag, one kernel over the buffer,
  // 4 bytes back to page-locked memory, one wait.
  [[nodiscard]] bool gradients_finite() override {
    cuda::DeviceGuard guard(device_id_);
    cudaStream_t s = stream_.get();
    ANTDT_CHECK_CUDA(cudaMemsetAsync(non_finite_.data(), 0, non_finite_.bytes(), s));
    ANTDT_CHECK_CUDA(cuda::flag_non_finite(s, gradients_.data(), gradient_count(), non_finite_.data()));
    ANTDT_CHECK_CUDA(cudaMemcpyAsync(non_finite_readback_.data(), non_finite_.data(), sizeof(unsigned int),
                                     cudaMemcpyDeviceToHost, s));
    stream_.synchronize();
    return non_finite_readback_[0] == 0;
  }

  // No host round trip: prepare_update reads the reduced count and Adam's t on the device, and
  // the optimizer kernel follows it on the same stream, right behind the reduction.
  void apply_update() override {
    cuda::DeviceGuard guard(device_id_);
    cudaStream_t s = stream_.get();
    const auto pcount = layout_.parameter_count;
    ANTDT_CHECK_CUDA(cuda::prepare_update(s, gradients_.data() + pcount, steps_.data(), config_.beta1, config_.beta2,
                                          coefficients_.data()));
    if (config_.optimizer == OptimizerKind::sgd) {
      ANTDT_CHECK_CUDA(cuda::sgd_step(s, parameters_.data(), state_.data(), gradients_.data(), pcount,
                                      coefficients_.data(), config_.learning_rate, config_.momentum,
                                      config_.weight_decay));
    } else {
      ANTDT_CHECK_CUDA(cuda::adam_step(s, parameters_.data(), state_.data(), state_.data() + pcount, gradients_.data(),
                                       pcount, coefficients_.data(), config_.learning_rate, config_.beta1,
                                       config_.beta2, config_.epsilon, config_.weight_decay));
    }
  }

  void synchronize() override {
    cuda::DeviceGuard guard(device_id_);
    stream_.synchronize();
  }

  [[nodiscard]] std::vector<float> parameters() const override {
    return download(parameters_.data(), static_cast<std::size_t>(layout_.parameter_count));
  }
  void set_parameters(std::span<const float> values) override {
    if (static_cast<std::int64_t>(values.size()) != layout_.parameter_count) {
      throw UsageError("set_parameters: got " + std::to_string(values.size()) + " values for a model with " +
                       std::to_string(layout_.parameter_count) + " parameters; check the layer widths");
    }
    upload(parameters_.data(), values.data(), values.size());
  }
  [[nodiscard]] std::vector<float> optimizer_state() const override {
    return download(state_.data(), static_cast<std::size_t>(state_floats()));
  }
  void set_optimizer_state(std::span<const float> values) override {
    if (static_cast<std::int64_t>(values.size()) != state_floats()) {
      throw UsageError("set_optimizer_state: got " + std::to_string(values.size()) + " values, the optimizer has " +
                       std::to_string(state_floats()) + "; check the optimizer kind and layer widths");
    }
    upload(state_.data(), values.data(), values.size());
  }
  [[nodiscard]] std::int64_t optimizer_steps() const override { return download(steps_.data(), 1).front(); }
  void set_optimizer_steps(std::int64_t steps) override {
    if (steps < 0) throw UsageError("optimizer steps must be >= 0");
    upload(steps_.data(), &steps, 1);
  }

  [[nodiscard]] std::int64_t bytes_per_sample() const override {
    // Staged features and label, stored activations, two backward buffers, the ones vector.
    return static_cast<std::int64_t>(sizeof(float)) *
               (layout_.input_dim() + layout_.activation_floats + 2 * layout_.max_width + 1) +
           static_cast<std::int64_t>(sizeof(std::int32_t));
  }
  [[nodiscard]] std::int64_t fixed_bytes() const override {
    // Parameters, gradients (+count), optimizer state, plus the cuBLAS/CUDA context
    // workspace, which cudaMemGetInfo at startup does not yet see (an estimate).
    constexpr std::int64_t kWorkspace = std::int64_t{64} << 20;
    return static_cast<std::int64_t>(sizeof(float)) *
               (2 * layout_.parameter_count + kSampleCountSlots + state_floats()) +
           kWorkspace;
  }

 private:
  [[nodiscard]] std::int64_t state_floats() const {
    return optimizer_state_size(config_.optimizer, layout_.parameter_count);
  }

  template <class T>
  void upload(T* device_dst, const T* host_src, std::size_t count) {
    cuda::DeviceGuard guard(device_id_);
    ANTDT_CHECK_CUDA(cudaMemcpyAsync(device_dst, host_src, count * sizeof(T), cudaMemcpyHostToDevice, stream_.get()));
    stream_.synchronize();
  }
  template <class T>
  [[nodiscard]] std::vector<T> download(const T* device_src, std::size_t count) const {
    cuda::DeviceGuard guard(device_id_);
    std::vector<T> out(count);
    ANTDT_CHECK_CUDA(cudaMemcpyAsync(out.data(), device_src, count * sizeof(T), cudaMemcpyDeviceToHost, stream_.get()));
    stream_.synchronize();
    return out;
  }

  void reserve(std::int64_t n) {
    if (n <= capacity_) return;
    const auto un = static_cast<std::size_t>(n);
    features_.resize(un * static_cast<std::size_t>(layout_.input_dim()));
    labels_.resize(un);
    for (std::size_t l = 0; l < layout_.layers.size(); ++l) {
      activations_[l].resize(un * static_cast<std::size_t>(layout_.layers[l].out));
    }
    delta_a_.resize(un * static_cast<std::size_t>(layout_.max_width));
    delta_b_.resize(un * static_cast<std::size_t>(layout_.max_width));
    ones_.resize(un);
    ANTDT_CHECK_CUDA(cuda::fill(stream_.get(), ones_.data(), 1.0f, n));
    capacity_ = n;
  }

  BatchResult run(const float* features, const std::int32_t* labels, std::int64_t n, bool want_gradient,
                  GradientListener* listener) {
    if (n <= 0) return {};
    check_labels(labels, n, layout_.num_classes());
    cuda::DeviceGuard guard(device_id_);
    reserve(n);
    cudaStream_t s = stream_.get();
    cublasHandle_t h = cublas_.get();
    const int rows = cublas_int(n);
    const float one = 1.0f, zero = 0.0f;

    start_.record(s);
    ANTDT_CHECK_CUDA(cudaMemcpyAsync(features_.data(), features,
                                     static_cast<std::size_t>(n * layout_.input_dim()) * sizeof(float),
                                     cudaMemcpyHostToDevice, s));
    ANTDT_CHECK_CUDA(cudaMemcpyAsync(labels_.data(), labels, static_cast<std::size_t>(n) * sizeof(std::int32_t),
                                     cudaMemcpyHostToDevice, s));
    ANTDT_CHECK_CUDA(cudaMemsetAsync(totals_.data(), 0, totals_.bytes(), s));

    const std::size_t last = layout_.layers.size() - 1;
    const float* input = features_.data();
    for (std::size_t l = 0; l < layout_.layers.size(); ++l) {
      const LayerShape& sh = layout_.layers[l];
      float* z = activations_[l].data();
      ANTDT_CHECK_CUBLAS(cublasSgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, cublas_int(sh.out), rows, cublas_int(sh.in), &one,
                                     parameters_.data() + sh.weight_offset, cublas_int(sh.in), input, cublas_int(sh.in),
                                     &zero, z, cublas_int(sh.out)));
      ANTDT_CHECK_CUDA(cuda::bias_activation(s, z, parameters_.data() + sh.bias_offset, n, sh.out, l != last));
      input = z;
    }
    ANTDT_CHECK_CUDA(cuda::softmax_cross_entropy(s, activations_[last].data(), labels_.data(), n, layout_.num_classes(),
                                                 want_gradient, totals_.data()));
    if (want_gradient) {
      // The count slots first: they belong to the first bucket (the last layer's).
      ANTDT_CHECK_CUDA(cuda::add_sample_count(s, gradients_.data() + layout_.parameter_count, n));
      float* copy = listener != nullptr ? listener->host_copy() : nullptr;
      const float* delta = activations_[last].data();
      for (std::size_t l = layout_.layers.size(); l-- > 0;) {
        const LayerShape& sh = layout_.layers[l];
        const float* a_in = l == 0 ? features_.data() : activations_[l - 1].data();
        const int in = cublas_int(sh.in), out = cublas_int(sh.out);
        ANTDT_CHECK_CUBLAS(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_T, in, out, rows, &one, a_in, in, delta, out, &one,
                                       gradients_.data() + sh.weight_offset, in));
        ANTDT_CHECK_CUBLAS(cublasSgemv(h, CUBLAS_OP_N, out, rows, &one, delta, out, ones_.data(), 1, &one,
                                       gradients_.data() + sh.bias_offset, 1));
        if (listener != nullptr) {  // this layer's bucket is final once the stream gets here
          const std::size_t b = last - l;
          const GradientBucket& bucket = buckets_[b];
          if (copy != nullptr) {
            ANTDT_CHECK_CUDA(cudaMemcpyAsync(copy + bucket.offset, gradients_.data() + bucket.offset,
                                             static_cast<std::size_t>(bucket.count) * sizeof(float),
                                             cudaMemcpyDeviceToHost, s));
          }
          bucket_ready_[b].record(s);
        }
        if (l > 0) {
          float* next = delta == delta_a_.data() ? delta_b_.data() : delta_a_.data();
          ANTDT_CHECK_CUBLAS(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, in, rows, out, &one,
                                         parameters_.data() + sh.weight_offset, in, delta, out, &zero, next, in));
          ANTDT_CHECK_CUDA(cuda::relu_mask(s, next, a_in, n * sh.in));
          delta = next;
        }
      }
    }
    stop_.record(s);
    // One copy of the loss and hit count into page-locked memory, then the one wait this call
    // needs (its results are on the host when it returns).
    cuda::math::BatchTotals* totals = readback_.data();
    ANTDT_CHECK_CUDA(cudaMemcpyAsync(totals, totals_.data(), sizeof *totals, cudaMemcpyDeviceToHost, s));
    if (listener != nullptr) {
      for (std::size_t b = 0; b < buckets_.size(); ++b) {
        cudaError_t status = cudaSuccess;
        while ((status = cudaEventQuery(bucket_ready_[b].get())) == cudaErrorNotReady) listener->poll();
        ANTDT_CHECK_CUDA(status);
        listener->ready(b);
      }
    }
    stream_.synchronize();
    BatchResult r;
    r.loss_sum = totals->loss_sum;
    r.correct = static_cast<std::int64_t>(totals->correct);
    r.samples = n;
    r.device_seconds = stop_.seconds_since(start_);
    return r;
  }

  MlpConfig config_;
  MlpLayout layout_;
  int device_id_;
  cuda::DeviceGuard guard_;  // keeps device_id_ current while the members below are created
  cuda::Stream stream_;
  cuda::CublasHandle cublas_;
  cuda::Event start_, stop_;
  std::vector<GradientBucket> buckets_ = layer_buckets(layout_);
  std::vector<cuda::Event> bucket_ready_ = std::vector<cuda::Event>(buckets_.size());  // one per bucket
  cuda::DeviceBuffer<float> parameters_, gradients_, state_;
  cuda::DeviceBuffer<cuda::math::BatchTotals> totals_;
  cuda::DeviceBuffer<unsigned int> non_finite_{1};  // gradients_finite's flag
  HostVector<unsigned int> non_finite_readback_{1, PinnedAllocator<unsigned int>(true)};
  // Where the totals land: page-locked (one DMA, no driver staging) unless pinning is refused.
  HostVector<cuda::math::BatchTotals> readback_{1, PinnedAllocator<cuda::math::BatchTotals>(true)};
  cuda::DeviceBuffer<float> features_, delta_a_, delta_b_, ones_;
  cuda::DeviceBuffer<std::int32_t> labels_;
  std::vector<cuda::DeviceBuffer<float>> activations_;
  cuda::DeviceBuffer<std::int64_t> steps_;  // Adam's t, counted on the device by prepare_update
  cuda::DeviceBuffer<cuda::math::UpdateCoefficients> coefficients_;
  std::int64_t capacity_ = 0;
};

}  // namespace

std::unique_ptr<Model> make_cuda_mlp(const MlpConfig& config, const DeviceInfo& device) {
  if (device.backend != Backend::cuda || device.device_id < 0) {
    throw DeviceError("make_cuda_mlp needs a CUDA DeviceInfo from select_device (device_id >= 0)");
  }
  return std::make_unique<CudaMlp>(config, device.device_id);
}

}  // namespace antdt::detail
