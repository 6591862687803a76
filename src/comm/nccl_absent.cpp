// The NCCL backend in builds without NCCL: listed, never usable, with the reason.
#include <string>

#include "antdt/error.hpp"
#include "comm/reducer_backends.hpp"

namespace antdt::comm {

ReducerBackend nccl_backend() {
  ReducerBackend b;
  b.name = "nccl";
  b.needs_distinct_devices = true;
  b.unusable_reason = [](const DeviceInfo&) {
    return std::string("this build of antdt has no NCCL (ANTDT_ENABLE_NCCL=OFF)");
  };
  b.make = [](const Communicator&, const DeviceInfo&) -> std::unique_ptr<GradientReducer> {
    throw Error("NCCL reducer requested in a build without NCCL");
  };
  return b;
}

}  // namespace antdt::comm
