// The DDS over MPI on the production path (Session: Agent + control channel + StepCoordinator)
// at 1-4 ranks: every index exactly once per epoch, counted by gathering every rank's indices
// to rank 0, with splits that change every step, a rank with no share, N not divisible by
// anything, N smaller than one step; and the control traffic each rank receives per step.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

#include "antdt/error.hpp"
#include "controller/controller.hpp"
#include "controller/planner.hpp"
#include "session/session.hpp"
#include "transport/control_channel.hpp"

using namespace antdt;

namespace {

int world_size() {
  int s = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &s);
  return s;
}

// A policy that re-splits the global batch at every step by weights 1 + (rank + step) % 4, so
// every rank's demand changes from step to step.
class ShiftingSplit final : public PolicyPlugin {
 public:
  [[nodiscard]] std::string name() const override { return "test-shifting"; }
  [[nodiscard]] std::optional<Plan> decide(const ControllerContext& ctx) override {
    std::vector<double> w(static_cast<std::size_t>(ctx.options.world_size));
    for (std::size_t i = 0; i < w.size(); ++i) w[i] = 1.0 + static_cast<double>((i + ctx.step) % 4);
    return plan_split(ctx.options.global_batch, w, ctx.options.caps, ctx.effective_step());
  }
};

struct Case {
  std::int64_t n, shard, global_batch, epochs;
  bool shuffle_within;
  std::string policy;
};

// How often each index was trained on, over all ranks, on rank 0.
std::vector<std::int64_t> gather_counts(const std::vector<std::int64_t>& mine, std::int64_t n) {
  int count = static_cast<int>(mine.size());
  const int p = world_size();
  std::vector<int> counts(static_cast<std::size_t>(p)), displs(static_cast<std::size_t>(p));
  MPI_Gather(&count, 1, MPI_INT, counts.data(), 1, MPI_INT, 0, MPI_COMM_WORLD);
  std::partial_sum(counts.begin(), counts.end() - 1, displs.begin() + 1);
  std::vector<std::int64_t> all(static_cast<std::size_t>(displs.back() + counts.back()));
  MPI_Gatherv(mine.data(), count, MPI_INT64_T, all.data(), counts.data(), displs.data(), MPI_INT64_T, 0,
              MPI_COMM_WORLD);
  std::vector<std::int64_t> hits(static_cast<std::size_t>(n), 0);
  for (auto i : all) {
    if (i >= 0 && i < n) ++hits[static_cast<std::size_t>(i)];
  }
  return hits;
}

void run_case(const Case& c) {
  register_policy("test-shifting", [] { return std::make_unique<ShiftingSplit>(); });
  SessionOptions o;
  o.dataset_size = c.n;
  o.shard_size = c.shard;
  o.global_batch = c.global_batch;
  o.max_epochs = c.epochs;
  o.shuffle_within_shard = c.shuffle_within;
  o.seed = 11;
  o.controller.policy = c.policy;
  o.controller.warmup_steps = 0;
  Session s(MPI_COMM_WORLD, o);
  std::vector<std::int64_t> trained;
  std::int64_t steps = 0, changes = 0;
  while (!s.finished()) {
    ASSERT_LT(steps, 100000);
    const StepWork w = s.begin_step();
    trained.insert(trained.end(), w.samples.begin(), w.samples.end());
    const std::int64_t held_before = static_cast<std::int64_t>(w.samples.size());
    EXPECT_LE(held_before, s.plan().batch[static_cast<std::size_t>(s.rank())]);
    const StepSummary sum = s.end_step();
    ++steps;
    changes += sum.plan_changed ? 1 : 0;
    if (!sum.plan_changed) {
      // A rank's reply is its slot: the step's totals and its own grants, whatever the world size.
      EXPECT_EQ(s.control_bytes_received(), detail::ControlChannel::kSlotBytes) << "step " << steps - 1;
    }
  }
  if (c.policy == "test-shifting" && world_size() > 1) {
    // A plan reaches the ranks a step after it is decided (the reply lag) and one waits at a
    // time, so the split can move every other step.
    EXPECT_GE(changes, steps / 2) << "the split moved every other step";
  }
  EXPECT_EQ(s.samples_committed(), c.epochs * c.n);
  const auto hits = gather_counts(trained, c.n);
  if (s.rank() != 0) return;
  for (std::int64_t i = 0; i < c.n; ++i) ASSERT_EQ(hits[static_cast<std::size_t>(i)], c.epochs) << "index " << i;
  const auto cov = s.coverage();
  ASSERT_EQ(static_cast<std::int64_t>(cov.size()), c.epochs);
  for (const auto& e : cov) {
    EXPECT_EQ(e.missing, 0) << "epoch " << e.epoch;
    EXPECT_EQ(e.duplicated, 0) << "epoch " << e.epoch;
  }
}

}  // namespace

TEST(DdsSession, EqualSharesEveryIndexOncePerEpoch) { run_case({1001, 16, 8L * world_size(), 3, false, "static"}); }

TEST(DdsSession, SplitChangingEveryStep) { run_case({997, 7, 12L * world_size(), 2, true, "test-shifting"}); }

TEST(DdsSession, DatasetSmallerThanOneStep) {
  // N = 5 with a global batch of 6 or more: every step spans several epochs.
  run_case({5, 2, 6L + world_size(), 4, false, "static"});
}

TEST(DdsSession, ShardSizeOne) { run_case({37, 1, 3L * world_size(), 2, false, "test-shifting"}); }

TEST(DdsSession, ARankWithoutAShare) {
  // B < world: the equal split leaves the last rank without samples; it still takes part.
  if (world_size() < 2) GTEST_SKIP() << "needs two ranks for one to have no share";
  run_case({101, 5, world_size() - 1L, 2, false, "static"});
}
