// Probes the MPI test harness. Without ANTDT_TEST_INJECT_FAILURE_RANK the injection test
// is skipped; tests/core/expect_injected_failure.cmake sets it and checks that the whole
// run fails.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdlib>
#include <string>

namespace {
int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}
}  // namespace

TEST(Harness, InjectedFailure) {
  const char* inject = std::getenv("ANTDT_TEST_INJECT_FAILURE_RANK");
  if (!inject) GTEST_SKIP() << "ANTDT_TEST_INJECT_FAILURE_RANK not set";
  EXPECT_NE(world_rank(), std::atoi(inject)) << "failure injected on rank " << inject;
}

TEST(Harness, AllRanksRunEveryTest) {
  int size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int one = 1, total = 0;
  MPI_Allreduce(&one, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  EXPECT_EQ(total, size);
}
