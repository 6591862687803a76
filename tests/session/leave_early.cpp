// A rank whose program leaves before the run is over (tests/session/check_leave.py runs it):
//
//   mpirun -np P leave_early SCENARIO RANK CODE CHECKPOINT_DIR
//   SCENARIO in-run:      RANK returns CODE from its training loop at step 3 (its Job is destroyed)
//            before-job:  RANK returns CODE before it builds its Job
//
// Every other rank trains to the end (it cannot: it must stop at once, told that RANK left, with
// no node blamed). The step timeout is 60 s, so a stop within it is not a stall's.
#include <mpi.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "antdt/job.hpp"
#include "antdt/runtime.hpp"

int main(int argc, char** argv) {
  antdt::Environment env(argc, argv);
  if (argc != 5) return 2;
  const std::string scenario = argv[1];
  const int leaver = std::atoi(argv[2]);
  const int code = std::atoi(argv[3]);
  antdt::JobOptions opt;
  opt.program = "leave-early";
  opt.session.dataset_size = 1000;
  opt.session.global_batch = 10;
  opt.session.max_steps = 400;
  opt.session.step_timeout_seconds = 60.0;
  opt.session.emulation.virtual_seconds_per_sample = 1e-3;
  opt.checkpoint.dir = argv[4];
  opt.output.quiet = true;
  return antdt::run_main("leave-early", [&] {
    if (scenario == "before-job" && env.world_rank() == leaver) return code;
    antdt::Job job(opt);
    std::vector<float> grad(2);
    while (job.next_step()) {
      for (auto batch = job.next_micro_batch(); !batch.empty(); batch = job.next_micro_batch()) {
      }
      if (scenario == "in-run" && job.rank() == leaver && job.step() == 3) return code;
      job.reduce(grad);
    }
    return job.exit_code();
  });
}
