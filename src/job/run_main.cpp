// antdt::run_main: one line and one exit code for a job's failure (docs/errors.md).
#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

#include "antdt/error.hpp"
#include "antdt/job.hpp"
#include "job/restart_records.hpp"

namespace antdt {

namespace {

// A message as one line: a library's multi-line text (HDF5's, MPI's) never splits it.
std::string one_line(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '\r') continue;
    out += c == '\n' ? std::string("; ") : std::string(1, c);
  }
  while (!out.empty() && (out.back() == ' ' || out.back() == ';')) out.pop_back();
  return out;
}

}  // namespace

int run_main(const char* program, const std::function<int()>& body) {
  int initialized = 0, finalized = 0, rank = 0, world = 1;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  const bool mpi = initialized != 0 && finalized == 0;
  if (mpi) {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
  }
  std::string what;
  int code = kExitRuntime;
  bool shared = false, heard = false, stall = false;
  try {
    return body();
  } catch (const Error& e) {
    code = exit_code_for(e);
    what = e.what();
    shared = e.shared();
    heard = e.heard();
    if (const auto* st = dynamic_cast<const StallError*>(&e)) {
      stall = true;
      // Exit 5: rank 0's first-hand stall names the stalled ranks' nodes; the exclude file
      // makes the sbatch script's resubmission leave them out.
      detail::record_stalled_nodes(detail::stall_record_dir(), *st);
    }
  } catch (const std::exception& e) {
    code = exit_code_for(e);
    what = e.what();
  }
  if (!heard) {
    if (rank == 0 || world == 1) {
      std::fprintf(stderr, "%s: error: %s\n", program, one_line(what).c_str());
    } else {
      std::fprintf(stderr, "%s: error (rank %d): %s\n", program, rank, one_line(what).c_str());
    }
    std::fflush(stderr);
  }
  if (mpi && world > 1 && (stall || !shared)) {
    // A stalled rank never reaches MPI_Finalize, and a failure the other ranks did not see
    // leaves them waiting: the job ends here. A rank that only heard of a stall gives the rank
    // that names it a moment to print its line first.
    if (stall && heard) std::this_thread::sleep_for(std::chrono::seconds(2));
    MPI_Abort(MPI_COMM_WORLD, code);
  }
  return code;
}

}  // namespace antdt
