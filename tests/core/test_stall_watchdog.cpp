// The stall watchdog behind the guarded waits (src/transport/stall_watchdog.hpp): armed past its deadline it
// ends the process with one line, disarmed in time it never does, and arming it once per step
// does not wake its thread once per step (on oversubscribed cores that wake-up lands in every
// reduction).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <thread>

#include "transport/stall_watchdog.hpp"

using antdt::detail::StallWatchdog;
using namespace std::chrono_literals;

TEST(StallWatchdog, ArmingEveryStepDoesNotWakeItsThreadEveryStep) {
  StallWatchdog w(60.0, 0);
  std::this_thread::sleep_for(20ms);        // its thread is waiting, unarmed
  for (int step = 0; step < 200; ++step) {  // steps of 0.2 ms: time enough for a woken thread to run
    w.arm(step);
    std::this_thread::sleep_for(100us);
    w.disarm();
    std::this_thread::sleep_for(100us);
  }
  // The first arm wakes it to wait for that deadline (again if it ran only after the disarm);
  // the later deadlines lie past it. Woken at every arm, it would count about 200.
  EXPECT_LE(w.wakeups(), 3u);
}

TEST(StallWatchdog, DisarmedInTimeItWakesAtTheDeadlineAndLetsTheProcessLive) {
  StallWatchdog w(0.05, 0);
  for (int step = 0; step < 10; ++step) {
    w.arm(step);
    std::this_thread::sleep_for(10ms);  // steps of 10 ms: each deadline passes two steps later
    w.disarm();
  }
  std::this_thread::sleep_for(150ms);  // past every deadline, disarmed: the process lives
  // It woke for the first arm and at least at the first deadline, found a later one (or none).
  EXPECT_GE(w.wakeups(), 2u);
}

TEST(StallWatchdogDeathTest, ArmedPastItsDeadlineAfterManyStepsItEndsTheProcess) {
  EXPECT_EXIT(
      {
        StallWatchdog w(0.2, 3);
        for (int step = 0; step < 100; ++step) {  // quick steps: its thread waits for the first deadline
          w.arm(step);
          w.disarm();
        }
        w.arm(100);
        std::this_thread::sleep_for(10s);  // a stall inside the reduction of step 100
        std::_Exit(0);
      },
      testing::ExitedWithCode(StallWatchdog::kStallExitCode),
      "rank 3: the gradient reduction of step 100 has not ended");
}
