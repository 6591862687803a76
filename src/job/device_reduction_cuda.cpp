#include <cuda_runtime.h>

#include <array>
#include <string>

#include "antdt/error.hpp"
#include "comm/reduce.hpp"
#include "comm/sample_count.hpp"
#include "cuda/cuda_raii.hpp"
#include "job/device_reduction.hpp"

namespace antdt::detail {
namespace {

class CudaDeviceReduction final : public DeviceReduction {
 public:
  CudaDeviceReduction(const Communicator& comm, int device) : device_(device) {
    DeviceInfo info;
    info.backend = Backend::cuda;
    info.device_id = device;
    info.device_count = cuda_device_count();
    reducer_ = make_reducer(comm, info);
  }

  [[nodiscard]] int device() const noexcept override { return device_; }
  [[nodiscard]] std::string_view reducer() const noexcept override { return reducer_->name(); }

  std::int64_t reduce(Session& session, float* device_sums, std::int64_t count, std::int64_t local_samples) override {
    cuda::DeviceGuard guard(device_);
    const auto n = static_cast<std::size_t>(count);
    fused_.resize(n + kSampleCountSlots);
    std::array<float, kSampleCountSlots> slots{};
    encode_sample_count(local_samples, slots.data());
    // cudaMemcpy on the legacy default stream: after the work queued on the blocking streams.
    if (n > 0) ANTDT_CHECK_CUDA(cudaMemcpy(fused_.data(), device_sums, n * sizeof(float), cudaMemcpyDeviceToDevice));
    ANTDT_CHECK_CUDA(cudaMemcpy(fused_.data() + n, slots.data(), sizeof slots, cudaMemcpyHostToDevice));
    session.reduce_sums(fused_.data(), count + kSampleCountSlots, *reducer_, "Job::reduce_device");
    ANTDT_CHECK_CUDA(cudaMemcpy(slots.data(), fused_.data() + n, sizeof slots, cudaMemcpyDeviceToHost));
    const std::int64_t total = decode_sample_count(slots.data());
    if (total < 0) {  // the same on every rank: all of them throw
      throw Error(
          "Job::reduce_device: the reduced sample count does not decode (over 2^63 samples, or ranks passed "
          "buffers of different sizes)");
    }
    if (n > 0) ANTDT_CHECK_CUDA(cudaMemcpy(device_sums, fused_.data(), n * sizeof(float), cudaMemcpyDeviceToDevice));
    // A copy within the device does not wait on the host: finish it, so that work the caller
    // queues next on any stream reads the sums.
    ANTDT_CHECK_CUDA(cudaStreamSynchronize(nullptr));
    return total;
  }

 private:
  int device_;
  std::unique_ptr<GradientReducer> reducer_;
  cuda::DeviceBuffer<float> fused_;
};

}  // namespace

std::unique_ptr<DeviceReduction> make_device_reduction(const Communicator& comm, int device) {
  if (device < 0) throw UsageError("Job::reduce_device: device " + std::to_string(device) + " is not a CUDA device");
  return std::make_unique<CudaDeviceReduction>(comm, device);
}

}  // namespace antdt::detail
