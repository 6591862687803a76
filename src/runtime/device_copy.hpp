// Private: blocking copies between host and device memory, for the code that stages device
// buffers through the host (the MPI reducer, gradient snapshots). CUDA builds define them with
// cudaMemcpy (device_copy_cuda.cpp); other builds never hold a device buffer, so there they
// are unreachable (device_copy_absent.cpp).
#pragma once

#include <cstddef>

namespace antdt::detail {

void copy_device_to_host(void* host_dst, const void* device_src, std::size_t bytes);
void copy_host_to_device(void* device_dst, const void* host_src, std::size_t bytes);

}  // namespace antdt::detail
