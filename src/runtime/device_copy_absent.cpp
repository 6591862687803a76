// Builds without CUDA hold no device buffer, so no device copy can be asked for.
#include "antdt/error.hpp"
#include "runtime/device_copy.hpp"

namespace antdt::detail {

void copy_device_to_host(void*, const void*, std::size_t) {
  ANTDT_ASSERT(false, "device copy in a build without CUDA");
}

void copy_host_to_device(void*, const void*, std::size_t) {
  ANTDT_ASSERT(false, "device copy in a build without CUDA");
}

}  // namespace antdt::detail
