#include "transport/comm.hpp"

#include <utility>

#include "antdt/error.hpp"
#include "transport/guard.hpp"

namespace antdt {

bool mpi_is_active() noexcept {
  int initialized = 0;
  int finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  return initialized != 0 && finalized == 0;
}

Communicator Communicator::duplicate(MPI_Comm user) {
  if (!mpi_is_active())
    throw MpiError(0, "antdt::Communicator::duplicate: MPI is not initialised (call MPI_Init first)");
  if (user == MPI_COMM_NULL) throw UsageError("antdt::Communicator::duplicate: the communicator is MPI_COMM_NULL");
  Communicator c;
  // The user's communicator may still carry MPI_ERRORS_ARE_FATAL; this is the one call
  // whose failure we cannot turn into an exception, which is acceptable for a dup. Waited for
  // like every collective of antdt's (guard.hpp): a rank that never comes is named.
  MPI_Request q = MPI_REQUEST_NULL;
  ANTDT_CHECK_MPI(MPI_Comm_idup(user, &c.comm_, &q));
  detail::wait_requests(std::span<MPI_Request>(&q, 1));
  ANTDT_CHECK_MPI(MPI_Comm_set_errhandler(c.comm_, MPI_ERRORS_RETURN));
  ANTDT_CHECK_MPI(MPI_Comm_rank(c.comm_, &c.rank_));
  ANTDT_CHECK_MPI(MPI_Comm_size(c.comm_, &c.size_));
  return c;
}

Communicator::Communicator(Communicator&& other) noexcept
    : comm_(std::exchange(other.comm_, MPI_COMM_NULL)),
      rank_(std::exchange(other.rank_, -1)),
      size_(std::exchange(other.size_, 0)) {}

Communicator& Communicator::operator=(Communicator&& other) noexcept {
  if (this != &other) {
    reset();
    comm_ = std::exchange(other.comm_, MPI_COMM_NULL);
    rank_ = std::exchange(other.rank_, -1);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

Communicator::~Communicator() { reset(); }

void Communicator::reset() noexcept {
  // After a wait abandoned on a stall, a collective may still be active on this communicator:
  // it is left to the end of the process (guard.hpp).
  if (comm_ != MPI_COMM_NULL && mpi_is_active() && !detail::waits_abandoned()) MPI_Comm_free(&comm_);
  comm_ = MPI_COMM_NULL;
  rank_ = -1;
  size_ = 0;
}

void Communicator::barrier() const { detail::barrier(comm_); }

}  // namespace antdt
