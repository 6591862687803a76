// Builds without CUDA: no program can hold gradients in device memory that antdt could reduce.
#include "antdt/error.hpp"
#include "job/device_reduction.hpp"

namespace antdt::detail {

std::unique_ptr<DeviceReduction> make_device_reduction(const Communicator&, int) {
  throw UsageError(
      "Job::reduce_device: this antdt was built without CUDA (ANTDT_ENABLE_CUDA=OFF); reduce host memory with "
      "Job::reduce");
}

}  // namespace antdt::detail
