// Job::reduce_device's machinery: a program's gradient sums in CUDA device memory summed over
// the ranks with the exact sample count, by the reducer the built-in model uses on a GPU (NCCL
// where every rank has a GPU of its own, else MPI through a host copy). The sums are copied
// into a device buffer with the count's digit slots behind them (comm/sample_count.hpp), that
// buffer is reduced in one collective, and the summed sums are copied back: two copies within
// the GPU's memory a step, no host round trip of the gradients on NCCL. Private to libantdt;
// device_reduction_cuda.cpp in CUDA builds, device_reduction_absent.cpp otherwise.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>

#include "session/session.hpp"
#include "transport/comm.hpp"

namespace antdt::detail {

class DeviceReduction {
 public:
  virtual ~DeviceReduction() = default;
  [[nodiscard]] virtual int device() const noexcept = 0;
  [[nodiscard]] virtual std::string_view reducer() const noexcept = 0;  // "nccl" or "mpi"
  // Collective: sums `device_sums` (count floats on device()) over the ranks in place, after
  // the work queued on the device's blocking streams; returns the step's sample count B (the
  // sum of every rank's local_samples). The caller divides.
  virtual std::int64_t reduce(Session& session, float* device_sums, std::int64_t count, std::int64_t local_samples) = 0;
};

// Collective over comm: every rank names its CUDA device. UsageError in a build without CUDA.
[[nodiscard]] std::unique_ptr<DeviceReduction> make_device_reduction(const Communicator& comm, int device);

}  // namespace antdt::detail
