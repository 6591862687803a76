// antdt::Job's own contract, over MPI (the examples' end-to-end tests are in tests/examples).
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdint>
#include <vector>

#include "antdt/error.hpp"
#include "antdt/job.hpp"

using namespace antdt;

namespace {

JobOptions small_run() {
  JobOptions o;
  o.session.dataset_size = 64;
  o.session.global_batch = 8;
  o.session.max_steps = 3;
  o.output.quiet = true;
  o.output.progress = "never";
  return o;
}

}  // namespace

// A resume restores state as the first next_step() begins: state registered later would be
// in every checkpoint and never read back, so registering it then is an error.
TEST(Job, StateRegisteredAfterTheFirstStepIsRefused) {
  Job job(small_run());
  std::vector<float> w(4, 0.0f);
  job.add_state("model/w", w);
  std::vector<std::int64_t> late(2, 0);
  std::int64_t steps = 0;
  while (job.next_step()) {
    if (steps++ == 0) {
      EXPECT_THROW(job.add_state("late", late), UsageError);
      EXPECT_THROW(job.add_state(
                       "late", [] { return std::vector<std::byte>{}; }, [](std::span<const std::byte>) {}),
                   UsageError);
    }
    for (auto batch = job.next_micro_batch(); !batch.empty(); batch = job.next_micro_batch()) {
    }
    std::vector<float> g(w.size(), 0.0f);
    EXPECT_EQ(job.reduce(g), 8);
  }
  EXPECT_EQ(steps, 3);
  EXPECT_EQ(job.exit_code(), 0);
}
