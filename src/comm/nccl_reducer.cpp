// NCCL reduction of a device gradient buffer. The NCCL communicator is bootstrapped over the
// antdt communicator: rank 0 creates the unique id and broadcasts it, then every rank joins
// with ncclCommInitRank (collective). It mirrors the MPI communicator's ranks and size.
#include <cuda_runtime.h>
#include <nccl.h>

#include <string>

#include <mpi.h>

#include "antdt/error.hpp"
#include "comm/reducer_backends.hpp"
#include "cuda/cuda_raii.hpp"
#include "transport/guard.hpp"

namespace antdt::comm {
namespace {

class NcclCommunicator {
 public:
  NcclCommunicator(const Communicator& comm, int device) {
    ncclUniqueId id{};
    if (comm.is_root()) ANTDT_CHECK_NCCL(ncclGetUniqueId(&id));
    detail::bcast(&id, sizeof id, MPI_BYTE, 0, comm.get());
    cuda::DeviceGuard guard(device);
    ANTDT_CHECK_NCCL(ncclCommInitRank(&comm_, comm.size(), id, comm.rank()));
  }
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;
  ~NcclCommunicator() {
    if (comm_ != nullptr) (void)ncclCommDestroy(comm_);
  }
  [[nodiscard]] ncclComm_t get() const noexcept { return comm_; }

 private:
  ncclComm_t comm_ = nullptr;
};

class NcclReducer final : public GradientReducer {
 public:
  NcclReducer(const Communicator& comm, int device) : device_(device), nccl_(comm, device) {}

  [[nodiscard]] std::string_view name() const override { return "nccl"; }

  // Enqueued on the legacy default stream, which waits for all work queued on the device's
  // blocking streams (the model's stream is one). So the reduction reads finished gradients
  // even when the caller did not call Model::synchronize(), as on a rank whose only work this
  // step was zero_gradients(), an asynchronous memset. On a private stream it would race.
  void allreduce_sum(float* buffer, std::int64_t count) override {
    if (count < 0) throw UsageError("allreduce_sum: negative count");
    cuda::DeviceGuard guard(device_);
    cudaStream_t legacy = nullptr;
    ANTDT_CHECK_NCCL(
        ncclAllReduce(buffer, buffer, static_cast<std::size_t>(count), ncclFloat, ncclSum, nccl_.get(), legacy));
    ANTDT_CHECK_CUDA(cudaStreamSynchronize(legacy));
  }

 private:
  int device_;
  NcclCommunicator nccl_;
};

}  // namespace

ReducerBackend nccl_backend() {
  ReducerBackend b;
  b.name = "nccl";
  b.needs_distinct_devices = true;
  b.unusable_reason = [](const DeviceInfo& device) -> std::string {
    if (device.backend != Backend::cuda) return "the model is on the host";
    int version = 0;
    if (ncclGetVersion(&version) != ncclSuccess) return "ncclGetVersion failed: the NCCL library is unusable";
    return "";
  };
  b.make = [](const Communicator& comm, const DeviceInfo& device) -> std::unique_ptr<GradientReducer> {
    return std::make_unique<NcclReducer>(comm, device.device_id);
  };
  return b;
}

}  // namespace antdt::comm
