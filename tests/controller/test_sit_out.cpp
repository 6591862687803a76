// Backup workers: a rank that is away, or that costs more than it gives, sits out; it rejoins
// for trials, less often while they fail, and stays once it pays (src/controller/sit_out.hpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <vector>

#include "antdt/error.hpp"
#include "controller/controller.hpp"
#include "controller/planner.hpp"
#include "core/plan_rules.hpp"
#include "synthetic.hpp"

using antdt::Controller;
using antdt::ControllerOptions;
using antdt::Plan;
using antdt::testing_support::SpeedAt;
using antdt::testing_support::step_stats;

namespace {

constexpr std::int64_t kBatch = 64;

ControllerOptions options(int backup_workers) {
  ControllerOptions o;
  o.policy = "dd";
  o.global_batch = kBatch;
  o.caps = {64};
  o.backup_workers = backup_workers;
  return o;
}

Controller make(const ControllerOptions& o, int world) {
  return Controller(o,
                    antdt::equal_plan(o.global_batch, std::vector<std::int64_t>(static_cast<std::size_t>(world), 64)));
}

// Every rank computes at x; rank `away` (if >= 0) then arrives `late` seconds after its compute
// ended (another process held its core outside its compute window), so the others wait for it
// at the reduction: their reduce times grow by `late`, its own stays the shortest.
std::vector<antdt::RankStepStats> stats_with_away(const Plan& plan, const SpeedAt& x, std::int64_t step, int away,
                                                  double late) {
  auto stats = step_stats(plan, x, step);
  if (away < 0 || plan.sits_out(away)) return stats;
  for (std::size_t i = 0; i < stats.size(); ++i) {
    if (plan.sits_out(static_cast<int>(i))) continue;
    if (static_cast<int>(i) == away) {
      stats[i].reduce_seconds = 1e-4;
    } else {
      stats[i].reduce_seconds += late;
    }
  }
  return stats;
}

const SpeedAt kEqual = [](int, std::int64_t) { return 2000.0; };

struct Change {
  std::int64_t decided;
  Plan plan;
};

// Steps [from, to) with rank `away` late by late(step); the plans issued, with their steps.
std::vector<Change> run(Controller& c, std::int64_t from, std::int64_t to, int away,
                        const std::function<double(std::int64_t)>& late) {
  std::vector<Change> out;
  for (std::int64_t s = from; s < to; ++s) {
    if (auto p = c.on_step(s, stats_with_away(c.plan_at(s), kEqual, s, away, late(s)))) out.push_back({s, *p});
  }
  return out;
}

bool sits(const Plan& p, int rank) { return p.sits_out(rank); }

}  // namespace

// Rank 2 computes as fast as the others (16 ms a step) but arrives 50 ms late every step: no
// split helps (its compute is not what the steps wait for), so it sits out. It rejoins for a
// trial after the probe interval (1 s of 11 ms steps: 94 steps), is still away and sits out
// again, and its next trial waits twice as long. Once it is back for good, its trial holds.
TEST(SitOut, ARankTheStepsWaitForSitsOutRejoinsForTrialsAndStaysOnceItPays) {
  Controller c = make(options(1), 3);
  const auto away = run(c, 0, 600, 2, [](std::int64_t) { return 0.05; });
  ASSERT_GE(away.size(), 4U);
  // Out: warm-up (3) + persistence (5) steps of evidence, effective plan_lag + 1 later.
  EXPECT_TRUE(sits(away[0].plan, 2)) << away[0].plan.reason;
  EXPECT_LE(away[0].decided, 3 + 5 + 2);
  EXPECT_EQ(away[0].plan.batch[2], 0);
  EXPECT_EQ(away[0].plan.batch[0] + away[0].plan.batch[1], kBatch);
  EXPECT_NE(away[0].plan.reason.find("rank 2 sits out"), std::string::npos) << away[0].plan.reason;
  EXPECT_EQ(antdt::plan_problem(away[0].plan), "");
  // Trials, each followed by a sit-out; the intervals double (at most kMaxLevel times).
  std::vector<std::int64_t> out_for;
  for (std::size_t k = 1; k + 1 < away.size(); k += 2) {
    ASSERT_FALSE(sits(away[k].plan, 2)) << away[k].plan.reason;
    EXPECT_NE(away[k].plan.reason.find("rejoins for a trial"), std::string::npos);
    EXPECT_GE(away[k].plan.batch[2], 1);
    EXPECT_TRUE(sits(away[k + 1].plan, 2)) << away[k + 1].plan.reason;
    // In force 2 steps after it was decided (plan lag), three steps of it decide.
    EXPECT_LE(away[k + 1].decided - away[k].decided, 2 + 3 + 1) << "the failed trial is short";
    out_for.push_back(away[k].decided - away[k - 1].decided);
  }
  ASSERT_GE(out_for.size(), 2U);
  EXPECT_GE(out_for[0], 20);  // at least a window
  EXPECT_GT(out_for[1], out_for[0] + out_for[0] / 2) << "the second interval doubles";
  EXPECT_EQ(c.sit_outs(), static_cast<std::int64_t>((away.size() + 1) / 2));
  // Back for good: the next trial holds, and nothing changes for 400 steps after it.
  const auto back = run(c, 600, 1400, -1, [](std::int64_t) { return 0.0; });
  ASSERT_FALSE(back.empty());
  const auto rejoin = std::find_if(back.begin(), back.end(), [](const Change& ch) { return !sits(ch.plan, 2); });
  ASSERT_NE(rejoin, back.end());
  for (auto it = rejoin + 1; it != back.end(); ++it) EXPECT_FALSE(sits(it->plan, 2)) << it->plan.reason;
  EXPECT_FALSE(c.plan().sits_out(2));
}

// --rejoin-after sets the probe interval: the steps between a rank's sit-out and its first trial
// follow it (1 s of steps by default, 3 s here), and the rank is out no longer than that.
TEST(SitOut, RejoinAfterSetsTheProbeInterval) {
  const auto first_interval = [](double rejoin_after) {
    ControllerOptions o = options(1);
    o.rejoin_after = rejoin_after;
    Controller c = make(o, 3);
    const auto away = run(c, 0, 1500, 2, [](std::int64_t) { return 0.05; });
    EXPECT_GE(away.size(), 2U);
    if (away.size() < 2) return std::int64_t{0};
    EXPECT_TRUE(sits(away[0].plan, 2));
    EXPECT_FALSE(sits(away[1].plan, 2)) << away[1].plan.reason;
    return away[1].decided - away[0].decided;
  };
  const std::int64_t one = first_interval(1.0);
  const std::int64_t three = first_interval(3.0);
  EXPECT_GE(one, 20);
  EXPECT_NEAR(static_cast<double>(three) / static_cast<double>(one), 3.0, 0.3) << one << " and " << three << " steps";
  ControllerOptions bad = options(1);
  bad.rejoin_after = 0.0;
  EXPECT_THROW(make(bad, 3), antdt::UsageError);
}

// A co-tenant's time slices: rank 2 is away one step in every five, 50 ms each time (5x a
// step), all through the window. The steps lose a fifth of 50 ms each on average, which no
// split helps, so it sits out, though its waits are rare outliers among the steps: fewer than a
// quarter of them.
TEST(SitOut, ARankAwayOneStepInFiveAllThroughTheWindowSitsOut) {
  Controller c = make(options(1), 3);
  const auto away = run(c, 0, 60, 2, [](std::int64_t s) { return s % 5 == 4 ? 0.05 : 0.0; });
  ASSERT_FALSE(away.empty());
  EXPECT_TRUE(sits(away[0].plan, 2)) << away[0].plan.reason;
  EXPECT_NE(away[0].plan.reason.find("rank 2 sits out"), std::string::npos) << away[0].plan.reason;
}

// A transient: rank 2 away for a quarter of the window (5 of 20 steps) in a row, once every 100
// steps, costs no more than pooled steps absorb, and it never sits out.
TEST(SitOut, ARankAwayForAQuarterOfTheWindowInARowNeverSitsOut) {
  Controller c = make(options(1), 3);
  for (const auto& ch : run(c, 0, 400, 2, [](std::int64_t s) { return s % 100 >= 40 && s % 100 < 45 ? 0.05 : 0.0; }))
    EXPECT_FALSE(sits(ch.plan, 2)) << "step " << ch.decided << ": " << ch.plan.reason;
}

// The limits: backup workers 0 turns it off; rank 0 (the coordinator's) never sits out; no
// more ranks sit out at once than backup workers allow.
TEST(SitOut, NoneWithoutBackupWorkersNeverRankZeroAndNoMoreThanAllowed) {
  const auto late = [](std::int64_t) { return 0.05; };
  Controller off = make(options(0), 3);
  for (const auto& ch : run(off, 0, 300, 2, late)) EXPECT_TRUE(ch.plan.sitting.empty()) << ch.plan.reason;
  Controller zero = make(options(2), 3);
  for (const auto& ch : run(zero, 0, 300, 0, late)) EXPECT_TRUE(ch.plan.sitting.empty()) << ch.plan.reason;
  // Ranks 1 and 2 both away, alternately: one backup worker lets one sit out at a time.
  Controller one = make(options(1), 4);
  for (std::int64_t s = 0; s < 300; ++s) {
    const int away = 1 + static_cast<int>(s % 2);
    if (auto p = one.on_step(s, stats_with_away(one.plan_at(s), kEqual, s, away, 0.05))) {
      EXPECT_LE(p->sitting.size(), 1U) << p->reason;
    }
  }
}

// A device at 0.02 of the others' speed: dd gives it one sample, which still takes longer than
// the others' shares (B 64 on 8 ranks: 9 samples at 1 ms against 1 at 50 ms); it sits out and
// the other 7 share B by their speeds.
TEST(SitOut, ASlowDeviceThatCostsMoreThanItGivesSitsOut) {
  Controller c = make(options(1), 8);
  const SpeedAt speeds = [](int rank, std::int64_t) { return rank == 7 ? 20.0 : 1000.0; };
  std::optional<Plan> out;
  for (std::int64_t s = 0; s < 60 && !out; ++s) {
    if (auto p = c.on_step(s, step_stats(c.plan_at(s), speeds, s)); p && p->sits_out(7)) out = p;
  }
  ASSERT_TRUE(out.has_value());
  EXPECT_EQ(out->sitting, std::vector<std::int32_t>{7});
  EXPECT_EQ(out->batch[7], 0);
  for (int i = 0; i < 7; ++i) EXPECT_GE(out->batch[static_cast<std::size_t>(i)], 9) << i;
  EXPECT_EQ(std::accumulate(out->batch.begin(), out->batch.end(), std::int64_t{0}), kBatch);
  // A slow device given fewer samples than the others' step takes is no reason: 0.5 x speed.
  Controller half = make(options(1), 8);
  const SpeedAt half_speed = [](int rank, std::int64_t) { return rank == 7 ? 500.0 : 1000.0; };
  for (std::int64_t s = 0; s < 200; ++s) {
    if (auto p = half.on_step(s, step_stats(half.plan_at(s), half_speed, s))) {
      EXPECT_TRUE(p->sitting.empty()) << p->reason;
    }
  }
}

// Whether steps are pooled is the policy's choice: auto starts pooled, and a sit-out (and each
// rejoin) keeps the step mode of the plan in force rather than switching to plain steps.
TEST(SitOut, ASitOutKeepsTheStepModeOfThePlanInForce) {
  ControllerOptions o = options(1);
  o.policy = "auto";
  Controller c = make(o, 3);
  ASSERT_TRUE(c.plan().pooled);
  int from_pooled = 0;
  for (std::int64_t s = 0; s < 400; ++s) {
    const Plan before = c.plan();
    const auto p = c.on_step(s, stats_with_away(c.plan_at(s), kEqual, s, 2, 0.05));
    if (!p || p->sitting == before.sitting) continue;
    EXPECT_EQ(p->pooled, before.pooled) << "step " << s << ": " << p->reason;
    from_pooled += before.pooled ? 1 : 0;
  }
  EXPECT_GE(from_pooled, 1) << "no sit-out or rejoin was decided under pooled steps";
}

// The sit-out's state is in the controller's checkpoint: a restored controller decides the
// same plans as one that never stopped (the plan in force lists the sitting rank).
TEST(SitOut, RestoreContinuesExactly) {
  const auto late = [](std::int64_t) { return 0.05; };
  Controller a = make(options(1), 3);
  (void)run(a, 0, 120, 2, late);
  ASSERT_TRUE(a.plan().sits_out(2));
  const auto bytes = a.serialize();
  Controller b = Controller::restore(bytes, options(1));
  const auto from_a = run(a, 120, 400, 2, late);
  const auto from_b = run(b, 120, 400, 2, late);
  ASSERT_EQ(from_a.size(), from_b.size());
  ASSERT_FALSE(from_a.empty());
  for (std::size_t k = 0; k < from_a.size(); ++k) {
    EXPECT_EQ(from_a[k].decided, from_b[k].decided);
    EXPECT_EQ(from_a[k].plan.batch, from_b[k].plan.batch);
    EXPECT_EQ(from_a[k].plan.sitting, from_b[k].plan.sitting);
  }
  EXPECT_EQ(a.sit_outs(), b.sit_outs());
  EXPECT_EQ(a.rejoins(), b.rejoins());
}

// The planner over the ranks that do not sit out, and the plan's own checks.
TEST(SitOut, PlansGiveTheRanksThatSitOutNothingAndListThem) {
  const std::vector<double> x{100.0, 300.0, 1.0, 100.0};
  const std::vector<std::int64_t> caps{16};
  const std::vector<std::int32_t> sitting{2};
  const Plan p = antdt::plan_split_without(50, x, caps, 7, {}, sitting);
  EXPECT_EQ(p.batch, (std::vector<std::int64_t>{10, 30, 0, 10}));
  EXPECT_EQ(p.sitting, sitting);
  EXPECT_EQ(p.accumulation[2], 0);
  EXPECT_EQ(p.accumulation[1], 2);
  EXPECT_EQ(antdt::plan_problem(p), "");
  EXPECT_DOUBLE_EQ(antdt::continuous_split_seconds_without(50, x, {}, sitting), 0.1);
  Plan bad = p;
  bad.sitting = {0};
  EXPECT_NE(antdt::plan_problem(bad), "") << "rank 0 never sits out";
  bad.sitting = {1};
  EXPECT_NE(antdt::plan_problem(bad), "") << "a rank that sits out has no samples";
}

// A rank away at first (its lateness shows at the reduction), then held inside the reduction
// whenever it takes part: every rank's reduce time grows by 50 ms alike, so no arrival is late
// and the cost model sees nothing wrong. Its trials are judged as measured, by the spans of their
// steps against the steps without it: two steps, and it sits out again, every time.
TEST(SitOut, ATrialIsJudgedByTheStepsItTookNotByTheModel) {
  Controller c = make(options(1), 3);
  const auto stats_of = [&](std::int64_t s) {
    const Plan& plan = c.plan_at(s);
    if (s < 100) return stats_with_away(plan, kEqual, s, 2, 0.05);
    auto stats = step_stats(plan, kEqual, s);
    if (!plan.sits_out(2)) {
      for (auto& r : stats) r.reduce_seconds += 0.05;
    }
    return stats;
  };
  std::vector<Change> changes;
  for (std::int64_t s = 0; s < 900; ++s) {
    if (auto p = c.on_step(s, stats_of(s))) changes.push_back({s, *p});
  }
  int trials = 0;
  for (std::size_t k = 0; k < changes.size(); ++k) {
    if (changes[k].plan.reason.find("rejoins for a trial") == std::string::npos) continue;
    ++trials;
    ASSERT_LT(k + 1, changes.size()) << "a trial that did not pay ends";
    const Change& next = changes[k + 1];
    EXPECT_TRUE(next.plan.sits_out(2)) << next.plan.reason;
    EXPECT_NE(next.plan.reason.find("its trial's 2 steps after the first took"), std::string::npos) << next.plan.reason;
    EXPECT_LE(next.decided - changes[k].decided, 2 + 3 + 1) << next.plan.reason;
  }
  EXPECT_GE(trials, 2);
}

// A trial's share: what a rank that is back would get (here the equal share, 21 or 22 of 64 on
// 3 ranks of equal speed), bounded by one step at its last speed, and not shrunk by a trial
// whose steps were slow. Rank 2 is away (late 50 ms) until step 700, and each of its trial
// steps computes at 0.01 of its speed (as when a regroup, or the co-tenant, lands in its
// compute). Then it is back, and its next trial holds. (A share from half its last speed, read
// again from each failed trial, fell to one sample, and on 2 ranks such a trial could never
// show that the rank is back: the all-reduce it adds outweighs one sample.)
TEST(SitOut, ATrialOffersTheShareOfARankThatIsBackAndSlowTrialsDoNotShrinkIt) {
  Controller c = make(options(1), 3);
  const auto trial_of = [&](std::int64_t s) {
    const auto& reason = c.plan_at(s).reason;
    return !c.plan_at(s).sits_out(2) && reason.find("rejoins for a trial") != std::string::npos;
  };
  const SpeedAt speeds = [&](int rank, std::int64_t s) { return rank == 2 && s < 700 && trial_of(s) ? 20.0 : 2000.0; };
  std::vector<std::int64_t> shares;
  for (std::int64_t s = 0; s < 1500; ++s) {
    auto stats = step_stats(c.plan_at(s), speeds, s);
    if (s < 700 && !c.plan_at(s).sits_out(2)) {
      for (std::size_t i = 0; i < 2; ++i) stats[i].reduce_seconds += 0.05;
      stats[2].reduce_seconds = 1e-4;
    }
    if (auto p = c.on_step(s, stats); p && p->reason.find("rejoins for a trial") != std::string::npos) {
      shares.push_back(p->batch[2]);
    }
  }
  ASSERT_GE(shares.size(), 3U) << "trials while away, and one after";
  for (const auto share : shares) EXPECT_GE(share, kBatch / 3) << "the share of a rank that is back";
  EXPECT_FALSE(c.plan().sits_out(2)) << c.plan().reason;
  // A slow device's trial costs about one step without it: rank 7 at 0.02 of the others' speed
  // (1 sample takes 50 ms, the others' steps about 9 ms) is offered a single sample.
  Controller slow = make(options(1), 8);
  const SpeedAt slow_speeds = [](int rank, std::int64_t) { return rank == 7 ? 20.0 : 1000.0; };
  int trials = 0;
  for (std::int64_t s = 0; s < 1500; ++s) {
    if (auto p = slow.on_step(s, step_stats(slow.plan_at(s), slow_speeds, s));
        p && p->reason.find("rejoins for a trial") != std::string::npos) {
      ++trials;
      EXPECT_EQ(p->batch[7], 1) << p->reason;
    }
  }
  EXPECT_GE(trials, 1);
}

// A trial's first step carries the regroup (a communicator made, the run's state sent, a
// napping rank woken: tens of milliseconds measured on 2 ranks), paid once. It is not held
// against the trial: rank 2, away until step 300 and then back, holds its first trial after
// that though every trial's first step takes 100 ms more. (Counted in, it failed every trial.)
TEST(SitOut, ATrialsFirstStepCarriesTheRegroupAndIsNotHeldAgainstIt) {
  Controller c = make(options(1), 3);
  std::vector<Change> changes;
  for (std::int64_t s = 0; s < 1500; ++s) {
    auto stats = stats_with_away(c.plan_at(s), kEqual, s, s < 300 ? 2 : -1, 0.05);
    if (s > 0 && !c.plan_at(s).sits_out(2) && c.plan_at(s - 1).sits_out(2)) {
      for (auto& r : stats) r.reduce_seconds += 0.1;
    }
    if (auto p = c.on_step(s, stats)) changes.push_back({s, *p});
  }
  const auto first_after = std::find_if(changes.begin(), changes.end(), [](const Change& ch) {
    return ch.decided >= 300 && ch.plan.reason.find("rejoins for a trial") != std::string::npos;
  });
  ASSERT_NE(first_after, changes.end());
  for (auto it = first_after; it != changes.end(); ++it) EXPECT_FALSE(it->plan.sits_out(2)) << it->plan.reason;
  EXPECT_FALSE(c.plan().sits_out(2));
}
