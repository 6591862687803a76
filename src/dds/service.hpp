// Private: the DDS over MPI for programs that use it alone (and for the MPI tests). Rank 0
// hosts the Coordinator, every rank (rank 0 included) a Client. The Session embeds the same
// Coordinator/Client logic in its own control message instead of using this class.
//
// Per step, every rank calls next() (any number of times, at most `demand` samples in
// total, served from prefetched grants, never a round trip) and then end_step(), which is
// ONE ControlChannel exchange: each rank reports {consumed this step, demand for the next
// steps}; rank 0 commits the step, tops every rank up to prefetch_steps x demand, and the
// reply carries the new grants. Nothing per sample goes to rank 0.
//
// Collective: the constructor and end_step must be called by every rank of `comm`, in the
// same order. `comm` is not owned and must outlive the Service. Call end_step only after the
// step's gradient reduction: that is what makes a commit mean "trained on".
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "antdt/comm.hpp"
#include "antdt/dds.hpp"
#include "core/control_channel.hpp"

namespace antdt::dds {

class Service {
 public:
  // Collective. `demand` is this rank's samples per step for the first steps (may differ
  // per rank, may be 0; a negative one makes every rank throw UsageError).
  Service(const Communicator& comm, const LedgerOptions& options, std::int64_t demand, int prefetch_steps = 2);

  // This rank's next k sample indices. Throws UsageError if the step would take more than
  // the demand declared for it; returns fewer than k only when max_epochs is used up.
  std::vector<std::int64_t> next(std::int64_t k);
  // Collective: commits what every rank took this step and declares this rank's demand for
  // the next steps. If rank 0 rejects the step (UsageError for a negative demand on any
  // rank, Error otherwise), every rank throws and nothing is committed; the step can be
  // ended again.
  void end_step(std::int64_t next_demand);

  // As of the last end_step, on every rank.
  [[nodiscard]] bool exhausted() const noexcept { return exhausted_; }
  [[nodiscard]] std::int64_t completed_epochs() const noexcept { return completed_epochs_; }
  [[nodiscard]] std::int64_t held() const noexcept { return client_.held(); }
  // Bytes this rank sent and received in the last control exchange.
  [[nodiscard]] std::size_t last_control_bytes() const noexcept { return channel_.last_bytes(); }
  // Rank 0 only; nullptr elsewhere.
  [[nodiscard]] const Coordinator* coordinator() const noexcept { return coordinator_ ? &*coordinator_ : nullptr; }

 private:
  void exchange(std::int64_t consumed, std::int64_t demand);

  const Communicator* comm_;
  detail::ControlChannel channel_;
  std::optional<Coordinator> coordinator_;
  Client client_;
  std::int64_t demand_ = 0;
  std::int64_t taken_this_step_ = 0;
  std::int64_t completed_epochs_ = 0;
  bool exhausted_ = false;
};

}  // namespace antdt::dds
