// The host MLP backend: GEMMs through cblas_sgemm (OpenBLAS), element-wise work
// (bias+ReLU, softmax cross-entropy, ReLU mask with the bias gradient, optimizer) through Kokkos on
// DefaultHostExecutionSpace, or plain loops when Kokkos is not built or not initialised.
// Private to libantdt.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "host/mlp_common.hpp"
#include "model/model.hpp"

namespace antdt::detail {

class HostMlp final : public Model {
 public:
  explicit HostMlp(const MlpConfig& config);

  [[nodiscard]] Backend backend() const override { return Backend::host; }
  [[nodiscard]] std::int64_t parameter_count() const override { return layout_.parameter_count; }
  [[nodiscard]] std::int64_t input_dim() const override { return layout_.input_dim(); }
  [[nodiscard]] std::int64_t num_classes() const override { return layout_.num_classes(); }
  void zero_gradients() override;
  BatchResult accumulate(const float* features, const std::int32_t* labels, std::int64_t n) override {
    return backward(features, labels, n, nullptr);
  }
  // Reports each layer as soon as its gradient sums are final, then polls the listener
  // before the next layer's GEMMs.
  BatchResult accumulate_overlapped(const float* features, const std::int32_t* labels, std::int64_t n,
                                    GradientListener& listener) override {
    return backward(features, labels, n, &listener);
  }
  [[nodiscard]] std::vector<GradientBucket> gradient_buckets() const override { return layer_buckets(layout_); }
  BatchResult evaluate(const float* features, const std::int32_t* labels, std::int64_t n) override;
  [[nodiscard]] float* gradient_buffer() override { return gradients_.data(); }
  [[nodiscard]] std::int64_t gradient_count() const override { return layout_.parameter_count + kSampleCountSlots; }
  [[nodiscard]] bool gradients_finite() override;
  void apply_update() override;
  void synchronize() override {}
  [[nodiscard]] std::vector<float> parameters() const override { return parameters_; }
  void set_parameters(std::span<const float> values) override;
  [[nodiscard]] std::vector<float> optimizer_state() const override { return state_; }
  void set_optimizer_state(std::span<const float> values) override;
  [[nodiscard]] std::int64_t optimizer_steps() const override { return steps_; }
  void set_optimizer_steps(std::int64_t steps) override;
  [[nodiscard]] std::int64_t bytes_per_sample() const override;
  [[nodiscard]] std::int64_t fixed_bytes() const override;

 private:
  // Runs the forward pass for n samples; returns loss/correct and leaves dLoss/dlogits in
  // the last activation buffer when want_gradient.
  BatchResult forward(const float* features, const std::int32_t* labels, std::int64_t n, bool want_gradient);
  // Forward and backward, adding to the gradient sums; reports layers to `listener` if given.
  BatchResult backward(const float* features, const std::int32_t* labels, std::int64_t n, GradientListener* listener);
  void reserve(std::int64_t n);

  MlpConfig config_;
  MlpLayout layout_;
  std::vector<float> parameters_;
  std::vector<float> gradients_;  // P sums + kSampleCountSlots count slots
  std::vector<float> state_;      // momentum, or Adam m then v
  std::int64_t steps_ = 0;
  std::int64_t capacity_ = 0;                    // samples the activation buffers hold
  std::vector<std::vector<float>> activations_;  // per layer output [n][out]
  std::vector<float> delta_a_, delta_b_;         // backward ping-pong, [n][max_width]
  std::vector<std::int32_t> row_correct_;        // [capacity]
};

}  // namespace antdt::detail
