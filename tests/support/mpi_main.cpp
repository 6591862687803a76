// GoogleTest main for MPI tests. Rank 0 prints the usual report; other ranks print only
// their failures, tagged with the rank. The exit code is agreed by all ranks (a failure on
// any rank fails every rank), so ctest sees a failure wherever it happened. The usual
// "listener" examples always return 0 and hide failures on ranks other than 0.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>
#include <string>
#include <vector>

#include "antdt/runtime.hpp"

namespace {

class RankFailurePrinter : public testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const testing::TestPartResult& result) override {
    if (!result.failed()) return;
    std::fprintf(stderr, "[rank %d] FAILURE at %s:%d\n%s\n", rank_, result.file_name() ? result.file_name() : "?",
                 result.line_number(), result.summary());
  }
  void OnTestEnd(const testing::TestInfo& info) override {
    if (info.result()->Failed()) {
      std::fprintf(stderr, "[rank %d] FAILED %s.%s\n", rank_, info.test_suite_name(), info.name());
    }
  }

 private:
  int rank_;
};

}  // namespace

int main(int argc, char** argv) {
  antdt::Environment env(argc, argv, antdt::without_jobs);
  testing::InitGoogleTest(&argc, argv);
  const int rank = env.world_rank();
  const int size = env.world_size();

  auto& listeners = testing::UnitTest::GetInstance()->listeners();
  if (rank != 0) delete listeners.Release(listeners.default_result_printer());
  listeners.Append(new RankFailurePrinter(rank));

  const int local = RUN_ALL_TESTS() != 0 ? 1 : 0;
  std::vector<int> all(static_cast<std::size_t>(size), 0);
  MPI_Allgather(&local, 1, MPI_INT, all.data(), 1, MPI_INT, MPI_COMM_WORLD);
  int failed = 0;
  std::string ranks;
  for (int r = 0; r < size; ++r) {
    if (all[static_cast<std::size_t>(r)] != 0) {
      ++failed;
      ranks += (ranks.empty() ? "" : ",") + std::to_string(r);
    }
  }
  if (rank == 0 && size > 1) {
    if (failed) {
      std::fprintf(stderr, "antdt-test: FAILED on %d of %d ranks: %s\n", failed, size, ranks.c_str());
    } else {
      std::printf("antdt-test: passed on all %d ranks\n", size);
    }
  }
  return failed ? 1 : 0;
}
