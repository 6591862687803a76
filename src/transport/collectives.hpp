// Private: the few small collectives antdt's setup paths share, each guarded (guard.hpp) (not the step exchange, which
// is transport/control_channel.hpp).
#pragma once

#include <mpi.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "antdt/error.hpp"
#include "core/error_kind.hpp"
#include "transport/comm.hpp"
#include "transport/guard.hpp"

namespace antdt::detail {

// MPI counts are ints, and a cast of a larger count wraps: the collectives of a buffer whose size
// the program chooses (gradients, registered state) go in pieces of at most `piece` (2^30)
// elements of `element_bytes` each.
constexpr std::int64_t kMpiPiece = std::int64_t{1} << 30;

// Calls f(start, n) for consecutive pieces of `buffer`: n elements of `element_bytes` each, at
// most `piece` of them.
template <class F>
void for_each_piece(void* buffer, std::int64_t count, std::size_t element_bytes, std::int64_t piece, F f) {
  const std::int64_t step = piece < 1 ? 1 : piece;
  auto* bytes = static_cast<std::byte*>(buffer);
  for (std::int64_t done = 0; done < count; done += step) {
    f(bytes + static_cast<std::size_t>(done) * element_bytes, static_cast<int>(std::min(count - done, step)));
  }
}

// `count` elements of `type` from `root` to every rank of `comm`, in pieces.
inline void bcast_in_pieces(void* buffer, std::int64_t count, MPI_Datatype type, std::size_t element_bytes, int root,
                            MPI_Comm comm, std::int64_t piece = kMpiPiece) {
  for_each_piece(buffer, count, element_bytes, piece,
                 [&](std::byte* start, int n) { bcast(start, n, type, root, comm); });
}

// Rank 0's vector, on every rank: its length, then its elements.
template <class T>
std::vector<T> broadcast_vector(const Communicator& comm, std::vector<T> values, MPI_Datatype type) {
  std::uint64_t n = values.size();
  bcast(&n, 1, MPI_UINT64_T, 0, comm.get());
  values.resize(n);
  bcast_in_pieces(values.data(), static_cast<std::int64_t>(n), type, sizeof(T), 0, comm.get());
  return values;
}

// Every rank's value, in rank order, on every rank.
template <class T>
std::vector<T> allgather_value(const Communicator& comm, T mine, MPI_Datatype type) {
  std::vector<T> all(static_cast<std::size_t>(comm.size()));
  allgather(&mine, 1, type, all.data(), comm.get());
  return all;
}

// Whether every rank of `comm` shares one node's memory (collective).
inline bool on_one_node(const Communicator& comm) {
  MPI_Comm node = MPI_COMM_NULL;
  ANTDT_CHECK_MPI(MPI_Comm_split_type(comm.get(), MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node));
  int size = 0;
  MPI_Comm_size(node, &size);
  MPI_Comm_free(&node);
  int all = size == comm.size() ? 1 : 0;
  allreduce(MPI_IN_PLACE, &all, 1, MPI_INT, MPI_MIN, comm.get());
  return all == 1;
}

// Every rank's string on rank 0, in rank order (empty elsewhere); each is cut to 255 bytes.
inline std::vector<std::string> gather_strings(const Communicator& comm, const std::string& mine) {
  constexpr int kWidth = 256;
  char buf[kWidth] = {};
  mine.copy(buf, kWidth - 1);
  std::vector<char> all(comm.is_root() ? static_cast<std::size_t>(kWidth) * comm.size() : 0);
  gather(buf, kWidth, MPI_CHAR, all.data(), 0, comm.get());
  std::vector<std::string> out;
  for (int r = 0; comm.is_root() && r < comm.size(); ++r)
    out.emplace_back(all.data() + static_cast<std::size_t>(r) * kWidth);
  return out;
}

// An in-place all-reduce of `count` elements of `type` (`element_bytes` each), in pieces.
inline void allreduce_in_place(void* buffer, std::int64_t count, MPI_Datatype type, std::size_t element_bytes,
                               MPI_Op op, MPI_Comm comm, std::int64_t piece = kMpiPiece) {
  for_each_piece(buffer, count, element_bytes, piece,
                 [&](std::byte* start, int n) { allreduce(MPI_IN_PLACE, start, n, type, op, comm); });
}

// What one rank passes to a collective that the program asked for (Job::reduce, ::broadcast).
struct CallShape {
  enum class Type : std::int64_t { bytes = 0, float32 = 1, int64 = 2, device_float32 = 3 };
  Type type = Type::bytes;
  std::int64_t count = 0;  // elements
  std::int64_t root = -1;  // a broadcast's root; -1 for a reduction
};

// Checks, before such a collective, that every rank of `comm` passes the same shape: one
// all-reduce of the fields' maxima and minima. A mismatch would otherwise end the job in MPI
// (MPI_ERR_TRUNCATE, exit 15, no word of which call) or pass unseen (a broadcast whose ranks
// name different roots); here it is a UsageError on every rank (rank 0 says it) naming the call
// and what each rank passed: "Job::reduce: the ranks disagree: rank 0: 100 float32; rank 1:
// 101 float32". `rank` is this process's rank as the program knows it.
inline void agree_on_call(MPI_Comm comm, const std::string& call, const CallShape& mine, int rank) {
  const std::int64_t fields[3] = {static_cast<std::int64_t>(mine.type), mine.count, mine.root};
  std::int64_t extremes[6];
  for (int i = 0; i < 3; ++i) {
    extremes[2 * i] = fields[i];
    extremes[2 * i + 1] = -fields[i];
  }
  allreduce(MPI_IN_PLACE, extremes, 6, MPI_INT64_T, MPI_MAX, comm);
  bool same = true;
  for (int i = 0; i < 3; ++i) same = same && extremes[2 * i] == -extremes[2 * i + 1];
  if (same) return;
  // Every rank is here: what each passed, grouped by shape, the same text on every rank.
  const std::int64_t row[4] = {rank, fields[0], fields[1], fields[2]};
  int size = 0;
  int me = 0;
  MPI_Comm_size(comm, &size);
  MPI_Comm_rank(comm, &me);
  std::vector<std::int64_t> rows(4 * static_cast<std::size_t>(size));
  allgather(row, 4, MPI_INT64_T, rows.data(), comm);
  static const char* const kTypes[] = {"bytes", "float32", "int64", "float32 on the device"};
  std::map<std::vector<std::int64_t>, std::vector<std::int64_t>> ranks_of;  // shape -> ranks
  for (std::size_t r = 0; r < rows.size(); r += 4) ranks_of[{rows[r + 1], rows[r + 2], rows[r + 3]}].push_back(rows[r]);
  std::vector<std::pair<std::vector<std::int64_t>, std::vector<std::int64_t>>> groups(ranks_of.begin(), ranks_of.end());
  std::sort(groups.begin(), groups.end(), [](const auto& a, const auto& b) { return a.second < b.second; });
  std::string text;
  for (const auto& [shape, ranks] : groups) {
    text += text.empty() ? "" : "; ";
    text += ranks.size() == 1 ? "rank " : "ranks ";
    for (std::size_t k = 0; k < ranks.size(); ++k) text += (k ? "," : "") + std::to_string(ranks[k]);
    const auto type = static_cast<std::size_t>(shape[0]);
    text += ": " + std::to_string(shape[1]) + " " + (type < 4 ? kTypes[type] : "?");
    if (shape[2] >= 0) text += " from root " + std::to_string(shape[2]);
  }
  throw_shared_error(ErrorKind::usage,
                     call + ": the ranks disagree (" + text +
                         "); every rank must make the same call at the same point, with the same size" +
                         (mine.root >= 0 ? " and root" : " and type"),
                     me != 0);
}

}  // namespace antdt::detail
