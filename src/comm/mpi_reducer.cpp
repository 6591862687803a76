// MPI reduction of the fused gradient buffer, and the backend list / selection.
//
// Host buffers are reduced with MPI_Iallreduce(MPI_SUM), in place or, where that picks a better
// algorithm in Open MPI (detail::send_copy_pays: 4 ranks, 64 KiB), from a copy. Device buffers
// (a CUDA model whose ranks cannot use NCCL) are staged through a page-locked host copy,
// because Open MPI here is not CUDA-aware. Counts above INT_MAX go in INT_MAX-sized pieces (MPI counts are int).
//
// Overlapped (begin_overlapped), one all-reduce per bucket as the model reports it:
//  - CUDA models on every rank: the model has queued its whole backward pass and copies each
//    finished bucket into the page-locked staging buffer, so the host thread is idle while the
//    device computes. Each bucket is reduced and waited for there at once (allreduce_host),
//    and the device keeps computing the remaining layers meanwhile.
//  - Host models: the host thread computes the remaining layers, so each bucket goes by
//    MPI_Iallreduce, progressed by MPI_Testall from the model's poll() calls (Open MPI 4.1 has
//    no progress thread: a non-blocking collective advances only inside MPI calls).
// The choice is made once, collectively: waiting at once only when every rank's buffers are on a
// device. (Both are the guarded MPI_Iallreduce since the stall guard; the choice dates from a
// blocking MPI_Allreduce, which does not match a non-blocking one.)
#include <algorithm>
#include <climits>
#include <cstddef>
#include <string>
#include <vector>

#include <mpi.h>

#include "antdt/error.hpp"
#include "comm/reducer_backends.hpp"
#include "core/log.hpp"
#include "runtime/device.hpp"
#include "runtime/device_copy.hpp"
#include "transport/guard.hpp"

namespace antdt {
namespace comm {
namespace {

// Calls f(first, piece) for consecutive pieces of at most INT_MAX floats (MPI counts are int).
template <class F>
void for_each_piece(float* data, std::int64_t count, F f) {
  for (std::int64_t first = 0; first < count; first += INT_MAX) {
    f(data + first, static_cast<int>(std::min<std::int64_t>(INT_MAX, count - first)));
  }
}

// Whether an all-reduce of `count` floats has a piece that is sent from a copy.
bool copy_pays(MPI_Comm comm, std::int64_t count) {
  return detail::send_copy_pays(comm, static_cast<int>(std::min<std::int64_t>(count, INT_MAX)), MPI_FLOAT);
}

// The MPI_Iallreduce of `count` floats at `data`, its requests appended to `requests`. In
// place, or from `send_copy` (as many floats, kept until the requests complete; may be null
// where no piece pays) where detail::send_copy_pays says so.
void start_allreduce(MPI_Comm comm, float* data, std::int64_t count, float* send_copy,
                     std::vector<MPI_Request>& requests) {
  for_each_piece(data, count, [&](float* first, int piece) {
    const void* send = MPI_IN_PLACE;
    if (send_copy != nullptr && detail::send_copy_pays(comm, piece, MPI_FLOAT)) {
      float* copy = send_copy + (first - data);
      std::copy(first, first + piece, copy);
      send = copy;
    }
    requests.push_back(MPI_REQUEST_NULL);
    ANTDT_CHECK_MPI(MPI_Iallreduce(send, first, piece, MPI_FLOAT, MPI_SUM, comm, &requests.back()));
  });
}

// start_allreduce, waited for at once (guarded).
void allreduce_host(MPI_Comm comm, float* buffer, std::int64_t count, float* send_copy) {
  std::vector<MPI_Request> requests;
  start_allreduce(comm, buffer, count, send_copy, requests);
  detail::wait_requests(requests);
}

void check_buckets(const std::vector<GradientBucket>& buckets, std::int64_t count) {
  std::vector<GradientBucket> sorted = buckets;
  std::sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) { return a.offset < b.offset; });
  std::int64_t next = 0;
  for (const GradientBucket& b : sorted) {
    if (b.offset != next || b.count < 1) {
      throw UsageError("begin_overlapped: the buckets must be non-empty, disjoint and cover [0, " +
                       std::to_string(count) + ") of the buffer; the range from " + std::to_string(next) +
                       " is not (pass Model::gradient_buckets())");
    }
    next = b.offset + b.count;
  }
  if (next != count) {
    throw UsageError("begin_overlapped: the buckets cover [0, " + std::to_string(next) + ") of a buffer of " +
                     std::to_string(count) + " floats (pass Model::gradient_buckets())");
  }
}

// One step's overlapped reduction: the buffer itself on the host, the staging copy for a
// device buffer.
class MpiOverlap final : public OverlappedReduction {
 public:
  MpiOverlap(MPI_Comm comm, float* buffer, std::int64_t count, std::vector<GradientBucket> buckets, float* staging,
             bool blocking, float* send_copy)
      : comm_(comm),
        buffer_(buffer),
        count_(count),
        buckets_(std::move(buckets)),
        staging_(staging),
        blocking_(blocking),
        send_copy_(send_copy) {}
  MpiOverlap(const MpiOverlap&) = delete;
  MpiOverlap& operator=(const MpiOverlap&) = delete;
  ~MpiOverlap() override {
    if (!finished_ && !requests_.empty()) {
      ANTDT_LOG(error) << "an overlapped gradient reduction was abandoned with " << requests_.size()
                       << " all-reduces in flight; the job cannot continue consistently";
    }
  }

  [[nodiscard]] float* host_copy() override { return staging_; }

  void ready(std::size_t index) override {
    if (finished_ || index != started_ || index >= buckets_.size()) {
      throw UsageError("overlapped reduction: bucket " + std::to_string(index) + " reported where bucket " +
                       std::to_string(started_) + " of " + std::to_string(buckets_.size()) +
                       " was due; report each bucket once, in order, from the step's last accumulate only");
    }
    start(index);
  }

  void poll() override {
    if (requests_.empty()) return;
    int done = 0;
    ANTDT_CHECK_MPI(MPI_Testall(static_cast<int>(requests_.size()), requests_.data(), &done, MPI_STATUSES_IGNORE));
  }

  void finish() override {
    if (finished_) throw UsageError("overlapped reduction finished twice");
    while (started_ < buckets_.size()) {
      const GradientBucket& b = buckets_[started_];
      if (staging_ != nullptr) {  // not reported by the model: fetch it (after its queued work)
        detail::copy_device_to_host(staging_ + b.offset, buffer_ + b.offset,
                                    static_cast<std::size_t>(b.count) * sizeof(float));
      }
      start(started_);
    }
    detail::wait_requests(requests_);
    finished_ = true;
    if (staging_ != nullptr) {
      detail::copy_host_to_device(buffer_, staging_, static_cast<std::size_t>(count_) * sizeof(float));
    }
  }

 private:
  void start(std::size_t index) {
    const GradientBucket& b = buckets_[index];
    float* data = (staging_ != nullptr ? staging_ : buffer_) + b.offset;
    float* copy = send_copy_ != nullptr ? send_copy_ + b.offset : nullptr;
    if (blocking_) {
      allreduce_host(comm_, data, b.count, copy);
    } else {
      start_allreduce(comm_, data, b.count, copy, requests_);
    }
    ++started_;
  }

  MPI_Comm comm_;
  float* buffer_;
  std::int64_t count_;
  std::vector<GradientBucket> buckets_;
  float* staging_;  // nullptr for a host buffer
  bool blocking_;   // each bucket waited for at once (every rank's buffers on a device), else polled
  std::vector<MPI_Request> requests_;
  float* send_copy_;  // count_ floats the buckets are sent from (detail::send_copy_pays), or nullptr
  std::size_t started_ = 0;
  bool finished_ = false;
};

class MpiReducer final : public GradientReducer {
 public:
  // Device buffers are staged through page-locked memory, so both copies go by DMA.
  // Collective over comm.
  // The communicator object is read at every reduction: a Session's comm() changes when ranks
  // sit out or rejoin (backup workers), and the reducer follows it.
  MpiReducer(const Communicator& comm, bool device_buffers)
      : comm_(&comm), device_buffers_(device_buffers), staging_(PinnedAllocator<float>(device_buffers)) {
    int mine = device_buffers ? 1 : 0;
    detail::allreduce(&mine, &all_device_buffers_, 1, MPI_INT, MPI_MIN, comm_->get());
  }

  [[nodiscard]] std::string_view name() const override { return "mpi"; }

  void allreduce_sum(float* buffer, std::int64_t count) override {
    if (count < 0) throw UsageError("allreduce_sum: negative count");
    const MPI_Comm comm = comm_->get();
    float* copy = send_copy(count, copy_pays(comm, count));
    if (!device_buffers_) {
      allreduce_host(comm, buffer, count, copy);
      return;
    }
    staging_.resize(static_cast<std::size_t>(count));
    const std::size_t bytes = static_cast<std::size_t>(count) * sizeof(float);
    detail::copy_device_to_host(staging_.data(), buffer, bytes);
    allreduce_host(comm, staging_.data(), count, copy);
    detail::copy_host_to_device(buffer, staging_.data(), bytes);
  }

  [[nodiscard]] std::unique_ptr<OverlappedReduction> begin_overlapped(float* buffer, std::int64_t count,
                                                                      std::vector<GradientBucket> buckets) override {
    if (count < 0) throw UsageError("begin_overlapped: negative count");
    check_buckets(buckets, count);
    if (device_buffers_) staging_.resize(static_cast<std::size_t>(count));
    const MPI_Comm comm = comm_->get();
    float* copy = send_copy(count, std::any_of(buckets.begin(), buckets.end(),
                                               [&](const GradientBucket& b) { return copy_pays(comm, b.count); }));
    return std::make_unique<MpiOverlap>(comm, buffer, count, std::move(buckets),
                                        device_buffers_ ? staging_.data() : nullptr, all_device_buffers_ == 1, copy);
  }

 private:
  // The buffer a reduction of `count` floats is sent from where some of it pays for a copy
  // (copy_pays), kept from step to step; nullptr where none does.
  float* send_copy(std::int64_t count, bool pays) {
    if (!pays) return nullptr;
    send_copy_.resize(static_cast<std::size_t>(count));
    return send_copy_.data();
  }

  const Communicator* comm_;  // not owned
  bool device_buffers_;
  int all_device_buffers_ = 0;  // 1 when every rank's are: overlapped buckets are then waited for at once
  HostVector<float> staging_;
  std::vector<float> send_copy_;  // what large reductions are sent from (send_copy)
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
  detail::allreduce(&local_ok, &all_ok, 1, MPI_INT, MPI_MIN, comm.get());
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
    detail::allreduce(&local_ok, &all_ok, 1, MPI_INT, MPI_MIN, comm.get());
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
