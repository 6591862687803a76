#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "antdt/error.hpp"
#include "transport/collectives.hpp"
#include "transport/comm.hpp"

using antdt::Communicator;

static_assert(!std::is_copy_constructible_v<Communicator>);
static_assert(std::is_nothrow_move_constructible_v<Communicator>);

TEST(Communicator, DuplicatesAndKeepsRankAndSize) {
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  auto comm = Communicator::duplicate(MPI_COMM_WORLD);
  EXPECT_EQ(comm.rank(), rank);
  EXPECT_EQ(comm.size(), size);
  int cmp = MPI_UNEQUAL;
  MPI_Comm_compare(comm.get(), MPI_COMM_WORLD, &cmp);
  EXPECT_EQ(cmp, MPI_CONGRUENT) << "a duplicate is congruent, never the same handle";
}

TEST(Communicator, SetsErrorsReturnOnDuplicateOnly) {
  auto comm = Communicator::duplicate(MPI_COMM_WORLD);
  MPI_Errhandler dup_handler, world_handler;
  MPI_Comm_get_errhandler(comm.get(), &dup_handler);
  MPI_Comm_get_errhandler(MPI_COMM_WORLD, &world_handler);
  EXPECT_EQ(dup_handler, MPI_ERRORS_RETURN);
  EXPECT_NE(world_handler, MPI_ERRORS_RETURN) << "the user's communicator must be left alone";
  MPI_Errhandler_free(&dup_handler);
  MPI_Errhandler_free(&world_handler);
}

TEST(Communicator, MoveTransfersOwnership) {
  auto a = Communicator::duplicate(MPI_COMM_WORLD);
  const MPI_Comm handle = a.get();
  Communicator b = std::move(a);
  EXPECT_EQ(b.get(), handle);
  EXPECT_EQ(a.get(), MPI_COMM_NULL);  // NOLINT(bugprone-use-after-move): moved-from state is specified
  EXPECT_FALSE(static_cast<bool>(a));
  Communicator c;
  c = std::move(b);
  EXPECT_EQ(c.get(), handle);
  c.barrier();
}

TEST(Communicator, InvalidCallThrowsMpiErrorWithMpiMessage) {
  auto comm = Communicator::duplicate(MPI_COMM_WORLD);
  int value = 1;
  // An invalid root makes MPI_Bcast fail; with MPI_ERRORS_RETURN on our duplicate this must
  // surface as antdt::MpiError carrying MPI's own text, the call and the location.
  try {
    ANTDT_CHECK_MPI(MPI_Bcast(&value, 1, MPI_INT, comm.size() + 5, comm.get()));
    FAIL() << "MPI_Bcast with an invalid root did not fail";
  } catch (const antdt::MpiError& e) {
    const std::string what = e.what();
    EXPECT_NE(e.code(), 0);
    EXPECT_NE(what.find("MPI_ERR_ROOT"), std::string::npos) << what;
    EXPECT_NE(what.find("MPI_Bcast"), std::string::npos) << what;
    EXPECT_NE(what.find("test_comm.cpp"), std::string::npos) << what;
  }
  comm.barrier();  // the communicator is still usable afterwards
}

TEST(Communicator, NullCommunicatorIsAUsageError) {
  EXPECT_THROW((void)Communicator::duplicate(MPI_COMM_NULL), antdt::UsageError);
}

TEST(Errors, AllDeriveFromOneRoot) {
  EXPECT_THROW(throw antdt::MpiError(1, "x"), antdt::Error);
  EXPECT_THROW(throw antdt::CheckpointError("x"), antdt::FileError);
  EXPECT_THROW(throw antdt::UsageError("x"), antdt::Error);
  EXPECT_THROW(throw antdt::NcclError(1, "x"), antdt::Error);
  EXPECT_THROW(throw antdt::CudaError(1, "x"), antdt::Error);
}

// Issue 44, item 8: Session::reduce cast its buffer's size to int, so more than 2^31 floats
// wrapped. It now reduces in pieces of at most 2^30 elements; here pieces of 3 and 7 over 20
// elements (a short last piece), and a count that is a whole number of pieces, sum exactly as
// one call does.
TEST(Collectives, AnAllReduceInPiecesSumsEveryElement) {
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  for (const std::int64_t piece : {std::int64_t{3}, std::int64_t{7}, std::int64_t{5}, std::int64_t{1} << 30}) {
    std::vector<std::int64_t> values(20);
    for (std::size_t i = 0; i < values.size(); ++i) values[i] = static_cast<std::int64_t>(i) * 100 + rank;
    antdt::detail::allreduce_in_place(values.data(), static_cast<std::int64_t>(values.size()), MPI_INT64_T,
                                      sizeof(std::int64_t), MPI_SUM, MPI_COMM_WORLD, piece);
    for (std::size_t i = 0; i < values.size(); ++i) {
      const std::int64_t expected = static_cast<std::int64_t>(i) * 100 * size + size * (size - 1) / 2;
      ASSERT_EQ(values[i], expected) << "element " << i << ", pieces of " << piece;
    }
  }
}

// The same for broadcasts (a registered state, a program's broadcast, rank 0's vectors: they cast
// their counts to int too): from every root, in pieces of 3, 7 and 5 and whole, every element
// arrives, and broadcast_vector sends its length first.
TEST(Collectives, ABroadcastInPiecesSendsEveryElement) {
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  for (int root = 0; root < size; ++root) {
    for (const std::int64_t piece : {std::int64_t{3}, std::int64_t{7}, std::int64_t{5}, std::int64_t{1} << 30}) {
      std::vector<double> values(20, -1.0);
      if (rank == root) {
        for (std::size_t i = 0; i < values.size(); ++i) values[i] = static_cast<double>(i) + 0.5 * root;
      }
      antdt::detail::bcast_in_pieces(values.data(), static_cast<std::int64_t>(values.size()), MPI_DOUBLE,
                                     sizeof(double), root, MPI_COMM_WORLD, piece);
      for (std::size_t i = 0; i < values.size(); ++i) {
        ASSERT_EQ(values[i], static_cast<double>(i) + 0.5 * root) << "element " << i << ", pieces of " << piece;
      }
    }
  }
  const antdt::Communicator world = antdt::Communicator::duplicate(MPI_COMM_WORLD);
  std::vector<std::int64_t> mine(rank == 0 ? 11 : 2, rank == 0 ? 42 : 7);
  const auto got = antdt::detail::broadcast_vector(world, mine, MPI_INT64_T);
  EXPECT_EQ(got, std::vector<std::int64_t>(11, 42));
}
