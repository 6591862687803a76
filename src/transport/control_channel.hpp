// Private: the transport of the step's control exchange (docs/protocol.md). Every rank sends a
// report of the same size; the root sees all of them, decides, and each rank receives ITS OWN
// reply, plus a part shared by all (a new plan) when there is one.
//
// Cost per exchange: one MPI_Gather of the reports and one MPI_Scatter of fixed kSlotBytes
// slots, each carrying a rank's whole reply in the common case. Only when some reply is longer
// than its slot does an MPI_Scatterv carry the rest, and only when there is a shared part does
// an MPI_Bcast carry it. So what a rank receives per step does not grow with the number of
// ranks; the root's gather and scatter are the only O(ranks) parts.
//
// If `decide` throws on the root, every rank throws (the error is the reply), none hangs. The
// waits are guarded (guard.hpp): a waiting rank sleeps between polls, and a stalled rank is
// named by rank 0 and every rank stops. The channel works on its own duplicate of the
// communicator, so that a rank that calls end_step while another reduces is a usage error the
// guard names, never a collective matched against another.
#pragma once

#include <cstddef>
#include <functional>
#include <span>
#include <vector>

#include "transport/comm.hpp"

namespace antdt::detail {

class ControlChannel {
 public:
  static constexpr std::size_t kSlotBytes = 256;  // header + inline reply, per rank

  // The root's answer: every rank's reply, and what all of them get.
  struct Replies {
    std::vector<std::byte> per_rank;   // concatenated in rank order
    std::vector<std::size_t> offsets;  // rank r's reply is per_rank[offsets[r], offsets[r + 1])
    std::vector<std::byte> shared;     // empty: nothing for everyone this time
  };
  struct Received {
    std::vector<std::byte> mine;
    std::vector<std::byte> shared;
  };
  using Decide = std::function<Replies(const std::vector<std::span<const std::byte>>& reports)>;

  explicit ControlChannel(const Communicator& comm) : own_(Communicator::duplicate(comm.get())), comm_(&own_) {}

  // Collective over the communicator. `report` must have the same size on every rank.
  // `decide` runs on the root only.
  Received exchange(std::span<const std::byte> report, const Decide& decide);

  // Bytes this rank received, and sent, in the last exchange (the control-traffic figures).
  [[nodiscard]] std::size_t last_received_bytes() const noexcept { return last_received_; }
  [[nodiscard]] std::size_t last_sent_bytes() const noexcept { return last_sent_; }

 private:
  void scatter_overflow(const Replies& replies, std::size_t my_length, Received& out);
  void finish(MPI_Request& request) const;

  Communicator own_;
  const Communicator* comm_;
  std::vector<std::byte> gathered_;
  std::vector<std::byte> slots_;
  std::vector<std::byte> mine_slot_;
  std::size_t last_received_ = 0;
  std::size_t last_sent_ = 0;
};

}  // namespace antdt::detail
