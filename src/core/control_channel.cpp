#include "core/control_channel.hpp"

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <exception>
#include <string>

#include "antdt/error.hpp"

namespace antdt::detail {

std::vector<std::byte> ControlChannel::exchange(std::span<const std::byte> report, const Decide& decide) {
  const int size = comm_->size();
  const int n = static_cast<int>(report.size());
  if (comm_->is_root()) gathered_.resize(static_cast<std::size_t>(n) * static_cast<std::size_t>(size));
  ANTDT_CHECK_MPI(MPI_Gather(report.data(), n, MPI_BYTE, gathered_.data(), n, MPI_BYTE, 0, comm_->get()));
  std::vector<std::byte> reply;
  // header[0]: reply size; header[1]: 1 when decide threw on the root. The error travels
  // as the reply, so every rank throws instead of waiting in a broadcast that never comes.
  std::uint64_t header[2] = {0, 0};
  std::exception_ptr root_error;
  if (comm_->is_root()) {
    std::vector<std::span<const std::byte>> reports;
    reports.reserve(static_cast<std::size_t>(size));
    for (int r = 0; r < size; ++r)
      reports.emplace_back(gathered_.data() + static_cast<std::size_t>(r) * n, static_cast<std::size_t>(n));
    try {
      reply = decide(reports);
    } catch (const std::exception& e) {
      root_error = std::current_exception();
      const std::string what = e.what();
      reply.resize(what.size());
      std::memcpy(reply.data(), what.data(), what.size());
      header[1] = 1;
    }
    header[0] = reply.size();
  }
  // One broadcast carries the header and, in the common case, the whole reply (replies are
  // a few hundred bytes: a plan now and then, a few grants); a second one only if it is larger.
  std::array<std::byte, sizeof header + kInlineReplyBytes> first{};
  if (comm_->is_root()) {
    std::memcpy(first.data(), header, sizeof header);
    std::memcpy(first.data() + sizeof header, reply.data(), std::min<std::size_t>(reply.size(), kInlineReplyBytes));
  }
  ANTDT_CHECK_MPI(MPI_Bcast(first.data(), static_cast<int>(first.size()), MPI_BYTE, 0, comm_->get()));
  std::memcpy(header, first.data(), sizeof header);
  if (!comm_->is_root()) {
    reply.resize(header[0]);
    std::memcpy(reply.data(), first.data() + sizeof header, std::min<std::size_t>(header[0], kInlineReplyBytes));
  }
  if (header[0] > kInlineReplyBytes) {
    ANTDT_CHECK_MPI(MPI_Bcast(reply.data() + kInlineReplyBytes, static_cast<int>(header[0] - kInlineReplyBytes),
                              MPI_BYTE, 0, comm_->get()));
  }
  if (header[1] != 0) {
    if (root_error) std::rethrow_exception(root_error);
    throw Error("rank 0 failed in the step's control exchange: " +
                std::string(reinterpret_cast<const char*>(reply.data()), reply.size()));
  }
  last_bytes_ = report.size() + first.size() + (header[0] > kInlineReplyBytes ? header[0] - kInlineReplyBytes : 0);
  return reply;
}

}  // namespace antdt::detail
