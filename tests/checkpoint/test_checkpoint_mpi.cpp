// Replicated state: rank 0 writes and commits, then every rank finds and reads the same
// checkpoint at once (concurrent read-only opens of one file).
#include <gtest/gtest.h>
#include <mpi.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "checkpoint/checkpoint.hpp"

namespace fs = std::filesystem;

TEST(CheckpointMpi, RankZeroWritesEveryRankReads) {
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  // Rank 0 names the directory (its pid) so that concurrent runs of this test never share it.
  long long pid = ::getpid();
  MPI_Bcast(&pid, 1, MPI_LONG_LONG, 0, MPI_COMM_WORLD);
  const fs::path dir = fs::temp_directory_path() / ("antdt-ckpt-mpi-" + std::to_string(pid));

  std::vector<float> params(1001);
  for (std::size_t i = 0; i < params.size(); ++i) params[i] = static_cast<float>(i) * 0.5f;
  const std::vector<std::uint64_t> rng = {11, 22, 33};
  if (rank == 0) {
    fs::remove_all(dir);
    for (std::int64_t step : {10, 20}) {
      antdt::CheckpointWriter w(dir.string(), step);
      w.put_floats("model/params", params);
      w.put_uint64s("rng/states", rng);
      w.put_int64("world_size", size);
      w.commit(2);
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);

  const auto latest = antdt::find_latest_checkpoint(dir.string());
  ASSERT_TRUE(latest.has_value());
  EXPECT_EQ(fs::path(*latest).filename(), "ckpt-00000020.h5");
  antdt::CheckpointReader reader(*latest);
  EXPECT_EQ(reader.step(), 20);
  EXPECT_EQ(reader.floats("model/params", static_cast<std::int64_t>(params.size())), params);
  EXPECT_EQ(reader.uint64s("rng/states", 3), rng);
  EXPECT_EQ(reader.int64("world_size"), size);

  MPI_Barrier(MPI_COMM_WORLD);  // everyone has read before rank 0 cleans up
  if (rank == 0) fs::remove_all(dir);
}
