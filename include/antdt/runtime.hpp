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
//
// A rank whose program ends before it built a Job (a return or a caught error before
// antdt::Job) would leave the other ranks waiting at their Job's start-up, and be named as a
// stalled node after the step timeout. So as MPI_Finalize nears, such a rank tells them: another
// rank tells rank 0, rank 0 every rank (one small message on MPI_COMM_WORLD, tags 31001-31003),
// and they stop at once, naming it as having ended (docs/errors.md). A program that builds no
// Job at all (a tool, a benchmark of its own MPI calls) passes antdt::without_jobs, and its ranks
// send nothing.
#pragma once

namespace antdt {

struct WithoutJobs {};
inline constexpr WithoutJobs without_jobs{};

class Environment {
 public:
  Environment(int& argc, char**& argv);
  Environment(int& argc, char**& argv, WithoutJobs);
  Environment(const Environment&) = delete;
  Environment& operator=(const Environment&) = delete;
  ~Environment();  // never throws

  [[nodiscard]] int world_rank() const noexcept { return world_rank_; }
  [[nodiscard]] int world_size() const noexcept { return world_size_; }

 private:
  bool owns_mpi_ = false;
  bool owns_kokkos_ = false;
  bool builds_jobs_ = true;
  int world_rank_ = 0;
  int world_size_ = 1;
};

}  // namespace antdt
