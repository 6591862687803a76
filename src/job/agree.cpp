#include "job/agree.hpp"

#include <cstdint>
#include <exception>
#include <string>
#include <vector>

#include "antdt/error.hpp"
#include "core/error_kind.hpp"
#include "transport/guard.hpp"

namespace antdt::detail {

void agree(MPI_Comm comm, const std::function<void()>& local) {
  ErrorKind kind = ErrorKind::runtime;
  std::string what;
  bool failed = false;
  try {
    local();
  } catch (const std::exception& e) {
    failed = true;
    kind = error_kind(e);
    what = e.what();
  }
  int rank = 0, world = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &world);
  // The lowest failing rank has the largest world - rank.
  int mine = failed ? world - rank : 0, worst = 0;
  allreduce(&mine, &worst, 1, MPI_INT, MPI_MAX, comm);
  if (worst == 0) return;
  const int reporter = world - worst;
  // Its kind and message, on every rank: only when something failed, so it costs nothing
  // on the usual path.
  std::uint64_t header[2] = {static_cast<std::uint64_t>(kind), what.size()};
  bcast(header, 2, MPI_UINT64_T, reporter, comm);
  std::vector<char> text(what.begin(), what.end());
  text.resize(header[1]);
  bcast(text.data(), static_cast<int>(text.size()), MPI_CHAR, reporter, comm);
  throw_shared_error(static_cast<ErrorKind>(header[0]), std::string(text.begin(), text.end()), rank != reporter);
}

}  // namespace antdt::detail
