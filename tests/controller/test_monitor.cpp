#include <gtest/gtest.h>

#include <vector>

#include "antdt/error.hpp"
#include "antdt/monitor.hpp"

using antdt::Monitor;
using antdt::RankStepStats;

namespace {

RankStepStats timed(std::int64_t samples, double compute, double wait = 0.0, double reduce = 0.0) {
  RankStepStats s;
  s.samples = samples;
  s.compute_seconds = compute;
  s.data_wait_seconds = wait;
  s.reduce_seconds = reduce;
  return s;
}

}  // namespace

TEST(Monitor, MedianThroughputIgnoresOutliersAndIdleSteps) {
  Monitor m(2, 5);
  const std::vector<double> rank0_seconds{0.1, 0.1, 1.0, 0.1, 0.1};  // one 10x slow step
  for (std::int64_t step = 0; step < 5; ++step) {
    const RankStepStats s[2] = {timed(10, rank0_seconds[static_cast<std::size_t>(step)]),
                                step == 3 ? timed(0, 0.0) : timed(20, 0.4)};
    m.record(step, s);
  }
  EXPECT_DOUBLE_EQ(m.throughput(0), 100.0);
  EXPECT_DOUBLE_EQ(m.throughput(1), 50.0);
  EXPECT_EQ(m.summary(1).timed_entries, 4);
  EXPECT_EQ(m.summary(1).entries, 5);
  EXPECT_DOUBLE_EQ(m.last_throughput(0), 100.0);
  EXPECT_DOUBLE_EQ(m.median_throughput(), 75.0);
  EXPECT_DOUBLE_EQ(m.spread(0), 0.0);  // MAD ignores the single outlier
  EXPECT_EQ(m.steps_recorded(), 5);
  EXPECT_EQ(m.last_step(), 4);
}

TEST(Monitor, WindowForgetsOldSteps) {
  Monitor m(1, 3);
  for (std::int64_t step = 0; step < 10; ++step) {
    const RankStepStats s = timed(10, step < 7 ? 1.0 : 0.1);  // 10 -> 100 samples/s at step 7
    m.record(step, std::span(&s, 1));
  }
  EXPECT_DOUBLE_EQ(m.throughput(0), 100.0);
  EXPECT_EQ(m.summary(0).entries, 3);
}

TEST(Monitor, TrendSeesSpeedChanges) {
  Monitor up(1, 8);
  Monitor down(1, 8);
  for (std::int64_t step = 0; step < 8; ++step) {
    const RankStepStats faster = timed(10, step < 4 ? 0.2 : 0.1);
    const RankStepStats slower = timed(10, step < 4 ? 0.1 : 0.2);
    up.record(step, std::span(&faster, 1));
    down.record(step, std::span(&slower, 1));
  }
  EXPECT_GT(up.trend(0), 0.3);
  EXPECT_LT(down.trend(0), -0.3);
}

TEST(Monitor, StepTimeIsSlowestComputePlusPureReduce) {
  Monitor m(3, 4);
  const RankStepStats s[3] = {timed(10, 1.0, 0.5, 0.2), timed(10, 0.5, 0.0, 1.2), timed(10, 0.3, 0.0, 1.4)};
  m.record(0, s);
  // max(wait + compute) = 1.5; min reduce (the slowest rank's) = 0.2.
  EXPECT_DOUBLE_EQ(m.last_step_seconds(), 1.7);
  EXPECT_DOUBLE_EQ(m.step_seconds(), 1.7);
  EXPECT_NEAR(m.idle_fraction(), 1.0 - ((1.5 + 0.5 + 0.3) / 3.0) / 1.5, 1e-12);
  EXPECT_DOUBLE_EQ(m.data_wait_seconds(0), 0.5);
  EXPECT_DOUBLE_EQ(m.reduce_seconds(2), 1.4);
}

TEST(Monitor, RejectsBadInput) {
  EXPECT_THROW(Monitor(0, 5), antdt::UsageError);
  EXPECT_THROW(Monitor(2, 0), antdt::UsageError);
  Monitor m(2, 5);
  const RankStepStats one[1] = {timed(1, 1.0)};
  EXPECT_THROW(m.record(0, one), antdt::UsageError);
  const RankStepStats two[2] = {timed(1, 1.0), timed(1, 1.0)};
  m.record(5, two);
  EXPECT_THROW(m.record(5, two), antdt::UsageError);
  EXPECT_THROW((void)m.summary(2), antdt::UsageError);
}

TEST(Monitor, SerializeRoundTrip) {
  Monitor m(3, 6);
  for (std::int64_t step = 10; step < 19; ++step) {
    const auto d = static_cast<double>(step);
    const RankStepStats s[3] = {timed(step, 0.01 * d, 0.001 * d, 0.2), timed(5, 0.5, 0.0, 0.1), timed(0, 0.0)};
    m.record(step, s);
  }
  const auto bytes = m.serialize();
  const Monitor r = Monitor::restore(bytes);
  EXPECT_EQ(r.world_size(), 3);
  EXPECT_EQ(r.window(), 6);
  EXPECT_EQ(r.last_step(), 18);
  EXPECT_EQ(r.steps_recorded(), 9);
  EXPECT_EQ(r.serialize(), bytes);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(r.throughput(i), m.throughput(i));
    EXPECT_EQ(r.spread(i), m.spread(i));
    EXPECT_EQ(r.data_wait_seconds(i), m.data_wait_seconds(i));
  }
  EXPECT_EQ(r.step_seconds(), m.step_seconds());

  auto truncated = bytes;
  truncated.resize(bytes.size() / 2);
  EXPECT_THROW((void)Monitor::restore(truncated), antdt::CheckpointError);
  auto bad = bytes;
  bad[0] = std::byte{0};
  EXPECT_THROW((void)Monitor::restore(bad), antdt::CheckpointError);
}
