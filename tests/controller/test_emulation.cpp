#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "agent/emulation.hpp"
#include "antdt/error.hpp"
#include "antdt/options.hpp"

using antdt::EmulationOptions;
using antdt::SpeedEmulator;

TEST(Emulation, ParsesSpeeds) {
  EXPECT_EQ(antdt::parse_speeds("1,1,1,0.33"), (std::vector<double>{1, 1, 1, 0.33}));
  EXPECT_EQ(antdt::parse_speeds(" 0.5 , 2 "), (std::vector<double>{0.5, 2}));
  for (const char* bad : {"", "1,,2", "1,abc", "0", "1,-1", "1,inf", "nan", "1;2", "1,2,"}) {
    EXPECT_THROW((void)antdt::parse_speeds(bad), antdt::UsageError) << "'" << bad << "'";
  }
  // The message names the option as the program lets its user set it: a flag on a command
  // line, a field in code, a keyword in Python.
  const auto message = [] {
    try {
      (void)antdt::parse_speeds("1,x");
    } catch (const antdt::UsageError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  for (const auto& [style, name] : {std::pair{antdt::OptionNames::flags, "--emulate-speed:"},
                                    std::pair{antdt::OptionNames::fields, "JobOptions::session.emulation.speeds:"},
                                    std::pair{antdt::OptionNames::keywords, "emulate_speed:"}}) {
    antdt::set_option_names(style);
    const std::string what = message();
    EXPECT_EQ(what.rfind(name, 0), 0U) << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << "one line";
  }
  antdt::set_option_names(antdt::OptionNames::fields);
}

TEST(Emulation, ParsesTransient) {
  EmulationOptions o;
  antdt::parse_transient("0.1,3,5", o);
  EXPECT_DOUBLE_EQ(o.transient_probability, 0.1);
  EXPECT_DOUBLE_EQ(o.transient_factor, 3.0);
  EXPECT_EQ(o.transient_steps, 5);
  EXPECT_EQ(o.transient_from, 0);
  EXPECT_EQ(o.transient_until, 0);
  antdt::parse_transient("0.1,3,5,200,400", o);
  EXPECT_EQ(o.transient_from, 200);
  EXPECT_EQ(o.transient_until, 400);
  EXPECT_NE(o.describe().find("starting at steps >= 200 and < 400"), std::string::npos) << o.describe();
  for (const char* bad : {"0.1,3", "0.1,3,5,7,7", "0.1,3,5,7,2", "0.1,3,5,-1", "0.1,3,5,1,2,3", "1.5,3,5", "-0.1,3,5",
                          "0.1,0.5,5", "0.1,3,0", "0.1,3,2.5", "a,3,5"}) {
    EXPECT_THROW(antdt::parse_transient(bad, o), antdt::UsageError) << "'" << bad << "'";
  }
}

// Slowdowns start only inside [FROM, UNTIL): a burst phase in a steady run. One that starts at
// the phase's last step still lasts its STEPS steps.
TEST(Emulation, TransientsStartOnlyInsideTheirPhase) {
  EmulationOptions o;
  antdt::parse_transient("0.2,3,2,100,200", o);
  o.seed = 9;
  const SpeedEmulator e(o, 0, 1);
  int before = 0, inside = 0, after = 0;
  for (int s = 0; s < 400; ++s) {
    const bool slowed = e.slowdown(s) > 1.0;
    (s < 100 ? before : s <= 200 ? inside : after) += slowed ? 1 : 0;
  }
  EXPECT_EQ(before, 0);
  EXPECT_EQ(after, 0);
  EXPECT_GT(inside, 20);  // about 1 - 0.8^2 = 36 % of 100 steps
}

TEST(Emulation, SpeedCountMustMatchWorld) {
  EmulationOptions o;
  o.speeds = {1, 1, 0.5};
  EXPECT_THROW(SpeedEmulator(o, 0, 4), antdt::UsageError);
  EXPECT_NO_THROW(SpeedEmulator(o, 2, 3));
  EXPECT_THROW(SpeedEmulator(o, 3, 3), antdt::UsageError);
  o.speeds = {0.5};  // one value for every rank
  EXPECT_DOUBLE_EQ(SpeedEmulator(o, 7, 8).speed(), 0.5);
}

TEST(Emulation, StretchesComputeBySpeed) {
  EmulationOptions o;
  o.speeds = {1, 0.25};
  const SpeedEmulator fast(o, 0, 2);
  const SpeedEmulator slow(o, 1, 2);
  EXPECT_TRUE(slow.emulated());
  EXPECT_DOUBLE_EQ(fast.target_compute_seconds(0.1, 32, 0), 0.1);
  EXPECT_DOUBLE_EQ(slow.target_compute_seconds(0.1, 32, 0), 0.4);
  EXPECT_EQ(slow.virtual_throughput(), 0.0);

  EmulationOptions none;
  EXPECT_FALSE(none.active());
  EXPECT_EQ(none.describe(), "emulation off");
  EXPECT_DOUBLE_EQ(SpeedEmulator(none, 0, 1).target_compute_seconds(0.123, 5, 3), 0.123);
}

TEST(Emulation, VirtualDeviceModelsComputeTime) {
  EmulationOptions o;
  o.speeds = {1, 0.5};
  o.virtual_seconds_per_sample = 0.01;
  const SpeedEmulator slow(o, 1, 2);
  EXPECT_DOUBLE_EQ(slow.target_compute_seconds(0.001, 10, 0), 0.2);  // 10 * 0.01 / 0.5
  EXPECT_DOUBLE_EQ(slow.target_compute_seconds(0.5, 10, 0), 0.5);    // never faster than real
  EXPECT_DOUBLE_EQ(slow.virtual_throughput(), 50.0);
  EXPECT_NE(o.describe().find("virtual device"), std::string::npos);
}

TEST(Emulation, TransientsAreSeededAndReproducible) {
  EmulationOptions o;
  o.transient_probability = 0.1;
  o.transient_factor = 3.0;
  o.transient_steps = 1;
  o.seed = 42;
  const SpeedEmulator a(o, 1, 4);
  const SpeedEmulator b(o, 1, 4);
  const SpeedEmulator other_rank(o, 2, 4);
  o.seed = 43;
  const SpeedEmulator other_seed(o, 1, 4);
  int slowed = 0;
  int differ_rank = 0;
  int differ_seed = 0;
  constexpr int kSteps = 20000;
  for (int s = 0; s < kSteps; ++s) {
    const double f = a.slowdown(s);
    EXPECT_EQ(f, b.slowdown(s));
    ASSERT_TRUE(f == 1.0 || f == 3.0);
    slowed += f > 1.0;
    differ_rank += f != other_rank.slowdown(s);
    differ_seed += f != other_seed.slowdown(s);
  }
  EXPECT_NEAR(static_cast<double>(slowed) / kSteps, 0.1, 0.01);
  EXPECT_GT(differ_rank, kSteps / 20);
  EXPECT_GT(differ_seed, kSteps / 20);
  // Reverse order gives the same answers: no hidden RNG state.
  for (int s = 50; s >= 0; --s) EXPECT_EQ(a.slowdown(s), b.slowdown(s));
  EXPECT_DOUBLE_EQ(a.target_compute_seconds(1.0, 1, 0), a.slowdown(0));
  EXPECT_NE(o.describe().find("transient p=0.1 x3 for 1 steps"), std::string::npos) << o.describe();
}

TEST(Emulation, TransientsLastTheirDuration) {
  EmulationOptions o;
  o.transient_probability = 0.01;
  o.transient_factor = 2.0;
  o.transient_steps = 5;
  o.seed = 7;
  const SpeedEmulator e(o, 0, 1);
  // Every slowed run is at least 5 steps long (overlapping starts make it longer).
  int run = 0;
  int runs = 0;
  for (int s = 0; s < 20000; ++s) {
    if (e.slowdown(s) > 1.0) {
      ++run;
    } else if (run > 0) {
      EXPECT_GE(run, 5) << "run ending at step " << s;
      run = 0;
      ++runs;
    }
  }
  EXPECT_GT(runs, 50);
}

TEST(Emulation, WaitForSleepsAtLeastTheTime) {
  const auto begin = std::chrono::steady_clock::now();
  antdt::wait_for(0.02);
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
  EXPECT_GE(waited, 0.02);
  antdt::wait_for(-1.0);  // returns at once
  antdt::wait_for(0.0);
}

TEST(Emulation, ASpeedScheduleChangesARankFromItsStepOnAndFollowsItsNode) {
  using antdt::parse_schedule;
  using antdt::UsageError;
  EmulationOptions o;
  o.speeds = {1, 0.5, 1};
  o.virtual_seconds_per_sample = 1e-3;
  o.schedule = parse_schedule("1:10:0.25, 1:20:1, @n7:5:0.5");
  ASSERT_EQ(o.schedule.size(), 3U);
  EXPECT_EQ(o.schedule[2].node, "n7");
  const SpeedEmulator r1(o, 1, 3), r2_on_n7(o, 2, 3, "n7"), r0(o, 0, 3, "n1");
  EXPECT_EQ(r1.speed_at(9), 0.5);
  EXPECT_EQ(r1.speed_at(10), 0.25);
  EXPECT_EQ(r1.speed_at(19), 0.25);
  EXPECT_EQ(r1.speed_at(20), 1.0) << "it recovers";
  EXPECT_EQ(r2_on_n7.speed_at(4), 1.0);
  EXPECT_EQ(r2_on_n7.speed_at(5), 0.5) << "the node's entry names whichever rank runs there";
  EXPECT_EQ(r0.speed_at(100), 1.0);
  EXPECT_DOUBLE_EQ(r1.target_compute_seconds(0.0, 10, 12), 10 * 1e-3 / 0.25);
  EXPECT_DOUBLE_EQ(r1.target_compute_seconds(0.0, 10, -1), 10 * 1e-3 / 0.5) << "a probe sees the starting speed";
  EXPECT_NE(o.describe().find("schedule 1:10:0.25,1:20:1,@n7:5:0.5"), std::string::npos) << o.describe();
  EXPECT_THROW((void)parse_schedule("1:10"), UsageError);
  EXPECT_THROW((void)parse_schedule("x:1:0.5"), UsageError);
  EXPECT_THROW((void)parse_schedule("@:1:0.5"), UsageError);
  EXPECT_THROW((void)parse_schedule("1:-2:0.5"), UsageError);
  EXPECT_THROW((void)parse_schedule("1:2:0"), UsageError);
  o.schedule = parse_schedule("3:1:0.5");
  EXPECT_THROW(SpeedEmulator(o, 0, 3), UsageError) << "rank 3 is not in a 3-rank job";
}
