// Rank 0's run totals (src/session/run_recorder.hpp): the efficiency's ideal and the cost
// model's per-step error, as the end-of-run summary reports them (docs/controller.md,
// "Efficiency").
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "antdt/plan.hpp"
#include "core/plan_rules.hpp"
#include "core/step_record.hpp"
#include "session/run_recorder.hpp"

namespace {

antdt::StepRecord record(std::int64_t step, const std::vector<std::int64_t>& b, const std::vector<double>& t,
                         double reduce) {
  antdt::StepRecord rec;
  rec.step = step;
  double slowest = 0.0;
  for (std::size_t i = 0; i < b.size(); ++i) {
    antdt::RankStepStats s;
    s.samples = b[i];
    s.compute_seconds = t[i];
    slowest = std::max(slowest, t[i]);
    rec.ranks.push_back(s);
  }
  // The faster ranks wait in the reduction for the slowest.
  for (auto& s : rec.ranks) s.reduce_seconds = reduce + (slowest - s.compute_seconds);
  rec.wall_seconds = slowest + reduce;  // the step cannot end before its slowest compute
  rec.batch = b;
  return rec;
}

}  // namespace

// Speeds that change from step to step (noise, a rank that slows down for a while, a rank
// whose speed depends on its batch): however they move, the ideal time of the steps is made
// of the same compute times as their wall time, so it never exceeds it, and a step whose
// ranks finish together is ideal.
TEST(RunTotals, TheIdealNeverExceedsTheWallTimeOfTheSteps) {
  antdt::detail::RunRecorder recorder;
  const antdt::Plan plan = antdt::equal_plan(300, {300, 300, 300}, 0);
  double wall = 0.0;
  for (std::int64_t k = 0; k < 300; ++k) {
    const double noise = 1.0 + 0.3 * std::sin(0.7 * static_cast<double>(k));
    const double slow = k >= 100 && k < 140 ? 3.0 : 1.0;
    const std::vector<std::int64_t> b{100 + k % 7, 100, 100 - k % 7};
    const std::vector<double> t{static_cast<double>(b[0]) * 1e-3 * noise, static_cast<double>(b[1]) * 2e-3 * slow,
                                0.004 + static_cast<double>(b[2]) * 1e-3};
    const auto rec = record(k, b, t, 1e-4);
    wall += rec.wall_seconds;
    recorder.record(rec, plan);
    ASSERT_LE(recorder.totals().ideal_seconds, wall * (1.0 + 1e-12)) << "step " << k;
  }
  antdt::detail::RunRecorder balanced;
  balanced.record(record(0, {200, 100}, {0.2, 0.2}, 0.0), plan);
  EXPECT_NEAR(balanced.totals().ideal_seconds, 0.2, 1e-12) << "ranks that finish together are the ideal";
  balanced.clear();
  EXPECT_EQ(balanced.totals().ideal_seconds, 0.0);
}

// The cost model's error per step: |predicted - measured| / measured, measured as the Monitor
// does (slowest data wait + compute, plus the least reduce); the summary reports its median.
TEST(RunTotals, ModelErrorIsTheMedianRelativeErrorPerStep) {
  antdt::detail::RunRecorder recorder;
  const antdt::Plan plan = antdt::equal_plan(200, {200, 200}, 0);
  for (std::int64_t k = 0; k < 9; ++k) {
    auto rec = record(k, {100, 100}, {0.1, 0.08}, 0.01);
    const double measured = 0.1 + 0.01;
    rec.predicted_seconds = measured * (1.0 + (k < 5 ? 0.04 : 0.5));  // five steps 4 % off, four 50 %
    recorder.record(rec, plan);
  }
  auto none = record(9, {100, 100}, {0.1, 0.08}, 0.01);  // no prediction: not counted
  recorder.record(none, plan);
  const auto t = recorder.totals();
  EXPECT_EQ(t.model_error_steps, 9);
  EXPECT_NEAR(t.model_error_median, 0.04, 0.04 * 1e-3);
}
