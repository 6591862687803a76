// Private: how the ranks of a job agree on a failure, so that every rank throws the same error
// (kind and message: Error::shared) and the job ends with one line and one exit code, with no
// rank left waiting in a collective and no MPI_Abort.
#pragma once

#include <mpi.h>

#include <functional>

namespace antdt::detail {

// Collective over `comm`: every rank runs `local`; then all learn whether any rank failed. If
// some did, every rank throws the error of the lowest failing rank (the same kind, with its
// message), shared; only that rank's copy is first-hand (Error::heard is false there).
void agree(MPI_Comm comm, const std::function<void()>& local);

}  // namespace antdt::detail
