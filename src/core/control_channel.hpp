// Private: the step's small control collective. Every rank contributes a report of the same
// size; the root sees all reports, decides a reply, and the reply reaches every rank.
// Cost per step: one MPI_Gather and one MPI_Bcast (header + reply up to kInlineReplyBytes;
// a second MPI_Bcast only for a larger reply), all small.
// If `decide` throws on the root, every rank throws (the error is the reply), none hangs.
#pragma once

#include <cstddef>
#include <functional>
#include <span>
#include <vector>

#include "antdt/comm.hpp"

namespace antdt::detail {

class ControlChannel {
 public:
  static constexpr std::size_t kInlineReplyBytes = 496;  // header + inline reply = 512 bytes
  using Decide = std::function<std::vector<std::byte>(const std::vector<std::span<const std::byte>>& reports)>;

  explicit ControlChannel(const Communicator& comm) : comm_(&comm) {}

  // Collective over the communicator. `report` must have the same size on every rank.
  // `decide` runs on the root only. Returns the reply on every rank.
  std::vector<std::byte> exchange(std::span<const std::byte> report, const Decide& decide);

  // Bytes this rank sent and received in the last exchange (for the control-traffic figure).
  [[nodiscard]] std::size_t last_bytes() const noexcept { return last_bytes_; }

 private:
  const Communicator* comm_;
  std::vector<std::byte> gathered_;
  std::size_t last_bytes_ = 0;
};

}  // namespace antdt::detail
