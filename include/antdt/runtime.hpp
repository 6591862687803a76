// Process-wide setup: MPI and (when built with it) Kokkos, in the right order.
//
//   int main(int argc, char** argv) {
//     antdt::Environment env(argc, argv);   // MPI_Init_thread + Kokkos::initialize
//     ...
//   }                                        // Kokkos::finalize + MPI_Finalize
//
// Each is initialised only if nobody has done it yet, and finalised only by whoever
// initialised it, so an application that manages MPI or Kokkos itself keeps control.
// Create at most one Environment per process, on the main thread.
#pragma once

namespace antdt {

class Environment {
 public:
  Environment(int& argc, char**& argv);
  Environment(const Environment&) = delete;
  Environment& operator=(const Environment&) = delete;
  ~Environment();  // never throws

  [[nodiscard]] int world_rank() const noexcept { return world_rank_; }
  [[nodiscard]] int world_size() const noexcept { return world_size_; }

 private:
  bool owns_mpi_ = false;
  bool owns_kokkos_ = false;
  int world_rank_ = 0;
  int world_size_ = 1;
};

}  // namespace antdt
