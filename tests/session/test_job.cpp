// antdt::Job's own contract, over MPI (the examples' end-to-end tests are in tests/examples).
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdint>
#include <string>
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

// Issue 44, item 5: a collective the ranks call differently ended the job in MPI
// (MPI_ERR_TRUNCATE, exit 15, no word of which call), or passed unseen (a broadcast whose ranks
// named different roots). Now every rank throws the same UsageError naming the call and what
// each rank passed, before anything is sent, and the job goes on when the program recovers.
TEST(Job, MismatchedCollectivesAreOneUsageErrorNamingTheRanks) {
  Job job(small_run());
  if (job.size() < 2) GTEST_SKIP() << "needs 2 ranks or more";
  const bool last = job.rank() == job.size() - 1;
  const auto message_of = [](const auto& call) -> std::string {
    try {
      call();
    } catch (const UsageError& e) {
      return e.what();
    }
    return "no error";
  };
  const auto expect_parts = [](const std::string& message, std::initializer_list<const char*> parts) {
    for (const char* part : parts) EXPECT_NE(message.find(part), std::string::npos) << part << " in: " << message;
  };
  const std::string tail = "rank " + std::to_string(job.size() - 1) + ": ";

  std::vector<std::byte> bytes(last ? 50 : 100);
  expect_parts(
      message_of([&] { job.broadcast(bytes, 0); }),
      {"Job::broadcast: the ranks disagree", "100 bytes from root 0", (tail + "50 bytes from root 0").c_str()});
  std::vector<std::byte> eight(8);
  expect_parts(message_of([&] { job.broadcast(eight, last ? 1 : 0); }),
               {"Job::broadcast", "8 bytes from root 0", (tail + "8 bytes from root 1").c_str(), "same size and root"});
  job.broadcast(eight, 0);  // the same call on every rank still works

  std::int64_t steps = 0;
  while (job.next_step()) {
    for (auto batch = job.next_micro_batch(); !batch.empty(); batch = job.next_micro_batch()) {
    }
    if (steps++ == 0) {
      std::vector<float> g(last ? 101 : 100, 0.0f);
      expect_parts(message_of([&] { job.reduce(g); }),
                   {"Job::reduce: the ranks disagree", ": 100 float32", (tail + "101 float32").c_str()});
      std::vector<float> f(100, 0.0f);
      std::vector<std::int64_t> i(100, 0);
      expect_parts(message_of([&] { last ? job.reduce(i) : job.reduce(f); }),
                   {"Job::reduce", ": 100 float32", (tail + "100 int64").c_str(), "same size and type"});
    }
    std::vector<float> g(100, 1.0f);
    EXPECT_EQ(job.reduce(g), 8);
  }
  EXPECT_EQ(steps, 3);
  EXPECT_EQ(job.exit_code(), 0);
}
