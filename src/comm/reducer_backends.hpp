// The ordered list of gradient-reduction backends make_reducer walks ("NCCL if possible,
// else MPI" as data). Each backend lives in its own file; a backend that is not built is
// defined by nccl_absent.cpp as never usable, with the reason. Private to libantdt.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "comm/reduce.hpp"
#include "runtime/device.hpp"
#include "transport/comm.hpp"

namespace antdt::comm {

struct ReducerBackend {
  std::string name;
  // Local, non-collective check: "" when this rank can use the backend, else why not.
  std::function<std::string(const DeviceInfo&)> unusable_reason;
  // NCCL refuses two ranks of one communicator on the same GPU ("duplicate GPU").
  bool needs_distinct_devices = false;
  // Collective over comm.
  std::function<std::unique_ptr<GradientReducer>(const Communicator&, const DeviceInfo&)> make;
};

[[nodiscard]] ReducerBackend nccl_backend();  // nccl_reducer.cpp, or nccl_absent.cpp without NCCL
[[nodiscard]] ReducerBackend mpi_backend();   // mpi_reducer.cpp: always usable

}  // namespace antdt::comm
