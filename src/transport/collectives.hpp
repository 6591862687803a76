// Private: the few small collectives antdt's setup paths share, each guarded (guard.hpp) (not the step exchange, which
// is transport/control_channel.hpp).
#pragma once

#include <mpi.h>

#include <cstdint>
#include <string>
#include <vector>

#include "antdt/error.hpp"
#include "transport/comm.hpp"
#include "transport/guard.hpp"

namespace antdt::detail {

// Rank 0's vector, on every rank: its length, then its elements.
template <class T>
std::vector<T> broadcast_vector(const Communicator& comm, std::vector<T> values, MPI_Datatype type) {
  std::uint64_t n = values.size();
  bcast(&n, 1, MPI_UINT64_T, 0, comm.get());
  values.resize(n);
  bcast(values.data(), static_cast<int>(n), type, 0, comm.get());
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

}  // namespace antdt::detail
