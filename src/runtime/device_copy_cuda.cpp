#include <cuda_runtime.h>

#include "antdt/error.hpp"
#include "runtime/device_copy.hpp"

namespace antdt::detail {

void copy_device_to_host(void* host_dst, const void* device_src, std::size_t bytes) {
  ANTDT_CHECK_CUDA(cudaMemcpy(host_dst, device_src, bytes, cudaMemcpyDeviceToHost));
}

void copy_host_to_device(void* device_dst, const void* host_src, std::size_t bytes) {
  ANTDT_CHECK_CUDA(cudaMemcpy(device_dst, host_src, bytes, cudaMemcpyHostToDevice));
}

}  // namespace antdt::detail
