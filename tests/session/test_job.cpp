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

// Job::broadcast: the root's bytes on every rank, from any root; a root outside the job is a
// UsageError on every rank (no rank enters the collective).
TEST(Job, BroadcastCarriesTheRootsBytesToEveryRank) {
  Job job(small_run());
  for (int root = 0; root < job.size(); ++root) {
    std::vector<std::byte> bytes(1000);
    for (std::size_t i = 0; i < bytes.size(); ++i)
      bytes[i] = static_cast<std::byte>(job.rank() == root ? (i * 7 + static_cast<std::size_t>(root)) % 251 : 0);
    job.broadcast(bytes, root);
    for (std::size_t i = 0; i < bytes.size(); ++i)
      ASSERT_EQ(bytes[i], static_cast<std::byte>((i * 7 + static_cast<std::size_t>(root)) % 251)) << "byte " << i;
  }
  std::vector<std::byte> one(1);
  EXPECT_THROW(job.broadcast(one, job.size()), UsageError);
  EXPECT_THROW(job.broadcast(one, -1), UsageError);
  while (job.next_step()) {
    for (auto batch = job.next_micro_batch(); !batch.empty(); batch = job.next_micro_batch()) {
    }
    std::vector<float> g(1, 0.0f);
    job.reduce(g);
  }
  EXPECT_EQ(job.exit_code(), 0);
}
