#include "antdt/runtime.hpp"

#include <mpi.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>

#include "antdt/config.hpp"
#include "antdt/error.hpp"
#include "core/log.hpp"
#include "transport/comm.hpp"
#include "transport/guard.hpp"

#if ANTDT_HAVE_KOKKOS
#include <Kokkos_Core.hpp>
#endif

namespace antdt {

namespace {

// Seconds MPI_Init may take: ANTDT_STARTUP_TIMEOUT (default 300; 0: no bound).
double startup_timeout_seconds() {
  const char* text = std::getenv("ANTDT_STARTUP_TIMEOUT");
  if (text == nullptr || *text == '\0') return 300.0;
  char* end = nullptr;
  const double s = std::strtod(text, &end);
  if (end == text || *end != '\0' || !(s >= 0.0)) {
    std::fprintf(stderr, "antdt: ignoring ANTDT_STARTUP_TIMEOUT=%s (give seconds, 0 for no bound)\n", text);
    return 300.0;
  }
  return s;
}

// A rank that never reaches MPI_Init (stopped, or its program ended before it) holds every other
// rank's MPI_Init for good, and no Guard exists before MPI does (docs/errors.md, "Start-up").
// This thread bounds the wait: past the timeout it says so and ends this rank (exit 1), which
// makes the launcher end the job. It calls no MPI.
class StartupWatchdog {
 public:
  explicit StartupWatchdog(double seconds) {
    if (seconds <= 0.0) return;
    thread_ = std::thread([this, seconds] {
      std::unique_lock<std::mutex> lock(mutex_);
      if (cv_.wait_for(lock, std::chrono::duration<double>(seconds), [this] { return done_; })) return;
      std::fprintf(stderr,
                   "antdt: error: MPI start-up has not completed in %g s (ANTDT_STARTUP_TIMEOUT): a rank of this job "
                   "has not started (stopped, or its program ended before MPI_Init); ending this rank\n",
                   seconds);
      std::fflush(stderr);
      std::_Exit(1);
    });
  }
  ~StartupWatchdog() {
    if (!thread_.joinable()) return;
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  StartupWatchdog(const StartupWatchdog&) = delete;
  StartupWatchdog& operator=(const StartupWatchdog&) = delete;

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;
};

}  // namespace

Environment::Environment(int& argc, char**& argv) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    int provided = 0;
    const StartupWatchdog watchdog(startup_timeout_seconds());
    // FUNNELED: only the main thread calls MPI; helper threads never do.
    ANTDT_CHECK_MPI(MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided));
    owns_mpi_ = true;
  }
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size_);
  log::set_rank(world_rank_, world_size_);
  // Each rank's first line at debug level: a rank that never printed it died inside MPI_Init (the
  // cluster tests tell Open MPI's start-up failures from antdt's own so).
  if (owns_mpi_) {
    ANTDT_LOG(debug) << "MPI started";
  }
#if ANTDT_HAVE_KOKKOS
  if (!Kokkos::is_initialized()) {
    Kokkos::InitArguments args;
    args.disable_warnings = true;
    Kokkos::initialize(args);
    owns_kokkos_ = true;
  }
#endif
}

Environment::Environment(int& argc, char**& argv, WithoutJobs) : Environment(argc, argv) { builds_jobs_ = false; }

Environment::~Environment() {
#if ANTDT_HAVE_KOKKOS
  if (owns_kokkos_ && Kokkos::is_initialized()) Kokkos::finalize();
#endif
  if (owns_mpi_ && mpi_is_active()) {
    // A program that returns before it built its Job leaves the other ranks waiting at their
    // Job's start-up: tell them, so that they stop now, not after the step timeout, naming this
    // rank as having ended, not its node as stalled (docs/errors.md).
    try {
      if (builds_jobs_) detail::Guard::leave_before_start(MPI_COMM_WORLD);
    } catch (...) {  // never throws
    }
    MPI_Finalize();
    if (detail::a_rank_left()) {
      std::this_thread::sleep_for(std::chrono::duration<double>(detail::kLeaverEndsFirstSeconds));
    }
  }
}

}  // namespace antdt
