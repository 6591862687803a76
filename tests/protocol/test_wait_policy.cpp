// When a waiting rank polls and when it naps (src/core/wait_policy.hpp), on a scripted clock
// and run delay.
#include <gtest/gtest.h>

#include "core/wait_policy.hpp"

using antdt::detail::PollOrNap;

// A core of its own: the run delay does not move while the rank polls, so it polls for the whole
// spin and naps after it, whatever the wait.
TEST(PollOrNap, OnACoreOfItsOwnAWaitPollsForTheSpinThenNaps) {
  PollOrNap p(0.02);
  for (int wait = 0; wait < 3; ++wait) {
    const double t0 = 10.0 * wait;
    p.begin(t0, 5.0);
    for (double t = 0.0; t < 0.02; t += 1e-4) EXPECT_FALSE(p.nap(t0 + t, 5.0 + 1e-7, false)) << t;
    EXPECT_TRUE(p.nap(t0 + 0.0201, 5.0, false));
  }
  EXPECT_EQ(p.contentions(), 0);
  // No spin: every wait naps from the start; a quota that binds: the same.
  PollOrNap none(0.0);
  none.begin(0.0, 0.0);
  EXPECT_TRUE(none.nap(0.0, 0.0, false));
  p.begin(100.0, 5.0);
  EXPECT_TRUE(p.nap(100.0, 5.0, true));
}

// A shared core: 3 ms into a wait, the thread has been held for 2 ms (another process ran on
// its core): the wait naps, and so does every wait for the next second, from its start; then
// a wait polls again, and keeps polling while nothing holds it.
TEST(PollOrNap, AWaitHeldBackWhilePollingNapsAndTheNextSecondsWaitsNapAtOnce) {
  PollOrNap p(0.02);
  p.begin(1.0, 0.5);
  EXPECT_FALSE(p.nap(1.001, 0.5, false));
  EXPECT_TRUE(p.nap(1.003, 0.502, false));
  EXPECT_EQ(p.contentions(), 1);
  EXPECT_TRUE(p.contended(1.5));
  p.begin(1.5, 0.502);
  EXPECT_TRUE(p.nap(1.5, 0.502, false)) << "the next wait naps at once";
  EXPECT_FALSE(p.contended(2.003 + 1e-9));
  p.begin(2.1, 0.6);
  EXPECT_FALSE(p.nap(2.101, 0.6, false)) << "a second later, a wait polls to look again";
  EXPECT_EQ(p.contentions(), 1);
}

// The bar: held back by less than a tenth of the wait plus 0.2 ms (a kernel thread's moment)
// keeps polling; more naps.
TEST(PollOrNap, TheOddMomentOfAKernelThreadKeepsPolling) {
  PollOrNap p(0.02);
  p.begin(0.0, 0.0);
  EXPECT_FALSE(p.nap(0.010, 0.0011, false)) << "1.1 ms held of 10 ms: under 0.1 x 10 + 0.2";
  EXPECT_TRUE(p.nap(0.010, 0.0013, false)) << "1.3 ms held of 10 ms";
}

// The reader: the calling thread's run delay, never negative and never decreasing.
TEST(PollOrNap, TheRunDelayIsReadAndNeverGoesBack) {
  const double a = antdt::detail::thread_run_delay_seconds();
  const double b = antdt::detail::thread_run_delay_seconds();
  EXPECT_GE(a, 0.0);
  EXPECT_GE(b, a);
}
