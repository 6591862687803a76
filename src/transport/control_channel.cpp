#include "transport/control_channel.hpp"

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstring>
#include <exception>
#include <limits>
#include <string>

#include "antdt/error.hpp"
#include "core/error_kind.hpp"
#include "transport/guard.hpp"

namespace antdt::detail {

namespace {

// The head of every rank's slot. The overflow and shared flags are the same in every slot, so
// each rank knows which collectives follow without another round trip.
struct SlotHeader {
  std::uint64_t my_length = 0;      // this rank's reply, bytes
  std::uint64_t shared_length = 0;  // the part every rank gets (0: no broadcast follows)
  std::uint8_t error = 0;           // decide threw on the root: the shared part is its message
  std::uint8_t overflow = 0;        // some rank's reply is longer than its slot: a scatterv follows
};
constexpr std::size_t kHeaderBytes = 24;
static_assert(sizeof(std::uint64_t) * 2 + 2 <= kHeaderBytes);
constexpr std::size_t kInline = ControlChannel::kSlotBytes - kHeaderBytes;

void put_header(std::byte* slot, const SlotHeader& h) {
  std::memcpy(slot, &h.my_length, 8);
  std::memcpy(slot + 8, &h.shared_length, 8);
  std::memcpy(slot + 16, &h.error, 1);
  std::memcpy(slot + 17, &h.overflow, 1);
}

SlotHeader get_header(const std::byte* slot) {
  SlotHeader h;
  std::memcpy(&h.my_length, slot, 8);
  std::memcpy(&h.shared_length, slot + 8, 8);
  std::memcpy(&h.error, slot + 16, 1);
  std::memcpy(&h.overflow, slot + 17, 1);
  return h;
}

int as_count(std::size_t n) {
  if (n > static_cast<std::size_t>(INT_MAX))
    throw Error("control exchange: a reply of " + std::to_string(n) + " bytes");
  return static_cast<int>(n);
}

std::size_t length_of(const ControlChannel::Replies& r, std::size_t rank) {
  return r.offsets[rank + 1] - r.offsets[rank];
}

}  // namespace

ControlChannel::Received ControlChannel::exchange(std::span<const std::byte> report, const Decide& decide) {
  const auto size = static_cast<std::size_t>(comm_->size());
  const int n = as_count(report.size());
  if (comm_->is_root()) gathered_.resize(report.size() * size);
  MPI_Request q = MPI_REQUEST_NULL;
  ANTDT_CHECK_MPI(MPI_Igather(report.data(), n, MPI_BYTE, gathered_.data(), n, MPI_BYTE, 0, comm_->get(), &q));
  finish(q);

  Replies replies;
  std::exception_ptr root_error;
  std::uint8_t root_error_kind = 0;  // 1 + its ErrorKind, so that every rank throws the same kind
  if (comm_->is_root()) {
    std::vector<std::span<const std::byte>> reports;
    reports.reserve(size);
    for (std::size_t r = 0; r < size; ++r) reports.emplace_back(gathered_.data() + r * report.size(), report.size());
    try {
      replies = decide(reports);
      if (replies.offsets.size() != size + 1 || replies.offsets.back() != replies.per_rank.size())
        throw Error("control exchange: the root's replies do not match the communicator");
    } catch (const std::exception& e) {
      // The error travels as the shared part, so every rank throws instead of waiting.
      root_error = std::current_exception();
      root_error_kind = static_cast<std::uint8_t>(1 + static_cast<int>(detail::error_kind(e)));
      const std::string what = e.what();
      replies = Replies{{}, std::vector<std::size_t>(size + 1, 0), {}};
      replies.shared.resize(what.size());
      std::memcpy(replies.shared.data(), what.data(), what.size());
    }
    slots_.assign(size * kSlotBytes, std::byte{0});
    bool overflow = false;
    for (std::size_t r = 0; r < size; ++r) overflow = overflow || length_of(replies, r) > kInline;
    for (std::size_t r = 0; r < size; ++r) {
      std::byte* slot = slots_.data() + r * kSlotBytes;
      const std::size_t len = length_of(replies, r);
      put_header(slot,
                 SlotHeader{len, replies.shared.size(), root_error_kind, static_cast<std::uint8_t>(overflow ? 1 : 0)});
      if (len > 0) {  // an error's replies are empty: no buffer to copy from
        std::memcpy(slot + kHeaderBytes, replies.per_rank.data() + replies.offsets[r], std::min(len, kInline));
      }
    }
  }
  std::vector<std::byte>& mine_slot = mine_slot_;  // a member: a scatter abandoned on a stall writes into it later
  mine_slot.assign(kSlotBytes, std::byte{0});
  ANTDT_CHECK_MPI(MPI_Iscatter(slots_.data(), static_cast<int>(kSlotBytes), MPI_BYTE, mine_slot.data(),
                               static_cast<int>(kSlotBytes), MPI_BYTE, 0, comm_->get(), &q));
  finish(q);
  const SlotHeader head = get_header(mine_slot.data());
  Received out;
  out.mine.resize(head.my_length);
  if (head.my_length > 0) {
    std::memcpy(out.mine.data(), mine_slot.data() + kHeaderBytes, std::min<std::size_t>(head.my_length, kInline));
  }
  if (head.overflow != 0) scatter_overflow(replies, head.my_length, out);
  if (head.shared_length > 0) {
    out.shared = comm_->is_root() ? std::move(replies.shared) : std::vector<std::byte>(head.shared_length);
    ANTDT_CHECK_MPI(MPI_Ibcast(out.shared.data(), as_count(head.shared_length), MPI_BYTE, 0, comm_->get(), &q));
    finish(q);
  }
  last_sent_ = report.size();
  last_received_ = kSlotBytes + (head.my_length > kInline ? head.my_length - kInline : 0) + head.shared_length;
  if (head.error != 0) {
    if (root_error) {
      try {
        std::rethrow_exception(root_error);
      } catch (Error& e) {
        e.set_shared(true, false);  // every rank throws it: no rank need abort the others
        throw;
      }
    }
    // Rank 0's error, of its kind (a full disk there is exit 3 on every rank), heard here:
    // rank 0 says it, once.
    detail::throw_shared_error(static_cast<detail::ErrorKind>(head.error - 1),
                               std::string(reinterpret_cast<const char*>(out.shared.data()), out.shared.size()), true);
  }
  return out;
}

// The parts of the replies that did not fit their slots, each to its rank.
void ControlChannel::scatter_overflow(const Replies& replies, std::size_t my_length, Received& out) {
  std::vector<int> counts, displs;
  std::vector<std::byte> rest;
  if (comm_->is_root()) {
    const auto size = static_cast<std::size_t>(comm_->size());
    counts.resize(size);
    displs.resize(size);
    for (std::size_t r = 0; r < size; ++r) {
      const std::size_t len = length_of(replies, r);
      displs[r] = as_count(rest.size());
      counts[r] = as_count(len > kInline ? len - kInline : 0);
      if (len > kInline) {
        const auto* from = replies.per_rank.data() + replies.offsets[r] + kInline;
        rest.insert(rest.end(), from, from + (len - kInline));
      }
    }
  }
  const int mine = as_count(my_length > kInline ? my_length - kInline : 0);
  MPI_Request q = MPI_REQUEST_NULL;
  ANTDT_CHECK_MPI(MPI_Iscatterv(rest.data(), counts.data(), displs.data(), MPI_BYTE,
                                mine > 0 ? out.mine.data() + kInline : nullptr, mine, MPI_BYTE, 0, comm_->get(), &q));
  finish(q);
}

void ControlChannel::finish(MPI_Request& request) const {
  // Guarded (guard.hpp): a rank that stalls is named by rank 0's judge, and every rank stops.
  wait_requests(std::span<MPI_Request>(&request, 1));
}

}  // namespace antdt::detail
