#include "core/control_channel.hpp"

#include <cstdint>

#include "antdt/error.hpp"

namespace antdt::detail {

std::vector<std::byte> ControlChannel::exchange(std::span<const std::byte> report, const Decide& decide) {
  const int size = comm_->size();
  const int n = static_cast<int>(report.size());
  if (comm_->is_root()) gathered_.resize(static_cast<std::size_t>(n) * static_cast<std::size_t>(size));
  ANTDT_CHECK_MPI(MPI_Gather(report.data(), n, MPI_BYTE, gathered_.data(), n, MPI_BYTE, 0, comm_->get()));
  std::vector<std::byte> reply;
  std::uint64_t reply_size = 0;
  if (comm_->is_root()) {
    std::vector<std::span<const std::byte>> reports;
    reports.reserve(static_cast<std::size_t>(size));
    for (int r = 0; r < size; ++r) reports.emplace_back(gathered_.data() + static_cast<std::size_t>(r) * n, static_cast<std::size_t>(n));
    reply = decide(reports);
    reply_size = reply.size();
  }
  ANTDT_CHECK_MPI(MPI_Bcast(&reply_size, 1, MPI_UINT64_T, 0, comm_->get()));
  reply.resize(reply_size);
  if (reply_size > 0) ANTDT_CHECK_MPI(MPI_Bcast(reply.data(), static_cast<int>(reply_size), MPI_BYTE, 0, comm_->get()));
  last_bytes_ = report.size() + sizeof reply_size + reply_size;
  return reply;
}

}  // namespace antdt::detail
