// The communicator antdt works on: its own duplicate of the user's communicator, with
// MPI_ERRORS_RETURN set on the duplicate so that failures become antdt::MpiError. The user's
// communicator is never modified and never freed by antdt.
#pragma once

#include <mpi.h>

namespace antdt {

class Communicator {
 public:
  // A null communicator (rank -1, size 0).
  Communicator() noexcept = default;

  // Collective over `user`: duplicates it and sets MPI_ERRORS_RETURN on the duplicate.
  // Throws MpiError if MPI is not initialised or the duplication fails.
  static Communicator duplicate(MPI_Comm user);

  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;
  Communicator(Communicator&& other) noexcept;
  Communicator& operator=(Communicator&& other) noexcept;
  // Frees the duplicate unless MPI is already finalised. Never throws.
  ~Communicator();

  [[nodiscard]] MPI_Comm get() const noexcept { return comm_; }
  [[nodiscard]] int rank() const noexcept { return rank_; }
  [[nodiscard]] int size() const noexcept { return size_; }
  [[nodiscard]] bool is_root() const noexcept { return rank_ == 0; }
  [[nodiscard]] explicit operator bool() const noexcept { return comm_ != MPI_COMM_NULL; }

  void barrier() const;

 private:
  void reset() noexcept;

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = -1;
  int size_ = 0;
};

// True between MPI_Init and MPI_Finalize.
[[nodiscard]] bool mpi_is_active() noexcept;

}  // namespace antdt
