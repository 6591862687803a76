#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>
#include <vector>

#include "antdt/error.hpp"
#include "controller/planner.hpp"
#include "core/plan_rules.hpp"
#include "core/step_record.hpp"

using antdt::CostModel;
using antdt::CostModelParams;
using antdt::Plan;

namespace {

std::int64_t sum(const std::vector<std::int64_t>& v) { return std::accumulate(v.begin(), v.end(), std::int64_t{0}); }

double predicted_max(const std::vector<std::int64_t>& b, const std::vector<double>& x, const std::vector<double>& a) {
  double m = 0.0;
  for (std::size_t i = 0; i < b.size(); ++i)
    m = std::max(m, CostModel::rank_compute_seconds(b[i], x[i], a.empty() ? 0.0 : a[i]));
  return m;
}

// The best max over every split of B into n parts >= 1 (small cases only).
double brute_force_best(std::int64_t B, const std::vector<double>& x, const std::vector<double>& a) {
  const std::size_t n = x.size();
  std::vector<std::int64_t> b(n, 1);
  double best = std::numeric_limits<double>::infinity();
  std::function<void(std::size_t, std::int64_t)> rec = [&](std::size_t i, std::int64_t left) {
    if (i + 1 == n) {
      b[i] = left;
      best = std::min(best, predicted_max(b, x, a));
      return;
    }
    for (std::int64_t v = 1; v <= left - static_cast<std::int64_t>(n - i - 1); ++v) {
      b[i] = v;
      rec(i + 1, left - v);
    }
  };
  rec(0, B);
  return best;
}

}  // namespace

TEST(CostModel, AllreduceIsAlphaPlusRingBandwidthTerm) {
  const CostModel cost(CostModelParams{1e-3, 1e-9, 1'000'000});
  EXPECT_DOUBLE_EQ(cost.allreduce_seconds(1), 0.0);
  EXPECT_DOUBLE_EQ(cost.allreduce_seconds(2), 1e-3 + 1.0 * 1e6 * 1e-9);
  EXPECT_DOUBLE_EQ(cost.allreduce_seconds(4), 1e-3 + 1.5 * 1e6 * 1e-9);
  EXPECT_DOUBLE_EQ(CostModel().allreduce_seconds(8), 20e-6);  // defaults: latency only
}

TEST(CostModel, StepTimeIsSlowestRankPlusAllreduce) {
  const CostModel cost(CostModelParams{1e-3, 0.0, 0});
  Plan p = antdt::equal_plan(40, {64, 64});
  p.batch = {10, 30};
  antdt::update_accumulation(p);
  const std::vector<double> x{10.0, 10.0};
  const std::vector<double> a{2.5, 0.0};
  EXPECT_DOUBLE_EQ(cost.predict_step_seconds(p, x), 3.0 + 1e-3);
  EXPECT_DOUBLE_EQ(cost.predict_step_seconds(p, x, a), 3.5 + 1e-3);
  const auto per_rank = cost.predict_rank_seconds(p, x, a);
  EXPECT_DOUBLE_EQ(per_rank[0], 3.5);
  EXPECT_DOUBLE_EQ(per_rank[1], 3.0);
  EXPECT_THROW((void)cost.predict_step_seconds(p, std::vector<double>{1.0}), antdt::UsageError);
  EXPECT_TRUE(std::isinf(CostModel::rank_compute_seconds(5, 0.0, 0.0)));
  EXPECT_EQ(CostModel::rank_compute_seconds(0, 0.0, 7.0), 0.0);
}

TEST(Planner, SplitsInProportionToThroughput) {
  const std::vector<double> x{3.0, 3.0, 3.0, 1.0};
  const Plan p = antdt::plan_split(1000, x, std::vector<std::int64_t>{1 << 20}, 7);
  EXPECT_EQ(p.batch, (std::vector<std::int64_t>{300, 300, 300, 100}));
  EXPECT_EQ(p.effective_step, 7);
  EXPECT_EQ(p.global_batch, 1000);
  EXPECT_EQ(sum(p.batch), 1000);
}

TEST(Planner, KeepsTheGlobalBatchAndFloorOfOne) {
  const std::vector<double> x{100.0, 1.0, 0.01, 50.0, 7.0};
  for (std::int64_t B : {5, 6, 13, 101, 1000, 4097}) {
    const Plan p = antdt::plan_split(B, x, std::vector<std::int64_t>{8}, 0);
    EXPECT_EQ(sum(p.batch), B) << "B=" << B;
    for (const auto b : p.batch) EXPECT_GE(b, 1) << "B=" << B;
  }
  // Fewer samples than ranks: some ranks get none, the sum still holds.
  const Plan tiny = antdt::plan_split(3, x, std::vector<std::int64_t>{8}, 0);
  EXPECT_EQ(sum(tiny.batch), 3);
  EXPECT_EQ(tiny.batch[2], 0);
}

TEST(Planner, ReachesTheIntegerOptimumWithOverheads) {
  const std::vector<std::vector<double>> xs{{3.0, 1.0}, {5.0, 2.0, 1.0}, {1.0, 1.0, 0.3}, {7.0, 0.5, 2.5}};
  const std::vector<std::vector<double>> as{{}, {0.0, 0.0, 0.0}, {2.0, 0.0, 0.5}, {0.1, 3.0, 0.0}};
  for (std::size_t c = 0; c < xs.size(); ++c) {
    for (std::int64_t B = static_cast<std::int64_t>(xs[c].size()); B <= 30; ++B) {
      const Plan p = antdt::plan_split(B, xs[c], std::vector<std::int64_t>{4}, 0, as[c]);
      EXPECT_EQ(sum(p.batch), B);
      EXPECT_LE(predicted_max(p.batch, xs[c], as[c]), brute_force_best(B, xs[c], as[c]) * (1 + 1e-12))
          << "case " << c << " B=" << B;
    }
  }
}

TEST(Planner, AccumulationRespectsCaps) {
  const std::vector<double> x{4.0, 1.0, 2.0};
  const std::vector<std::int64_t> caps{64, 16, 100};
  const Plan p = antdt::plan_split(1000, x, caps, 0);
  for (int i = 0; i < p.world_size(); ++i) {
    const auto r = static_cast<std::size_t>(i);
    EXPECT_EQ(p.accumulation[r], antdt::ceil_div(p.batch[r], caps[r]));
    const auto micro = p.micro_batches(i);
    EXPECT_EQ(sum(micro), p.batch[r]);
    for (const auto m : micro) EXPECT_LE(m, caps[r]);
  }
}

// plan_problem accepts what the planner makes and names what a broken plan breaks.
TEST(Planner, PlanProblemNamesTheBrokenInvariant) {
  const std::vector<double> x{4.0, 1.0, 2.0};
  const std::vector<std::int64_t> caps{64, 16, 100};
  const Plan good = antdt::plan_split(1000, x, caps, 0);
  EXPECT_EQ(antdt::plan_problem(good), "");
  EXPECT_EQ(antdt::plan_problem(antdt::equal_plan(7, {2, 2, 2, 2, 2, 2, 2, 2})), "") << "zero shares are allowed";
  const auto problem = [&](const std::function<void(Plan&)>& damage) {
    Plan p = good;
    damage(p);
    return antdt::plan_problem(p);
  };
  EXPECT_NE(problem([](Plan& p) { p.batch[0] += 1; }).find("do not sum"), std::string::npos);
  EXPECT_NE(problem([](Plan& p) { p.accumulation[1] += 1; }).find("rank 1: accumulation"), std::string::npos);
  EXPECT_NE(problem([](Plan& p) { p.micro_batch_cap[2] = 0; }).find("rank 2: micro-batch cap 0"), std::string::npos);
  EXPECT_NE(problem([](Plan& p) { p.batch[0] = -1; }).find("rank 0: batch -1 outside"), std::string::npos);
  EXPECT_NE(problem([](Plan& p) { p.accumulation.pop_back(); }).find("lengths differ"), std::string::npos);
  EXPECT_NE(problem([](Plan& p) { p.global_batch = 0; }).find("global batch 0"), std::string::npos);
  EXPECT_NE(problem([](Plan& p) { p = Plan{}; }).find("no ranks"), std::string::npos);
}

TEST(Planner, RejectsBadInput) {
  const std::vector<std::int64_t> cap{8};
  EXPECT_THROW((void)antdt::plan_split(0, std::vector<double>{1.0}, cap, 0), antdt::UsageError);
  EXPECT_THROW((void)antdt::plan_split(10, std::vector<double>{}, cap, 0), antdt::UsageError);
  EXPECT_THROW((void)antdt::plan_split(10, std::vector<double>{1.0, 0.0}, cap, 0), antdt::UsageError);
  EXPECT_THROW((void)antdt::plan_split(10, std::vector<double>{1.0, NAN}, cap, 0), antdt::UsageError);
  EXPECT_THROW((void)antdt::plan_split(10, std::vector<double>{1.0, 1.0}, std::vector<std::int64_t>{8, 8, 8}, 0),
               antdt::UsageError);
  EXPECT_THROW((void)antdt::plan_split(10, std::vector<double>{1.0, 1.0}, std::vector<std::int64_t>{0}, 0),
               antdt::UsageError);
}

TEST(Planner, GpuGenerationPriors) {
  EXPECT_DOUBLE_EQ(antdt::gpu_relative_throughput(80), 1.0);
  EXPECT_GT(antdt::gpu_relative_throughput(90), antdt::gpu_relative_throughput(80));
  EXPECT_GT(antdt::gpu_relative_throughput(80), antdt::gpu_relative_throughput(75));
  EXPECT_GT(antdt::gpu_relative_throughput(90, "NVIDIA H200"),
            antdt::gpu_relative_throughput(90, "NVIDIA H100 80GB HBM3"));
  // Token matching: A10 is not A100, L4 is not L40.
  EXPECT_LT(antdt::gpu_relative_throughput(86, "NVIDIA A10"),
            antdt::gpu_relative_throughput(80, "NVIDIA A100-SXM4-80GB"));
  EXPECT_LT(antdt::gpu_relative_throughput(89, "NVIDIA L4"), antdt::gpu_relative_throughput(89, "NVIDIA L40"));
  EXPECT_DOUBLE_EQ(antdt::gpu_relative_throughput(75, "Tesla T4"), 0.15);
  EXPECT_EQ(antdt::gpu_relative_throughput(0, "host (BLAS)"), 0.0);
}

TEST(Planner, InitialPlanFromProbeAndPriors) {
  std::vector<antdt::RankStepStats> probe(5);
  for (std::size_t k = 0; k < probe.size(); ++k) {
    probe[k].samples = 10;
    probe[k].compute_seconds = k == 2 ? 1.0 : 0.1;  // one outlier micro-step
  }
  EXPECT_DOUBLE_EQ(antdt::probe_throughput(probe), 100.0);
  EXPECT_EQ(antdt::probe_throughput({}), 0.0);

  const std::vector<std::int64_t> cap{1024};
  const Plan probed = antdt::initial_plan(400, std::vector<double>{300.0, 100.0}, cap);
  EXPECT_EQ(probed.batch, (std::vector<std::int64_t>{300, 100}));
  EXPECT_NE(probed.reason.find("probe"), std::string::npos);

  // Rank 2 not probed: its prior (0.5 of rank 0's 1.0) scaled by the probe/prior ratio 200.
  const Plan mixed =
      antdt::initial_plan(500, std::vector<double>{200.0, 200.0, 0.0}, cap, std::vector<double>{1.0, 1.0, 0.5});
  EXPECT_EQ(mixed.batch, (std::vector<std::int64_t>{200, 200, 100}));
  EXPECT_NE(mixed.reason.find("priors for 1"), std::string::npos) << mixed.reason;

  const Plan priors_only = antdt::initial_plan(300, std::vector<double>{0.0, 0.0}, cap, std::vector<double>{2.0, 1.0});
  EXPECT_EQ(priors_only.batch, (std::vector<std::int64_t>{200, 100}));

  const Plan nothing = antdt::initial_plan(301, std::vector<double>{0.0, 0.0}, cap);
  EXPECT_EQ(nothing.batch, (std::vector<std::int64_t>{151, 150}));
}

namespace {

// The planner as it was before its local search used heaps: every move scans every rank.
// The heap version must make exactly the same moves (ties to the lowest rank included).
std::vector<std::int64_t> scanning_split(std::int64_t B, const std::vector<double>& x, const std::vector<double>& a) {
  const std::size_t n = x.size();
  const std::int64_t floor_b = B >= static_cast<std::int64_t>(n) ? 1 : 0;
  std::vector<double> share(n, 0.0);
  std::vector<bool> pinned(n, false);
  for (std::size_t round = 0; round <= n; ++round) {
    double free_batch = static_cast<double>(B), sum_x = 0.0, sum_ax = 0.0;
    for (std::size_t i = 0; i < n; ++i) {
      if (pinned[i]) {
        free_batch -= static_cast<double>(floor_b);
      } else {
        sum_x += x[i];
        sum_ax += a[i] * x[i];
      }
    }
    const double finish = (free_batch + sum_ax) / sum_x;
    bool changed = false;
    for (std::size_t i = 0; i < n; ++i) {
      if (pinned[i]) {
        share[i] = static_cast<double>(floor_b);
        continue;
      }
      share[i] = (finish - a[i]) * x[i];
      if (share[i] < static_cast<double>(floor_b)) pinned[i] = changed = true;
    }
    if (!changed) break;
  }
  std::vector<std::int64_t> b(n);
  std::vector<double> remainder(n);
  std::int64_t assigned = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const double s = std::max(share[i], static_cast<double>(floor_b));
    b[i] = std::max(floor_b, static_cast<std::int64_t>(std::floor(s)));
    remainder[i] = s - std::floor(s);
    assigned += b[i];
  }
  std::vector<std::size_t> order(n);
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t l, std::size_t r) { return remainder[l] > remainder[r]; });
  for (std::size_t k = 0; assigned < B; k = (k + 1) % n, ++assigned) ++b[order[k]];
  while (assigned > B) {
    --*std::max_element(b.begin(), b.end());
    --assigned;
  }
  const auto t_of = [&](std::size_t i, std::int64_t bi) { return CostModel::rank_compute_seconds(bi, x[i], a[i]); };
  for (std::int64_t moves = 0; moves < B + static_cast<std::int64_t>(n); ++moves) {
    std::size_t slowest = 0;
    for (std::size_t i = 1; i < n; ++i)
      if (t_of(i, b[i]) > t_of(slowest, b[slowest])) slowest = i;
    if (b[slowest] - 1 < floor_b) break;
    std::size_t target = n;
    double target_t = std::numeric_limits<double>::infinity();
    for (std::size_t j = 0; j < n; ++j) {
      if (j == slowest) continue;
      if (const double tj = t_of(j, b[j] + 1); tj < target_t) {
        target_t = tj;
        target = j;
      }
    }
    const double current_max = t_of(slowest, b[slowest]);
    if (target == n || !(target_t < current_max) || !(t_of(slowest, b[slowest] - 1) < current_max)) break;
    --b[slowest];
    ++b[target];
  }
  return b;
}

}  // namespace

TEST(Planner, HeapSearchMakesTheMovesOfAFullScan) {
  std::uint64_t state = 12345;
  const auto uniform = [&] {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<double>(state >> 11) / 9007199254740992.0;
  };
  for (int trial = 0; trial < 300; ++trial) {
    const auto n = static_cast<std::size_t>(1 + trial % 40);
    std::vector<double> x(n), a(n, 0.0);
    for (std::size_t i = 0; i < n; ++i) {
      // Repeated speeds make ties; overheads from none to a large share, some negative.
      x[i] = trial % 3 == 0 ? 1.0 + static_cast<double>(i % 3) : 0.1 + 10.0 * uniform();
      if (trial % 2 == 1) a[i] = (uniform() - 0.3) * 2.0;
    }
    const auto B = static_cast<std::int64_t>(n) + static_cast<std::int64_t>(uniform() * 500.0);
    const Plan p = antdt::plan_split(B, x, std::vector<std::int64_t>{1 << 20}, 0, a);
    ASSERT_EQ(p.batch, scanning_split(B, x, a)) << "trial " << trial;
    // No integer plan beats the continuous optimum; the planner's is within one sample of it.
    const double bound = antdt::continuous_split_seconds(B, x, a);
    const double t = predicted_max(p.batch, x, a);
    ASSERT_LE(bound, t * (1 + 1e-12)) << "trial " << trial;
    ASSERT_LE(t, bound + 1.0 / *std::min_element(x.begin(), x.end()) + 1e-9) << "trial " << trial;
  }
}

TEST(Planner, ContinuousBoundWithPinnedRanks) {
  // Rank 1's overhead alone exceeds what the others need: it is pinned to one sample.
  const std::vector<double> x{10.0, 10.0}, a{0.0, 50.0};
  EXPECT_DOUBLE_EQ(antdt::continuous_split_seconds(100, x, a), 50.0 + 0.1);
  EXPECT_DOUBLE_EQ(antdt::continuous_split_seconds(100, std::vector<double>{3.0, 1.0}), 25.0);
  EXPECT_THROW((void)antdt::continuous_split_seconds(0, x, a), antdt::UsageError);
  EXPECT_THROW((void)antdt::continuous_split_seconds(10, x, std::vector<double>{0.0, NAN}), antdt::UsageError);
}
