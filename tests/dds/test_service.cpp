// The DDS Service over MPI at 1-4 ranks: every index exactly once per epoch, counted by
// gathering every rank's indices to rank 0, with uneven demand, a rank with demand 0, N not
// divisible by anything, and N smaller than ranks x batch.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdint>
#include <string>
#include <vector>

#include "antdt/comm.hpp"
#include "antdt/dds.hpp"
#include "antdt/error.hpp"
#include "dds/service.hpp"

using namespace antdt::dds;

namespace {

struct Case {
  std::int64_t n;
  std::int64_t shard;
  bool shuffle_within;
  std::int64_t epochs;
  int prefetch;
  // demand of rank r at step s
  std::int64_t (*demand)(int rank, int step);
};

// Gathers the indices every rank trained on to rank 0; returns per-index counts there.
std::vector<std::int64_t> gather_counts(const antdt::Communicator& comm, const std::vector<std::int64_t>& mine,
                                        std::int64_t n) {
  const int count = static_cast<int>(mine.size());
  std::vector<int> counts(static_cast<std::size_t>(comm.size())), displs(static_cast<std::size_t>(comm.size()));
  MPI_Gather(&count, 1, MPI_INT, counts.data(), 1, MPI_INT, 0, comm.get());
  std::vector<std::int64_t> all;
  if (comm.is_root()) {
    int total = 0;
    for (std::size_t r = 0; r < counts.size(); ++r) {
      displs[r] = total;
      total += counts[r];
    }
    all.resize(static_cast<std::size_t>(total));
  }
  MPI_Gatherv(mine.data(), count, MPI_INT64_T, all.data(), counts.data(), displs.data(), MPI_INT64_T, 0, comm.get());
  std::vector<std::int64_t> hits;
  if (comm.is_root()) {
    hits.assign(static_cast<std::size_t>(n), 0);
    for (auto i : all) {
      if (i >= 0 && i < n) ++hits[static_cast<std::size_t>(i)];
    }
  }
  return hits;
}

void run_case(const Case& c) {
  auto comm = antdt::Communicator::duplicate(MPI_COMM_WORLD);
  LedgerOptions o;
  o.dataset_size = c.n;
  o.shard_size = c.shard;
  o.seed = 11;
  o.shuffle_within_shard = c.shuffle_within;
  o.max_epochs = c.epochs;
  Service service(comm, o, c.demand(comm.rank(), 0), c.prefetch);
  std::vector<std::int64_t> trained;
  int step = 0;
  while (!service.exhausted()) {
    ASSERT_LT(step, 100000);
    const std::int64_t want = c.demand(comm.rank(), step);
    const auto held = service.held();
    const auto idx = service.next(want);
    // Served from prefetch: a full step whenever the data set is not used up.
    if (held >= want) {
      EXPECT_EQ(static_cast<std::int64_t>(idx.size()), want);
    }
    trained.insert(trained.end(), idx.begin(), idx.end());
    service.end_step(c.demand(comm.rank(), step + 1));
    ++step;
  }
  EXPECT_EQ(service.completed_epochs(), c.epochs);
  EXPECT_EQ(service.held(), 0);
  const auto hits = gather_counts(comm, trained, c.n);
  if (comm.is_root()) {
    for (std::int64_t i = 0; i < c.n; ++i) ASSERT_EQ(hits[static_cast<std::size_t>(i)], c.epochs) << "index " << i;
    ASSERT_NE(service.coordinator(), nullptr);
    ASSERT_EQ(static_cast<std::int64_t>(service.coordinator()->coverage().size()), c.epochs);
    for (const auto& cov : service.coordinator()->coverage()) {
      EXPECT_EQ(cov.missing, 0);
      EXPECT_EQ(cov.duplicated, 0);
    }
  } else {
    EXPECT_EQ(service.coordinator(), nullptr);
  }
}

}  // namespace

TEST(DdsService, EqualDemandEveryIndexOncePerEpoch) {
  run_case({1001, 16, false, 3, 2, [](int, int) -> std::int64_t { return 8; }});
}

TEST(DdsService, UnevenDemandAndAnIdleRank) {
  // Rank 1 has demand 0 (excluded); others differ and change over time.
  run_case({997, 7, true, 2, 2, [](int rank, int step) -> std::int64_t {
              if (rank == 1) return 0;
              return 1 + rank * 3 + step % 4;
            }});
}

TEST(DdsService, DatasetSmallerThanRanksTimesBatch) {
  // N = 5 with a global batch of 6+ per step: steps span several epochs.
  run_case({5, 2, false, 4, 1, [](int rank, int) -> std::int64_t { return 6 + rank; }});
}

TEST(DdsService, ShardSizeOneAndDemandChangingEveryStep) {
  run_case({37, 1, false, 2, 3, [](int rank, int step) -> std::int64_t { return (rank + step) % 5; }});
}

TEST(DdsService, AskingForMoreThanTheDeclaredDemandIsAUsageError) {
  auto comm = antdt::Communicator::duplicate(MPI_COMM_WORLD);
  LedgerOptions o;
  o.dataset_size = 100;
  o.shard_size = 10;
  Service service(comm, o, 4);
  EXPECT_THROW((void)service.next(5), antdt::UsageError);
  EXPECT_EQ(service.next(3).size(), 3U);
  EXPECT_THROW((void)service.next(2), antdt::UsageError) << "3 + 2 exceeds the step's demand of 4";
  service.end_step(4);
  // Control traffic is small and O(1) in the data set size: report + reply with a few grants.
  EXPECT_GT(service.last_control_bytes(), 0U);
  EXPECT_LT(service.last_control_bytes(), 1024U);
}

TEST(DdsService, OneRanksBadDemandFailsTheStepOnEveryRankAndChangesNothing) {
  auto comm = antdt::Communicator::duplicate(MPI_COMM_WORLD);
  const int bad_rank = comm.size() - 1;
  LedgerOptions o;
  o.dataset_size = 50;
  o.shard_size = 5;
  o.max_epochs = 1;
  // Only the last rank passes a bad value; all ranks must throw, none may hang.
  EXPECT_THROW(Service(comm, o, comm.rank() == bad_rank ? -1 : 2), antdt::UsageError);
  Service service(comm, o, 2);
  const auto first = service.next(2);
  EXPECT_THROW(service.end_step(comm.rank() == bad_rank ? -3 : 2), antdt::UsageError);
  service.end_step(2);  // the refused step committed nothing and can be ended again
  std::vector<std::int64_t> trained = first;
  while (!service.exhausted()) {
    const auto idx = service.next(2);
    trained.insert(trained.end(), idx.begin(), idx.end());
    service.end_step(2);
  }
  const auto hits = gather_counts(comm, trained, 50);
  if (comm.is_root()) {
    for (auto h : hits) EXPECT_EQ(h, 1);
  }
}
