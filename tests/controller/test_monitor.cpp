#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "antdt/error.hpp"
#include "core/step_record.hpp"
#include "monitor/monitor.hpp"

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

namespace {

// Deterministic noise in [-amplitude, amplitude].
double wobble(std::int64_t step, int rank, double amplitude) {
  return amplitude * std::sin(1.7 * static_cast<double>(step) + 3.1 * static_cast<double>(rank));
}

double naive_median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const std::size_t m = v.size() / 2;
  return v.size() % 2 == 1 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

}  // namespace

// The incremental windows must give what a recomputation over the last `window` steps gives,
// bit for bit: repeated values, untimed steps (no samples) and a window that is not full.
TEST(Monitor, IncrementalMediansEqualARecomputation) {
  constexpr int kWorld = 3, kWindow = 7;
  Monitor m(kWorld, kWindow);
  std::vector<std::vector<RankStepStats>> history;
  for (std::int64_t step = 0; step < 120; ++step) {
    std::vector<RankStepStats> stats(kWorld);
    for (int r = 0; r < kWorld; ++r) {
      const bool idle = (step + r) % 11 == 0;
      const double repeat = step % 5 < 2 ? 0.0 : wobble(step, r, 0.2);  // runs of repeated values
      stats[static_cast<std::size_t>(r)] =
          idle ? timed(0, 0.0, 0.001 * r) : timed(10 + r, 0.1 * (1.0 + repeat), 0.01 * std::abs(wobble(step, r, 1.0)));
    }
    m.record(step, stats);
    history.push_back(stats);
    std::vector<double> all_x;
    for (int r = 0; r < kWorld; ++r) {
      std::vector<double> x, w;
      for (std::size_t k = history.size() > kWindow ? history.size() - kWindow : 0; k < history.size(); ++k) {
        const RankStepStats& s = history[k][static_cast<std::size_t>(r)];
        if (s.samples > 0 && s.compute_seconds > 0.0) x.push_back(static_cast<double>(s.samples) / s.compute_seconds);
        w.push_back(s.data_wait_seconds);
      }
      ASSERT_EQ(m.throughput(r), naive_median(x)) << "step " << step << " rank " << r;
      ASSERT_EQ(m.data_wait_seconds(r), naive_median(w)) << "step " << step << " rank " << r;
      ASSERT_EQ(m.has_throughput(r), !x.empty());
      ASSERT_EQ(m.summary(r).throughput, m.throughput(r));
      if (!x.empty()) all_x.push_back(naive_median(x));
    }
    ASSERT_EQ(m.median_throughput(), naive_median(all_x)) << "step " << step;
  }
}

// Rank 0 takes 20 ms + b / 1000 samples/s (fixed per-step costs, 3 % noise); rank 1 is plainly
// proportional (b / 500). Twenty steps at b = 100, then b = 160: the fits after ten and after
// fifteen steps at 160 agree, and rank 0's model has its fixed part, rank 1's none.
TEST(Monitor, FitsEachRanksComputeModelFromTwoBatchLevels) {
  Monitor m(2, 20);
  for (std::int64_t step = 0; step < 35; ++step) {
    const std::int64_t b = step < 20 ? 100 : 160;
    const RankStepStats s[2] = {timed(b, (0.02 + static_cast<double>(b) / 1000.0) * (1.0 + wobble(step, 0, 0.03))),
                                timed(b, static_cast<double>(b) / 500.0)};
    m.record(step, s);
    if (step < 29) {
      EXPECT_EQ(m.compute_model(0).fits, 0) << "a fit needs half a window at the new batch, step " << step;
    }
    if (step >= 29 && step < 34) {
      EXPECT_EQ(m.compute_model(0).fits, 1);
      EXPECT_EQ(m.compute_model(0).intercept_samples, 0.0) << "one fit alone does not move the model";
    }
  }
  const auto fixed = m.compute_model(0);
  EXPECT_EQ(fixed.fits, 2);
  EXPECT_NEAR(fixed.fixed_seconds, 0.02, 0.008);
  EXPECT_NEAR(fixed.throughput, 1000.0, 100.0);
  EXPECT_NEAR(fixed.seconds(130), 0.02 + 0.130, 0.005) << "it predicts a batch it never ran";
  EXPECT_GT(fixed.intercept_samples, 0.0);
  const auto plain = m.compute_model(1);
  EXPECT_EQ(plain.fits, 2);
  EXPECT_EQ(plain.intercept_samples, 0.0) << "an exactly proportional rank has no fixed part";
  EXPECT_EQ(plain.throughput, m.throughput(1));
  EXPECT_DOUBLE_EQ(plain.seconds(250), 0.5);
  // The model survives a checkpoint, and steps after it continue the same.
  const Monitor back = Monitor::restore(m.serialize());
  EXPECT_EQ(back.compute_model(0).intercept_samples, fixed.intercept_samples);
  EXPECT_EQ(back.compute_model(0).throughput, fixed.throughput);
  EXPECT_EQ(back.serialize(), m.serialize());
}

// Cost per sample that grows with the batch (caches) is a negative intercept, bounded so that
// the model stays positive where the rank ran. A time that does not grow with the batch at
// all is no slope the model can use: no fit (the dd policy's check after a change copes).
TEST(Monitor, ComputeModelsOfConvexAndFlatRanks) {
  Monitor m(2, 20);
  for (std::int64_t step = 0; step < 40; ++step) {  // the window holds only b = 300 at the end
    const double b = step < 20 ? 200.0 : 300.0;
    const RankStepStats s[2] = {timed(static_cast<std::int64_t>(b), b / 1000.0 * (1.0 + b / 1000.0)),
                                timed(static_cast<std::int64_t>(b), 0.25)};
    m.record(step, s);
  }
  const auto convex = m.compute_model(0);
  EXPECT_EQ(convex.fits, 2);
  EXPECT_LT(convex.fixed_seconds, 0.0);
  EXPECT_NEAR(convex.seconds(300), 0.39, 1e-9);
  EXPECT_NEAR(convex.seconds(200), 0.24, 1e-9);
  EXPECT_GT(convex.seconds(100), 0.0);
  EXPECT_EQ(m.compute_model(1).fits, 0);
  EXPECT_EQ(m.compute_model(1).intercept_samples, 0.0);
}

// A rank whose batch falls below the samples its negative intercept takes away (a convex rank
// given a small share) has no positive model throughput in its window: it is then timed at its
// plain median speed, never at 0 (the planner refuses a rank at 0 samples/s, which stopped a dd
// run of 2 ranks on a loaded machine).
TEST(Monitor, ARankBelowItsNegativeInterceptKeepsAPositiveSpeed) {
  Monitor m(1, 20);
  std::int64_t step = 0;
  for (; step < 40; ++step) {
    const double b = step < 20 ? 200.0 : 300.0;
    const RankStepStats s = timed(static_cast<std::int64_t>(b), b / 1000.0 * (1.0 + b / 1000.0));
    m.record(step, std::span(&s, 1));
  }
  ASSERT_LT(m.compute_model(0).intercept_samples, -30.0);
  for (int i = 0; i < 40; ++i, ++step) {  // scattered times at 20 samples: no new fit
    const RankStepStats s = timed(20, i % 2 == 0 ? 0.02 : 0.06);
    m.record(step, std::span(&s, 1));
    const auto model = m.compute_model(0);
    ASSERT_GT(model.throughput, 0.0) << "step " << step;
    ASSERT_TRUE(std::isfinite(model.seconds(20))) << "step " << step;
  }
  EXPECT_GT(m.compute_model(0).seconds(20), 0.0) << "a window of 20-sample steps alone times them";
  EXPECT_EQ(m.compute_model(0).throughput, m.throughput(0));
}

// A transient inside a batch level scatters its times: no fit is made from it.
TEST(Monitor, NoFitFromALevelWithATransient) {
  Monitor m(1, 20);
  for (std::int64_t step = 0; step < 30; ++step) {
    const std::int64_t b = step < 20 ? 100 : 150;
    const double slow = step >= 22 && step < 27 ? 3.0 : 1.0;
    const RankStepStats s = timed(b, static_cast<double>(b) / 1000.0 * slow + 0.01);
    m.record(step, std::span(&s, 1));
  }
  EXPECT_EQ(m.compute_model(0).fits, 0);
  EXPECT_EQ(m.compute_model(0).intercept_samples, 0.0);
}

// A checkpoint of an older format (1: before the compute models; 2: before the one field list)
// is refused with an error that says so, not misread.
TEST(Monitor, RefusesAnOlderFormatWithAClearError) {
  Monitor m(2, 4);
  for (std::int64_t step = 0; step < 6; ++step) {
    const RankStepStats s[2] = {timed(10, 0.1), timed(20, 0.5, 0.01)};
    m.record(step, s);
  }
  EXPECT_EQ(Monitor::restore(m.serialize()).serialize(), m.serialize());
  for (const std::uint32_t older : {1u, 2u}) {
    auto bytes = m.serialize();
    std::memcpy(bytes.data() + 4, &older, sizeof older);
    try {
      (void)Monitor::restore(bytes);
      ADD_FAILURE() << "format " << older << " was read";
    } catch (const antdt::CheckpointError& e) {
      EXPECT_NE(std::string(e.what()).find("format " + std::to_string(older) + ", but this build reads format 3"),
                std::string::npos)
          << e.what();
      EXPECT_NE(std::string(e.what()).find("older antdt"), std::string::npos) << e.what();
    }
  }
}
