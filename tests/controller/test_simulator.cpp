// The simulator runs the real Controller on modelled ranks; these check it against closed-form
// limits (static: N min(x) / sum(x); dd: at most mean(x) / min(x) times static).
#include <gtest/gtest.h>

#include "sim/simulator.hpp"

using antdt::sim::SimConfig;
using antdt::sim::simulate;

namespace {

SimConfig config(std::vector<double> speeds, const std::string& policy) {
  SimConfig c;
  c.speeds = std::move(speeds);
  c.steps = 300;
  c.seconds_per_sample = 1e-3;
  c.controller.policy = policy;
  c.controller.global_batch = 1200;
  c.controller.caps = {128};
  c.charge_decision_time = false;  // simulated times must not depend on this machine
  return c;
}

}  // namespace

TEST(Simulator, StaticReachesNMinXOverSumX) {
  const auto r = simulate(config({1, 1, 1, 1.0 / 3}, "static"));
  // Equal batches: N min(x) / sum(x) = 4 (1/3) / (10/3) = 0.4, less the allreduce latency.
  EXPECT_NEAR(r.efficiency, 0.4, 0.002);
  EXPECT_EQ(r.plan_changes, 0);
  EXPECT_NEAR(r.idle_fraction, 1.0 - (3 * (1.0 / 3) + 1) / 4.0, 1e-6);
  EXPECT_NEAR(r.ideal_throughput, 1000.0 * 10.0 / 3.0, 1e-6);
}

TEST(Simulator, DdApproachesTheIdeal) {
  const auto r = simulate(config({1, 1, 1, 1.0 / 3}, "dd"));
  EXPECT_EQ(r.plan_changes, 1);
  EXPECT_GT(r.efficiency, 0.95);
  EXPECT_LT(r.idle_fraction, 0.05);
  EXPECT_LT(r.prediction_error_mean, 0.01);  // exact model: only the first steps mispredict
  const auto s = simulate(config({1, 1, 1, 1.0 / 3}, "static"));
  // The gain is bounded by mean(x)/min(x) = 2.5.
  EXPECT_GT(r.throughput / s.throughput, 2.3);
  EXPECT_LE(r.throughput / s.throughput, 2.5 + 1e-9);
}

TEST(Simulator, IsReproducible) {
  SimConfig c = config({1, 0.5, 1, 1, 0.25}, "dd");
  c.emulation.jitter = 0.05;
  c.emulation.transient_probability = 0.1;
  c.emulation.transient_factor = 3;
  c.emulation.transient_steps = 2;
  c.emulation.seed = 11;
  const auto a = simulate(c);
  const auto b = simulate(c);
  EXPECT_EQ(a.seconds, b.seconds);
  EXPECT_EQ(a.plan_changes, b.plan_changes);
  ASSERT_EQ(a.plans.size(), b.plans.size());
  for (std::size_t k = 0; k < a.plans.size(); ++k) EXPECT_EQ(a.plans[k].batch, b.plans[k].batch);
  c.emulation.seed = 12;
  EXPECT_NE(simulate(c).seconds, a.seconds);
}

// Equal speeds with 10 % noise on every step's compute: there is nothing to balance, so dd
// must never be slower than static (its changes, if any, must not cost), seed after seed.
TEST(Simulator, DdIsNeverSlowerThanStaticWithEqualSpeeds) {
  for (std::uint64_t seed = 1; seed <= 5; ++seed) {
    SimConfig c = config({1, 1, 1, 1}, "static");
    c.steps = 600;
    c.emulation.jitter = 0.1;
    c.emulation.seed = seed;
    const auto s = simulate(c);
    c.controller.policy = "dd";
    const auto d = simulate(c);
    EXPECT_GE(d.throughput, s.throughput) << "seed " << seed << ", " << d.plan_changes << " changes";
    EXPECT_LE(d.plan_changes, 1) << "seed " << seed;
  }
}

// Constant unequal speeds and 5 % noise: once converged (after step 50) dd makes at most one
// change per 100 steps, and stays near the ideal.
TEST(Simulator, ConvergedDdChangesAtMostOncePerHundredSteps) {
  for (std::uint64_t seed = 1; seed <= 5; ++seed) {
    SimConfig c = config({1, 0.5, 1.0 / 3, 1}, "dd");
    c.steps = 1000;
    c.emulation.jitter = 0.05;
    c.emulation.seed = seed;
    const auto r = simulate(c);
    std::int64_t late = 0;
    for (const auto& p : r.plans) late += p.effective_step > 50 ? 1 : 0;
    EXPECT_LE(late, (c.steps - 50) / 100) << "seed " << seed;
    EXPECT_GT(r.settled_efficiency, 0.9) << "seed " << seed;
  }
}

// Many ranks in three speed classes with 5 % noise: the slowest of n noisy window medians is
// always an outlier of their noise, and a plan that balances the medians gains nothing real
// from it. dd must not chase it: at most one change per 100 steps once converged (without the
// bar of estimates_noise, 3 changes after step 50 at 3,000 ranks, 5 at 6,000; now none).
TEST(Simulator, AtScaleDdDoesNotChaseTheNoiseOfItsEstimates) {
  const int n = 3000;
  std::vector<double> speeds(n, 1.0);
  std::fill(speeds.begin() + n / 2, speeds.begin() + 3 * n / 4, 0.5);
  std::fill(speeds.begin() + 3 * n / 4, speeds.end(), 1.0 / 3);
  SimConfig c = config(speeds, "dd");
  c.controller.global_batch = 256LL * n;
  c.controller.caps = {1024};
  c.emulation.jitter = 0.05;
  c.emulation.seed = 3;
  const auto r = simulate(c);
  std::int64_t late = 0;
  for (const auto& p : r.plans) late += p.effective_step > 50 ? 1 : 0;
  EXPECT_LE(late, (c.steps - 50) / 100);
  EXPECT_GT(r.settled_efficiency, 0.85);
}

// The binomial all-reduce (antdt's MPI reducer on Open MPI 4.1) against its schedule worked by
// hand, in units of one whole-vector message on a nominal link (alpha 0, bytes x beta = 1).
TEST(SimulatorNetwork, BinomialFollowsTheReduceAndBroadcastTrees) {
  antdt::sim::NetworkModel m;
  m.allreduce = antdt::sim::NetworkModel::Allreduce::binomial;
  m.alpha = 0.0;
  m.beta = 1.0;
  EXPECT_DOUBLE_EQ(m.allreduce_seconds(1, 1.0), 0.0);
  // 2 ranks: 1 -> 0, then 0 -> 1, one after the other (a ring overlaps them: 1).
  EXPECT_DOUBLE_EQ(m.allreduce_seconds(2, 1.0), 2.0);
  // 4 ranks: 1 -> 0 and 3 -> 2, then 2 -> 0; rank 0 sends to 1 and 2 at once (its link
  // shared: 2), then 1 -> 3.
  EXPECT_DOUBLE_EQ(m.allreduce_seconds(4, 1.0), 5.0);
  // Rank 3's link 8 times slower: 3 -> 2 (8), 2 -> 0 (9), 0 -> 1 and 2 (11), 1 -> 3 (19).
  m.link_factor = {1, 1, 1, 8};
  EXPECT_DOUBLE_EQ(m.allreduce_seconds(4, 1.0), 19.0);
  // Rank 0's link slow: every round of the reduce ends at it (8, 16), and it sends to both
  // children over it (2 x 8).
  m.link_factor = {8, 1, 1, 1};
  EXPECT_DOUBLE_EQ(m.allreduce_seconds(4, 1.0), 33.0);
  // A token bucket of half a vector on rank 3's slow link, out of it and into it: its message
  // out (the reduce) and its message in (the broadcast) each cross half at the nominal speed.
  m.link_factor = {1, 1, 1, 8};
  m.link_burst_bytes = 0.5;
  EXPECT_DOUBLE_EQ(m.allreduce_seconds(4, 1.0), 19.0 - 2 * 3.5);
  // The ring: 1.5 vectors each way over the slow link, 0.5 of it from the bucket.
  m.allreduce = antdt::sim::NetworkModel::Allreduce::ring;
  EXPECT_DOUBLE_EQ(m.allreduce_seconds(4, 1.0), 0.5 + 1.0 * 8);
  m.allreduce = antdt::sim::NetworkModel::Allreduce::binomial;
  m.link_burst_bytes = 0.0;
  // The latency alone: 2 log2(p) messages on the longest path (to the last rank).
  m.link_factor.clear();
  m.alpha = 0.5;
  m.beta = 0.0;
  EXPECT_DOUBLE_EQ(m.allreduce_seconds(4, 1.0), 2.0);
  EXPECT_DOUBLE_EQ(m.allreduce_seconds(8, 1.0), 3.0 * 0.5 + 3.0 * 0.5);
}

// Rabenseifner's all-reduce as libnbc schedules it, worked by hand in the same units.
TEST(SimulatorNetwork, RabenseifnerHalvesThenDoubles) {
  using Allreduce = antdt::sim::NetworkModel::Allreduce;
  antdt::sim::NetworkModel m;
  m.allreduce = Allreduce::rabenseifner;
  m.alpha = 0.0;
  m.beta = 1.0;
  // 4 ranks: halves (0.5), quarters (0.25), then back: 1.5, a ring's.
  EXPECT_DOUBLE_EQ(m.allreduce_seconds(4, 1.0), 1.5);
  // Rank 3's link 8 times slower: every round it is in waits for it, 1.5 x 8 in all.
  m.link_factor = {1, 1, 1, 8};
  EXPECT_DOUBLE_EQ(m.allreduce_seconds(4, 1.0), 12.0);
  // 3 ranks: 0 and 1 swap halves (0.5) and 1 sends its half back (1.0); 0 and 2 reduce-scatter
  // (1.5) and all-gather (2.0); 0 sends the result to 1 (3.0).
  m.link_factor.clear();
  EXPECT_DOUBLE_EQ(m.allreduce_seconds(3, 1.0), 3.0);
  // mpi: binomial below 4 ranks or 64 KiB, rabenseifner from there (antdt's MPI reducer).
  m.allreduce = Allreduce::mpi;
  m.beta = 1.0 / 65536.0;
  antdt::sim::NetworkModel binomial = m, rabenseifner = m;
  binomial.allreduce = Allreduce::binomial;
  rabenseifner.allreduce = Allreduce::rabenseifner;
  EXPECT_DOUBLE_EQ(m.allreduce_seconds(4, 65536.0), rabenseifner.allreduce_seconds(4, 65536.0));
  EXPECT_DOUBLE_EQ(m.allreduce_seconds(4, 65535.0), binomial.allreduce_seconds(4, 65535.0));
  EXPECT_DOUBLE_EQ(m.allreduce_seconds(3, 1e6), binomial.allreduce_seconds(3, 1e6));
  EXPECT_LT(m.allreduce_seconds(8, 1e6), binomial.allreduce_seconds(8, 1e6) / 2.0);
}

// The simulator's step pays the binomial all-reduce in full: a static run's step time grows
// by its value and not by the ring's.
TEST(SimulatorNetwork, AStepPaysTheChosenAllreduce) {
  SimConfig c = config({1, 1, 1, 1}, "static");
  c.gradient_bytes = 1'000'000;
  c.network.alpha = 0.0;
  c.network.beta = 1e-9;  // 1 ms for the vector on a link
  c.network.link_factor = {1, 1, 1, 8};
  const auto step = [&](antdt::sim::NetworkModel::Allreduce a) {
    c.network.allreduce = a;
    const auto r = simulate(c);
    EXPECT_GT(r.allreduce_seconds, 0.0);
    return r.seconds / static_cast<double>(r.steps);
  };
  const double ring = step(antdt::sim::NetworkModel::Allreduce::ring);
  const double binomial = step(antdt::sim::NetworkModel::Allreduce::binomial);
  EXPECT_NEAR(binomial - ring, 19e-3 - 1.5 * 8e-3, 1e-6);
}
