#include "antdt/runtime.hpp"

#include <mpi.h>

#include "antdt/config.hpp"
#include "antdt/error.hpp"
#include "core/log.hpp"
#include "transport/comm.hpp"

#if ANTDT_HAVE_KOKKOS
#include <Kokkos_Core.hpp>
#endif

namespace antdt {

Environment::Environment(int& argc, char**& argv) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    int provided = 0;
    // FUNNELED: only the main thread calls MPI; helper threads never do.
    ANTDT_CHECK_MPI(MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided));
    owns_mpi_ = true;
  }
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size_);
  log::set_rank(world_rank_, world_size_);
#if ANTDT_HAVE_KOKKOS
  if (!Kokkos::is_initialized()) {
    Kokkos::InitArguments args;
    args.disable_warnings = true;
    Kokkos::initialize(args);
    owns_kokkos_ = true;
  }
#endif
}

Environment::~Environment() {
#if ANTDT_HAVE_KOKKOS
  if (owns_kokkos_ && Kokkos::is_initialized()) Kokkos::finalize();
#endif
  if (owns_mpi_ && mpi_is_active()) MPI_Finalize();
}

}  // namespace antdt
