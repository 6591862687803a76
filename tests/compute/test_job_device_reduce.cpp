// Job::reduce_device: a program's gradient sums in device memory, reduced by NCCL (each rank a
// GPU of its own) or by MPI through host memory (ranks sharing one GPU), exactly, with the step's sample count, under
// static with an uneven fixed split, dd under emulated uneven speeds and nd's chunks. The per-sample values are small
// whole numbers, so a float sum of them is exact in any order and the test asks for equality with the sums over the
// step's global batch, which it gathers itself. It runs on the emulated CUDA device (cuda_emulation/, every CUDA build)
// and on a GPU (compute.gpu_job_reduce_device, perf/gpu-check.sh); without a device it skips.
// ANTDT_TEST_EXPECT_CUDA_REDUCER names the reducer the run must pick.
#include <cuda_runtime.h>
#include <gtest/gtest.h>
#include <mpi.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "antdt/error.hpp"
#include "antdt/job.hpp"
#include "runtime/device.hpp"

using namespace antdt;

namespace {

constexpr std::int64_t kCount = 37;  // floats of "gradient"
constexpr std::int64_t kBatch = 23;  // divisible by neither 2 nor 3

int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}
int world_size() {
  int n = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

// Sample i's contribution to float k: a small whole number.
float value(std::int64_t i, std::int64_t k) { return static_cast<float>((i * 7 + k * 3) % 13); }

JobOptions options(const std::string& policy, const std::string& summary) {
  JobOptions o;
  o.session.dataset_size = 200;
  o.session.global_batch = kBatch;
  o.session.max_steps = 12;
  o.session.seed = 3;
  o.session.controller.policy = policy;
  o.output.quiet = true;
  o.output.progress = "never";
  o.output.summary_json = summary;
  const int n = world_size();
  if (policy == "static") {  // uneven: rank r takes r + 1 parts
    std::int64_t parts = static_cast<std::int64_t>(n) * (n + 1) / 2, given = 0;
    for (int r = 0; r < n; ++r) {
      const std::int64_t share = r + 1 == n ? kBatch - given : kBatch * (r + 1) / parts;
      o.session.fixed_split.push_back(share);
      given += share;
    }
  } else {
    o.session.emulation.virtual_seconds_per_sample = 0.0004;
    o.session.emulation.speeds = {1.0, 0.5, 0.34};
    o.session.emulation.speeds.resize(static_cast<std::size_t>(n), 0.3);
    if (policy == "dd") o.session.controller.min_interval = 2;
  }
  return o;
}

// Every rank's samples of the step, gathered.
std::vector<std::int64_t> gather(const std::vector<std::int64_t>& mine) {
  const int n = world_size();
  int count = static_cast<int>(mine.size());
  std::vector<int> counts(static_cast<std::size_t>(n)), offsets(static_cast<std::size_t>(n));
  MPI_Allgather(&count, 1, MPI_INT, counts.data(), 1, MPI_INT, MPI_COMM_WORLD);
  int total = 0;
  for (int r = 0; r < n; ++r)
    offsets[static_cast<std::size_t>(r)] = total, total += counts[static_cast<std::size_t>(r)];
  std::vector<std::int64_t> all(static_cast<std::size_t>(total));
  MPI_Allgatherv(mine.data(), count, MPI_INT64_T, all.data(), counts.data(), offsets.data(), MPI_INT64_T,
                 MPI_COMM_WORLD);
  return all;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

class DeviceReduce : public testing::TestWithParam<const char*> {};

TEST_P(DeviceReduce, SumsTheGlobalBatchWithItsCount) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device visible";
  const std::string policy = GetParam();
  const DeviceInfo device = select_device(world_rank(), DevicePreference::cuda);
  ASSERT_EQ(device.backend, Backend::cuda);
  // Rank 0's process id in the name: the ctest variants may run at once.
  long id = static_cast<long>(getpid());
  MPI_Bcast(&id, 1, MPI_LONG, 0, MPI_COMM_WORLD);
  const std::string summary = testing::TempDir() + "device-reduce-" + std::to_string(id) + "-" + policy + ".json";
  float* sums = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&sums), kCount * sizeof(float)), cudaSuccess);
  std::int64_t steps = 0, uneven = 0;
  {
    Job job(options(policy, summary));
    EXPECT_THROW(job.reduce_device(sums, kCount, device.device_id), UsageError) << "before the first step";
    while (job.next_step()) {
      std::vector<std::int64_t> mine;
      for (auto mb = job.next_micro_batch(); !mb.empty(); mb = job.next_micro_batch()) {
        mine.insert(mine.end(), mb.begin(), mb.end());
      }
      std::vector<float> host(kCount, 0.0f);
      for (const std::int64_t i : mine)
        for (std::int64_t k = 0; k < kCount; ++k) host[static_cast<std::size_t>(k)] += value(i, k);
      ASSERT_EQ(cudaMemcpy(sums, host.data(), kCount * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
      const std::vector<std::int64_t> all = gather(mine);
      const std::int64_t b = job.reduce_device(sums, kCount, device.device_id);
      ASSERT_EQ(b, kBatch) << "step " << steps;
      ASSERT_EQ(static_cast<std::int64_t>(all.size()), kBatch);
      ASSERT_EQ(cudaMemcpy(host.data(), sums, kCount * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
      for (std::int64_t k = 0; k < kCount; ++k) {
        float want = 0.0f;
        for (const std::int64_t i : all) want += value(i, k);
        ASSERT_EQ(host[static_cast<std::size_t>(k)], want) << "step " << steps << ", float " << k;
      }
      job.check_finite(true);
      std::int64_t least = static_cast<std::int64_t>(mine.size()), most = least;
      MPI_Allreduce(MPI_IN_PLACE, &least, 1, MPI_INT64_T, MPI_MIN, MPI_COMM_WORLD);
      MPI_Allreduce(MPI_IN_PLACE, &most, 1, MPI_INT64_T, MPI_MAX, MPI_COMM_WORLD);
      if (most - least > 1) ++uneven;
      ++steps;
    }
    EXPECT_EQ(job.exit_code(), 0);
  }
  EXPECT_EQ(steps, 12);
  if (world_size() > 1 && policy != "dd") {
    EXPECT_GT(uneven, 0) << "no step was split unevenly";
  }
  ASSERT_EQ(cudaFree(sums), cudaSuccess);
  if (world_rank() == 0) {
    const std::string json = read_file(summary);
    const char* want = std::getenv("ANTDT_TEST_EXPECT_CUDA_REDUCER");
    ASSERT_NE(want, nullptr) << "the ctest sets the reducer it expects";
    EXPECT_NE(json.find("\"reducer\": \"" + std::string(want) + "\""), std::string::npos) << json;
  }
}

INSTANTIATE_TEST_SUITE_P(Policies, DeviceReduce, testing::Values("static", "dd", "nd"));

// Misuse is a UsageError on every rank; a non-finite result stops the run as reduce() does.
TEST(DeviceReduceErrors, AnotherDeviceANegativeCountAndANonFiniteResult) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device visible";
  const DeviceInfo device = select_device(world_rank(), DevicePreference::cuda);
  float* sums = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&sums), kCount * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMemset(sums, 0, kCount * sizeof(float)), cudaSuccess);
  {
    Job job(options("static", ""));
    ASSERT_TRUE(job.next_step());
    for (auto mb = job.next_micro_batch(); !mb.empty(); mb = job.next_micro_batch()) {
    }
    EXPECT_THROW(job.reduce_device(sums, -1, device.device_id), UsageError);
    EXPECT_THROW(job.reduce_device(nullptr, kCount, device.device_id), UsageError);
    EXPECT_EQ(job.reduce_device(sums, kCount, device.device_id), kBatch);
    EXPECT_THROW(job.reduce_device(sums, kCount, device.device_id + 1), UsageError) << "another device";
    job.check_finite(true);
    EXPECT_THROW(job.check_finite(false), NonFiniteError);
  }
  ASSERT_EQ(cudaFree(sums), cudaSuccess);
}

}  // namespace
