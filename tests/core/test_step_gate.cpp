// The step gate (src/transport/step_gate.hpp): no rank leaves a pass before every rank has entered
// it, and a rank that comes too late is named by rank 0 while every other rank hears of it.
#include <gtest/gtest.h>
#include <mpi.h>

#include <chrono>
#include <cstdint>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "antdt/comm.hpp"
#include "antdt/error.hpp"
#include "transport/step_gate.hpp"

using antdt::Communicator;
using antdt::StallError;
using antdt::detail::steady_seconds;
using antdt::detail::StepGate;

namespace {

// Two ranks to a node, as Session names them: "rank 3 (node node-1)".
std::string node(int r) { return "node-" + std::to_string(r / 2); }
std::string name(int r) { return "rank " + std::to_string(r) + " (node " + node(r) + ")"; }

// Every rank enters each of 150 passes after a random delay (0 to 3 ms, one rank at a time much
// later); every rank's entry must come before every rank's exit, on the steady clock the
// processes of one node share.
void no_rank_leaves_before_all_entered(const Communicator& world) {
  const int p = world.size();
  StepGate gate(world, 5.0, name);
  constexpr int kPasses = 150;
  std::mt19937 rng(1234u + static_cast<unsigned>(world.rank()));
  std::vector<double> enter(kPasses), leave(kPasses);
  for (int k = 0; k < kPasses; ++k) {
    int us = static_cast<int>(rng() % 3000);
    if (k % 10 == 3 && world.rank() == k % p) us = 25000;  // past the gate's 20 ms spin: naps too
    std::this_thread::sleep_for(std::chrono::microseconds(us));
    enter[static_cast<std::size_t>(k)] = steady_seconds();
    gate.pass(k);
    leave[static_cast<std::size_t>(k)] = steady_seconds();
  }
  std::vector<double> last_enter(kPasses), first_leave(kPasses);
  MPI_Allreduce(enter.data(), last_enter.data(), kPasses, MPI_DOUBLE, MPI_MAX, world.get());
  MPI_Allreduce(leave.data(), first_leave.data(), kPasses, MPI_DOUBLE, MPI_MIN, world.get());
  int early = 0;
  for (int k = 0; k < kPasses; ++k)
    if (first_leave[static_cast<std::size_t>(k)] < last_enter[static_cast<std::size_t>(k)]) ++early;
  EXPECT_EQ(early, 0) << "passes a rank left before the last rank entered";
}

// The last rank enters pass 2 only 1.5 s late, past rank 0's 0.5 s timeout: rank 0 names it,
// every other rank hears from rank 0 (not first hand) within the timeout, and the late rank,
// when it comes, is told the step was stopped.
void a_late_rank_is_named(const Communicator& world) {
  const int p = world.size();
  StepGate gate(world, 0.5, name);
  const bool late = world.rank() == p - 1;
  std::string what;
  bool first_hand = false;
  std::vector<std::string> nodes;
  double waited = 0.0;
  for (int k = 0; k < 3; ++k) {
    if (k == 2 && late) std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    const double t0 = steady_seconds();
    try {
      gate.pass(k);
    } catch (const StallError& e) {
      what = e.what();
      first_hand = e.first_hand();
      nodes = e.nodes();
      waited = steady_seconds() - t0;
      break;
    }
  }
  EXPECT_NE(what.find("step 2"), std::string::npos) << "every rank stops at pass 2: " << what;
  if (world.rank() == 0) {
    EXPECT_TRUE(first_hand);
    EXPECT_NE(what.find("rank " + std::to_string(p - 1)), std::string::npos) << what;
    EXPECT_EQ(nodes, std::vector<std::string>{node(p - 1)}) << "only the late rank's node, for the exclude list";
  } else {
    EXPECT_FALSE(first_hand) << what;
    EXPECT_TRUE(nodes.empty()) << "a rank that only heard of the stall names no node";
  }
  if (!late) {
    EXPECT_LT(waited, 1.5) << "stopped at the timeout, not at the grace after it";
  }
}

}  // namespace

TEST(StepGate, NoRankLeavesBeforeEveryRankEntered) {
  const auto world = Communicator::duplicate(MPI_COMM_WORLD);
  if (world.size() < 2) GTEST_SKIP() << "a gate of one rank is no gate";
  no_rank_leaves_before_all_entered(world);
}

TEST(StepGate, ALateRankIsNamedAndEveryOtherHearsOfItFromRankZero) {
  const auto world = Communicator::duplicate(MPI_COMM_WORLD);
  if (world.size() < 3) GTEST_SKIP() << "needs a late rank and a live one besides rank 0";
  a_late_rank_is_named(world);
}
