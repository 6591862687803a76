#include "core/control_channel.hpp"

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
    for (int r = 0; r < size; ++r) reports.emplace_back(gathered_.data() + static_cast<std::size_t>(r) * n, static_cast<std::size_t>(n));
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
  ANTDT_CHECK_MPI(MPI_Bcast(header, 2, MPI_UINT64_T, 0, comm_->get()));
  reply.resize(header[0]);
  if (header[0] > 0) ANTDT_CHECK_MPI(MPI_Bcast(reply.data(), static_cast<int>(header[0]), MPI_BYTE, 0, comm_->get()));
  if (header[1] != 0) {
    if (root_error) std::rethrow_exception(root_error);
    throw Error("rank 0 failed in the step's control exchange: " +
                std::string(reinterpret_cast<const char*>(reply.data()), reply.size()));
  }
  last_bytes_ = report.size() + sizeof header + header[0];
  return reply;
}

}  // namespace antdt::detail
