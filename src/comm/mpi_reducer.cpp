// MPI reduction of the fused gradient buffer, and the backend list / selection.
//
// Host buffers are reduced in place with MPI_Allreduce(MPI_IN_PLACE, MPI_SUM). Device buffers
// (a CUDA model whose ranks cannot use NCCL) are staged through a page-locked host copy,
// because Open MPI here is not CUDA-aware. Counts above INT_MAX go in INT_MAX-sized pieces (MPI counts are int).
#include <algorithm>
#include <climits>
#include <cstddef>
#include <string>
#include <vector>

#include <mpi.h>

#include "antdt/device.hpp"
#include "antdt/error.hpp"
#include "antdt/log.hpp"
#include "comm/reducer_backends.hpp"
#include "host/mlp_common.hpp"

namespace antdt {
namespace comm {
namespace {

void allreduce_host(MPI_Comm comm, float* buffer, std::int64_t count) {
  for (std::int64_t first = 0; first < count; first += INT_MAX) {
    const int piece = static_cast<int>(std::min<std::int64_t>(INT_MAX, count - first));
    ANTDT_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, buffer + first, piece, MPI_FLOAT, MPI_SUM, comm));
  }
}

class MpiReducer final : public GradientReducer {
 public:
  // Device buffers are staged through page-locked memory, so both copies go by DMA.
  MpiReducer(const Communicator& comm, bool device_buffers)
      : comm_(comm.get()), device_buffers_(device_buffers), staging_(PinnedAllocator<float>(device_buffers)) {}

  [[nodiscard]] std::string_view name() const override { return "mpi"; }

  void allreduce_sum(float* buffer, std::int64_t count) override {
    if (count < 0) throw UsageError("allreduce_sum: negative count");
    if (!device_buffers_) {
      allreduce_host(comm_, buffer, count);
      return;
    }
    staging_.resize(static_cast<std::size_t>(count));
    const std::size_t bytes = static_cast<std::size_t>(count) * sizeof(float);
    detail::copy_device_to_host(staging_.data(), buffer, bytes);
    allreduce_host(comm_, staging_.data(), count);
    detail::copy_host_to_device(buffer, staging_.data(), bytes);
  }

 private:
  MPI_Comm comm_;  // not owned
  bool device_buffers_;
  HostVector<float> staging_;
};

// True on every rank when no two ranks on one node use the same GPU. Collective over comm.
bool devices_distinct_per_node(const Communicator& comm, const DeviceInfo& device) {
  MPI_Comm node = MPI_COMM_NULL;
  ANTDT_CHECK_MPI(MPI_Comm_split_type(comm.get(), MPI_COMM_TYPE_SHARED, comm.rank(), MPI_INFO_NULL, &node));
  int node_size = 0;
  MPI_Comm_size(node, &node_size);
  std::vector<int> ids(static_cast<std::size_t>(node_size));
  const int mine = device.backend == Backend::cuda ? device.device_id : -1;
  const int rc = MPI_Allgather(&mine, 1, MPI_INT, ids.data(), 1, MPI_INT, node);
  MPI_Comm_free(&node);
  ANTDT_CHECK_MPI(rc);
  std::sort(ids.begin(), ids.end());
  int local_ok = std::adjacent_find(ids.begin(), ids.end()) == ids.end() ? 1 : 0;
  int all_ok = 0;
  ANTDT_CHECK_MPI(MPI_Allreduce(&local_ok, &all_ok, 1, MPI_INT, MPI_MIN, comm.get()));
  return all_ok == 1;
}

std::vector<ReducerBackend> backends() { return {nccl_backend(), mpi_backend()}; }

}  // namespace

ReducerBackend mpi_backend() {
  ReducerBackend b;
  b.name = "mpi";
  b.unusable_reason = [](const DeviceInfo&) { return std::string(); };
  b.make = [](const Communicator& comm, const DeviceInfo& device) -> std::unique_ptr<GradientReducer> {
    return std::make_unique<MpiReducer>(comm, device.backend == Backend::cuda);
  };
  return b;
}

}  // namespace comm

std::vector<ReducerCandidate> reducer_candidates(const Communicator& comm, const DeviceInfo& device) {
  if (!comm) throw UsageError("reducer_candidates: null communicator");
  std::vector<ReducerCandidate> out;
  const bool distinct = comm::devices_distinct_per_node(comm, device);
  for (const comm::ReducerBackend& b : comm::backends()) {
    ReducerCandidate c;
    c.name = b.name;
    std::string why = b.unusable_reason(device);
    if (why.empty() && b.needs_distinct_devices && !distinct) {
      why = "two ranks share a GPU on one node, which " + b.name + " refuses";
    }
    int local_ok = why.empty() ? 1 : 0;
    int all_ok = 0;
    ANTDT_CHECK_MPI(MPI_Allreduce(&local_ok, &all_ok, 1, MPI_INT, MPI_MIN, comm.get()));
    c.enabled = all_ok == 1;
    if (c.enabled) {
      c.reason = "usable on all " + std::to_string(comm.size()) + " ranks";
    } else if (!why.empty()) {
      c.reason = why;
    } else {
      c.reason = "not usable on every rank (usable on this one)";
    }
    out.push_back(std::move(c));
  }
  return out;
}

std::unique_ptr<GradientReducer> make_reducer(const Communicator& comm, const DeviceInfo& device) {
  const std::vector<ReducerCandidate> candidates = reducer_candidates(comm, device);
  for (const comm::ReducerBackend& b : comm::backends()) {
    const auto it =
        std::find_if(candidates.begin(), candidates.end(), [&](const ReducerCandidate& c) { return c.name == b.name; });
    if (it == candidates.end() || !it->enabled) continue;
    if (comm.is_root()) {
      std::string skipped;
      for (const ReducerCandidate& c : candidates) {
        if (c.name == b.name) break;
        skipped += " (" + c.name + " skipped: " + c.reason + ")";
      }
      ANTDT_LOG(info) << "gradient reduction: " << b.name
                      << (device.backend == Backend::cuda && b.name == "mpi" ? " staged through host memory" : "")
                      << skipped;
    }
    return b.make(comm, device);
  }
  throw Error("no gradient reduction backend is usable");  // unreachable: MPI always is
}

}  // namespace antdt
