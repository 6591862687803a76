// Stalls in a Session, one scenario per process (tests/session/check_stalls.py runs them): a
// stall leaves a collective that cannot complete, after which a process must end, so each
// scenario ends its process. Every rank writes what happened to DIR/result.RANK, then waits a
// few seconds (so that a late rank that comes back can write its own) and aborts the job.
//
//   mpirun -np P test_stalls SCENARIO DIR
//   SCENARIO late:     the last rank sleeps 2.5 s before step 2's reduction (step timeout 1 s)
//            inner:    rank 1 does (in a broadcast tree it would be an inner rank)
//            mismatch: at step 2 the last rank calls end_step without reducing: the ranks made
//                      different calls, a usage error every rank throws (not a stall)
#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "antdt/error.hpp"
#include "session/session.hpp"

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  if (argc != 3) {
    if (rank == 0) std::fprintf(stderr, "usage: test_stalls late|inner|mismatch DIR\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  const std::string scenario = argv[1];
  const int stalled = scenario == "inner" ? 1 : world - 1;
  antdt::SessionOptions o;
  o.dataset_size = 4000;
  o.global_batch = 64;
  o.max_steps = 10;
  o.controller.policy = "dd";
  o.emulation.virtual_seconds_per_sample = 1e-4;
  o.step_timeout_seconds = 1.0;
  const auto t0 = std::chrono::steady_clock::now();
  const auto since = [](std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
  };
  const bool mismatch = scenario == "mismatch";
  std::int64_t step = -1;
  bool first_hand = false, usage = false;
  std::string what = "no stall";
  double run = 0.0, reduce = 0.0;
  {
    antdt::Session s(MPI_COMM_WORLD, o);
    std::vector<float> g(3, 1.0f);
    try {
      while (!s.finished()) {
        const antdt::StepWork w = s.begin_step();
        const bool odd_one = s.step() == 2 && s.rank() == stalled;
        if (odd_one && !mismatch) std::this_thread::sleep_for(std::chrono::milliseconds(2500));
        const auto t_reduce = std::chrono::steady_clock::now();
        try {
          if (!(odd_one && mismatch)) (void)s.reduce(g, static_cast<std::int64_t>(w.samples.size()));
        } catch (const antdt::Error&) {
          reduce = since(t_reduce);
          throw;
        }
        s.end_step();
      }
    } catch (const antdt::StallError& e) {
      step = s.step();
      first_hand = e.first_hand();
      what = e.what();
    } catch (const antdt::UsageError& e) {
      step = s.step();
      first_hand = !e.heard();
      usage = true;
      what = e.what();
    }
    run = since(t0);
  }
  const std::string path = std::string(argv[2]) + "/result." + std::to_string(rank);
  if (std::FILE* f = std::fopen(path.c_str(), "w")) {
    std::fprintf(f, "step=%lld\nfirst_hand=%d\nusage=%d\nrun=%.3f\nreduce=%.3f\nstalled=%d\nwhat=%s\n",
                 static_cast<long long>(step), first_hand ? 1 : 0, usage ? 1 : 0, run, reduce, rank == stalled ? 1 : 0,
                 what.c_str());
    std::fclose(f);
  }
  std::this_thread::sleep_for(std::chrono::seconds(4));
  MPI_Abort(MPI_COMM_WORLD, 0);
}
