// Exact weighted gradient reduction. Each rank's Model buffer holds gradient SUMS plus the
// sample count in kSampleCountSlots digit slots (src/model/model.hpp, src/comm/sample_count.hpp);
// summing the whole buffer across ranks gives the global sums and the exact global count B in
// one collective, so apply_update() can divide by B
// and the update is (1/B) * sum over all used samples, whatever the split (a rank with zero
// samples joins with zeros).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "model/model.hpp"
#include "runtime/device.hpp"
#include "transport/comm.hpp"

namespace antdt {

// A reduction that starts while the gradients are still being computed: each bucket's
// all-reduce begins as soon as the backward pass reports it (Model::accumulate_overlapped,
// with this as the listener) and progresses while the remaining layers compute, as in DDP and
// Horovod. finish() starts the buckets not yet started (all of them on a rank with no
// samples), waits, and leaves the global sums in the buffer, as allreduce_sum would.
// Collective: every rank begins and finishes one per step, with the same buckets.
class OverlappedReduction : public GradientListener {
 public:
  virtual void finish() = 0;
};

// Sums a float buffer across all ranks of the communicator, in place. Collective; every rank
// passes the same count. A device buffer is reduced after all work already queued on the
// device's blocking streams (the Model's stream is one), so queued gradient work need not be
// waited for first; Model::synchronize() before the call is harmless. The communicator is not
// owned and must outlive the reducer.
class GradientReducer {
 public:
  virtual ~GradientReducer() = default;
  [[nodiscard]] virtual std::string_view name() const = 0;  // "mpi" or "nccl"
  // buffer: host memory for a host device; device memory for a CUDA device (NCCL on the
  // legacy default stream, or MPI staged through a host copy made by a synchronous
  // cudaMemcpy). Returns when the result is in `buffer`.
  virtual void allreduce_sum(float* buffer, std::int64_t count) = 0;
  // An overlapped reduction of `buffer` (as for allreduce_sum) in `buckets` (from
  // Model::gradient_buckets(): disjoint, covering [0, count), else UsageError). nullptr when
  // this backend does not overlap (NCCL in this version): use allreduce_sum. The reducer
  // must outlive it; one at a time.
  [[nodiscard]] virtual std::unique_ptr<OverlappedReduction> begin_overlapped(float* buffer, std::int64_t count,
                                                                              std::vector<GradientBucket> buckets) {
    (void)buffer, (void)count, (void)buckets;
    return nullptr;
  }
};

// One entry of the ordered backend list make_reducer walks: the first enabled one wins.
struct ReducerCandidate {
  std::string name;  // "nccl", "mpi"
  bool enabled = false;
  std::string reason;  // why it is (not) usable, for the startup report
};

// Collective over comm: every rank evaluates the same list and agrees on each entry (an entry
// is enabled only where it is usable on every rank, e.g. NCCL needs a distinct GPU per rank).
[[nodiscard]] std::vector<ReducerCandidate> reducer_candidates(const Communicator& comm, const DeviceInfo& device);

// NCCL when the model is on CUDA and NCCL is built and usable on every rank, otherwise MPI
// (device buffers staged through host). Collective over comm; logs the choice on rank 0.
[[nodiscard]] std::unique_ptr<GradientReducer> make_reducer(const Communicator& comm, const DeviceInfo& device);

}  // namespace antdt
