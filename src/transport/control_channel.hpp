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
// If `decide` throws on the root, every rank throws (the error is the reply), none hangs. With a
// timeout set, no rank waits in an exchange longer than that (StallError; rank 0 at the
// timeout, the others a grace later) and a waiting rank sleeps between polls (step_gate.hpp).
#pragma once

#include <cstddef>
#include <functional>
#include <span>
#include <vector>

#include "antdt/comm.hpp"

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

  explicit ControlChannel(const Communicator& comm) : comm_(&comm) {}

  // Collective over the communicator. `report` must have the same size on every rank.
  // `decide` runs on the root only.
  Received exchange(std::span<const std::byte> report, const Decide& decide);

  // Seconds any one exchange may wait for the other ranks; 0: no limit (blocking collectives).
  void set_timeout(double seconds) noexcept { timeout_ = seconds; }

  // Bytes this rank received, and sent, in the last exchange (the control-traffic figures).
  [[nodiscard]] std::size_t last_received_bytes() const noexcept { return last_received_; }
  [[nodiscard]] std::size_t last_sent_bytes() const noexcept { return last_sent_; }

 private:
  void scatter_overflow(const Replies& replies, std::size_t my_length, Received& out);
  void finish(MPI_Request& request, double deadline, const char* what) const;
  [[nodiscard]] double deadline() const;

  const Communicator* comm_;
  std::vector<std::byte> gathered_;
  std::vector<std::byte> slots_;
  std::size_t last_received_ = 0;
  std::size_t last_sent_ = 0;
  double timeout_ = 0.0;
};

}  // namespace antdt::detail
