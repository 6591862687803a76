// Exact weighted reduction. The oracle: N ranks with any split of a global batch (uneven,
// zero shares, all on one rank), with and without micro-step accumulation, end with the same
// parameters as one rank that saw every sample, to 1e-5 relative. Every rank computes the
// single-rank reference locally and compares. Runs on every enabled backend.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdlib>
#include <numeric>
#include <string>
#include <vector>

#include "antdt/config.hpp"
#include "antdt/error.hpp"
#include "comm/reduce.hpp"
#include "comm/sample_count.hpp"
#include "compute_test_support.hpp"
#include "model/model.hpp"
#include "runtime/device_copy.hpp"
#include "transport/comm.hpp"
#include "transport/guard.hpp"

#if ANTDT_HAVE_NCCL
#include <nccl.h>
#endif

using namespace antdt;
using namespace antdt::test;

namespace {

// Named splits of `total` samples over `ranks` ranks.
std::vector<std::pair<std::string, std::vector<std::int64_t>>> splits(std::int64_t total, int ranks) {
  std::vector<std::pair<std::string, std::vector<std::int64_t>>> out;
  std::vector<std::int64_t> even(static_cast<std::size_t>(ranks), total / ranks);
  even.back() += total % ranks;
  out.emplace_back("even+remainder", even);
  // Proportional to (r+1)^2: strongly uneven, like a fast/slow mix.
  std::vector<std::int64_t> uneven(static_cast<std::size_t>(ranks));
  std::int64_t weight_sum = 0, given = 0;
  for (int r = 0; r < ranks; ++r) weight_sum += (r + 1) * (r + 1);
  for (int r = 0; r < ranks; ++r) {
    uneven[static_cast<std::size_t>(r)] = total * (r + 1) * (r + 1) / weight_sum;
    given += uneven[static_cast<std::size_t>(r)];
  }
  uneven.back() += total - given;
  out.emplace_back("quadratic", uneven);
  if (ranks > 1) {
    std::vector<std::int64_t> zero_share = even;  // rank 0 gets nothing, rank 1 takes its part
    zero_share[1] += zero_share[0];
    zero_share[0] = 0;
    out.emplace_back("rank0-zero", zero_share);
    std::vector<std::int64_t> all_last(static_cast<std::size_t>(ranks), 0);
    all_last.back() = total;
    out.emplace_back("all-on-last", all_last);
  }
  return out;
}

class ReduceTest : public BackendTest {
 protected:
  void SetUp() override {
    const std::string why = backend_unavailable(GetParam());
    if (!why.empty()) GTEST_SKIP() << "skipping the " << backend_name(GetParam()) << " backend: " << why;
    comm_ = Communicator::duplicate(MPI_COMM_WORLD);
    device_ =
        select_device(comm_.rank(), GetParam() == Backend::cuda ? DevicePreference::cuda : DevicePreference::host);
  }
  Communicator comm_;
};

TEST_P(ReduceTest, AnySplitMatchesOneRankOnTheSameSamples) {
  auto reducer = make_reducer(comm_, device_);
  constexpr std::int64_t kBatch = 37;
  constexpr int kSteps = 3;
  const Samples data = gaussian_clusters(kBatch * kSteps, 6, 4, 3.0, 11);
  for (const OptimizerKind kind : {OptimizerKind::sgd, OptimizerKind::adam}) {
    MlpConfig cfg;
    cfg.layers = {6, 24, 16, 4};
    cfg.optimizer = kind;
    cfg.learning_rate = kind == OptimizerKind::sgd ? 0.1f : 0.01f;
    cfg.weight_decay = 1e-3f;
    // One-rank reference on every rank: every step's whole batch in one accumulate.
    auto reference = make_mlp(cfg, DeviceInfo{});
    std::vector<std::vector<float>> reference_grads;
    for (int step = 0; step < kSteps; ++step) {
      reference->zero_gradients();
      (void)reference->accumulate(data.x(step * kBatch), data.y(step * kBatch), kBatch);
      reference_grads.push_back(gradient_snapshot(*reference));
      reference->apply_update();
    }
    for (const auto& [split_name, split] : splits(kBatch, comm_.size())) {
      for (const std::int64_t cap : {kBatch, std::int64_t{4}}) {
        for (const bool overlap : {false, true}) {
          SCOPED_TRACE("optimizer " + std::string(kind == OptimizerKind::sgd ? "sgd" : "adam") + ", split " +
                       split_name + ", micro-batch cap " + std::to_string(cap) +
                       (overlap ? ", overlapped" : ", fused"));
          ASSERT_EQ(std::accumulate(split.begin(), split.end(), std::int64_t{0}), kBatch);
          auto model = make(cfg);
          const auto rank = static_cast<std::size_t>(comm_.rank());
          const std::int64_t mine = split[rank];
          const std::int64_t offset = std::accumulate(split.begin(), split.begin() + comm_.rank(), std::int64_t{0});
          for (int step = 0; step < kSteps; ++step) {
            model->zero_gradients();
            const std::int64_t first = step * kBatch + offset;
            // Overlapped: each layer's all-reduce starts as the last micro-batch's backward
            // finishes it; a rank with no samples starts them all in finish().
            std::unique_ptr<OverlappedReduction> pending;
            if (overlap) {
              pending = reducer->begin_overlapped(model->gradient_buffer(), model->gradient_count(),
                                                  model->gradient_buckets());
              if (!pending) {
                EXPECT_EQ(reducer->name(), "nccl") << "only NCCL does not overlap";
              }
            }
            const BatchResult r =
                accumulate_micro_batches(*model, data.x(first), data.y(first), mine, cap, pending.get());
            EXPECT_EQ(r.samples, mine);
            // No Model::synchronize(): the reducer orders itself after the model's queued work
            // (src/comm/reduce.hpp). On the rank0-zero split, rank 0's only work is the
            // asynchronous zeroing of its buffer.
            if (pending) {
              pending->finish();
            } else {
              reducer->allreduce_sum(model->gradient_buffer(), model->gradient_count());
            }
            const std::vector<float> g = gradient_snapshot(*model);
            EXPECT_EQ(count_of(g), kBatch) << "the reduced count is the global batch";
            EXPECT_LT(relative_error(sums_of(g), sums_of(reference_grads[static_cast<std::size_t>(step)])), 1e-5)
                << "step " << step;
            model->apply_update();
          }
          const std::vector<float> expected = reference->parameters();
          const std::vector<float> got = model->parameters();
          EXPECT_LT(relative_error(got, expected), 1e-5);
          EXPECT_LT(max_elementwise_error(got, expected), 1e-5);
          EXPECT_EQ(model->optimizer_steps(), kSteps);
        }
      }
    }
  }
}

// Global counts above 2^24 (16.7M samples per step, which 10,000 ranks at 2,048 samples pass)
// stay exact: each rank's buffer is made to hold 2^24 + a few samples (an odd total, which no
// float holds exactly) with the sums of 2^24 samples of the same mean gradient, the buffer is
// reduced (fused, and overlapped where the reducer overlaps), and the decoded count and the SGD
// update must use the exact global count. One float slot would have rounded every count.
TEST_P(ReduceTest, SampleCountsAbove2To24StayExact) {
  auto reducer = make_reducer(comm_, device_);
  MlpConfig cfg;
  cfg.layers = {5, 7, 3};
  cfg.optimizer = OptimizerKind::sgd;
  cfg.momentum = 0.0f;
  cfg.learning_rate = 0.5f;
  cfg.weight_decay = 0.0f;
  const Samples data = gaussian_clusters(4 * comm_.size(), 5, 3, 3.0, 23);
  // Rank 0: 2^24 + 1, which no float holds; the others 2^24 + 2r + 2: an odd total.
  const auto count_of_rank = [](int r) { return (std::int64_t{1} << 24) + (r == 0 ? 1 : 2 * std::int64_t{r} + 2); };
  std::int64_t expected_total = 0;
  float float_total = 0.0f;  // what one float slot would have summed
  for (int r = 0; r < comm_.size(); ++r) {
    expected_total += count_of_rank(r);
    float_total += static_cast<float>(count_of_rank(r));
  }
  ASSERT_NE(static_cast<std::int64_t>(float_total), expected_total) << "one float slot would be wrong here";
  for (const bool overlap : {false, true}) {
    SCOPED_TRACE(overlap ? "overlapped" : "fused");
    auto model = make(cfg);
    const std::vector<float> before = model->parameters();
    model->zero_gradients();
    (void)model->accumulate(data.x(4 * comm_.rank()), data.y(4 * comm_.rank()), 4);
    // As if this rank had accumulated count_of_rank samples: sums x 2^22 (exact), count slots.
    std::vector<float> local = gradient_snapshot(*model);
    ASSERT_EQ(count_of(local), 4);
    const auto p = static_cast<std::size_t>(model->parameter_count());
    for (std::size_t i = 0; i < p; ++i) local[i] *= 4194304.0f;
    encode_sample_count(count_of_rank(comm_.rank()), local.data() + p);
    if (device_.backend == Backend::host) {
      std::copy(local.begin(), local.end(), model->gradient_buffer());
    } else {
      detail::copy_host_to_device(model->gradient_buffer(), local.data(), local.size() * sizeof(float));
    }
    std::unique_ptr<OverlappedReduction> pending;
    if (overlap) {
      pending = reducer->begin_overlapped(model->gradient_buffer(), model->gradient_count(), model->gradient_buckets());
      if (!pending) {
        EXPECT_EQ(reducer->name(), "nccl") << "only NCCL does not overlap";
        continue;
      }
      // What accumulate_overlapped would do: the finished buffer (copied to host_copy() for a
      // device buffer), then every bucket.
      if (float* copy = pending->host_copy()) std::copy(local.begin(), local.end(), copy);
      for (std::size_t b = 0; b < model->gradient_buckets().size(); ++b) pending->ready(b);
      pending->finish();
    } else {
      reducer->allreduce_sum(model->gradient_buffer(), model->gradient_count());
    }
    const std::vector<float> reduced = gradient_snapshot(*model);
    EXPECT_EQ(count_of(reduced), expected_total) << "the reduced count is exact";
    // The sums are the plain float sums of the ranks' sums, untouched by the count.
    std::vector<float> sums = sums_of(local);
    MPI_Allreduce(MPI_IN_PLACE, sums.data(), static_cast<int>(sums.size()), MPI_FLOAT, MPI_SUM, comm_.get());
    EXPECT_LT(relative_error(sums_of(reduced), sums), 1e-6);
    model->apply_update();
    // p -= lr * sums / B, with B exact (its nearest float, as any division by B is).
    const float inv = 1.0f / static_cast<float>(expected_total);
    std::vector<float> expected = before;
    for (std::size_t i = 0; i < expected.size(); ++i) expected[i] -= cfg.learning_rate * (sums[i] * inv);
    const std::vector<float> got = model->parameters();
    EXPECT_LT(max_elementwise_error(got, expected), 1e-6);
    EXPECT_NE(got, before) << "the update moved the parameters";
    EXPECT_EQ(model->optimizer_steps(), 1);
  }
}

// The overlapped reduction's contract: buckets must tile the buffer, be reported once and in
// order, and a reduction is finished once. Every rank makes the same (refused) calls, so no
// collective is left half-started.
TEST_P(ReduceTest, OverlappedReductionRefusesMisuse) {
  auto reducer = make_reducer(comm_, device_);
  MlpConfig cfg;
  cfg.layers = {6, 24, 16, 4};
  auto model = make(cfg);
  const std::vector<GradientBucket> buckets = model->gradient_buckets();
  ASSERT_EQ(buckets.size(), 3u);
  std::vector<GradientBucket> gap = buckets;
  gap[1].count -= 1;
  std::vector<GradientBucket> overlapping = buckets;
  overlapping[2].count += 1;
  for (const auto& bad : {gap, overlapping, std::vector<GradientBucket>{}}) {
    try {
      (void)reducer->begin_overlapped(model->gradient_buffer(), model->gradient_count(), bad);
      if (reducer->name() == "mpi") ADD_FAILURE() << "buckets that do not tile the buffer were accepted";
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find("cover"), std::string::npos) << e.what();
    }
  }
  auto pending = reducer->begin_overlapped(model->gradient_buffer(), model->gradient_count(), buckets);
  if (!pending) {  // NCCL does not overlap in this version: callers use allreduce_sum
    EXPECT_EQ(reducer->name(), "nccl");
    return;
  }
  EXPECT_THROW(pending->ready(1), UsageError) << "bucket 1 before bucket 0";
  model->zero_gradients();
  const Samples data = gaussian_clusters(8, 6, 4, 3.0, 5);
  (void)model->accumulate_overlapped(data.x(0), data.y(0), 8, *pending);
  EXPECT_THROW(pending->ready(0), UsageError) << "a bucket reported twice";
  pending->finish();
  EXPECT_THROW(pending->finish(), UsageError);
  EXPECT_EQ(count_of(gradient_snapshot(*model)), 8 * comm_.size());
}

TEST_P(ReduceTest, PicksNcclOnlyWhereEveryRankCanUseIt) {
  const std::vector<ReducerCandidate> candidates = reducer_candidates(comm_, device_);
  ASSERT_EQ(candidates.size(), 2u);
  EXPECT_EQ(candidates[0].name, "nccl");
  EXPECT_EQ(candidates[1].name, "mpi");
  EXPECT_TRUE(candidates[1].enabled) << "MPI is always usable";
  auto reducer = make_reducer(comm_, device_);
  EXPECT_EQ(reducer->name(), candidates[0].enabled ? "nccl" : "mpi");
  // The emulated-device runs (tests/compute/cuda_emulation) say which reducer they set up for.
  if (const char* want = std::getenv("ANTDT_TEST_EXPECT_CUDA_REDUCER");
      want != nullptr && GetParam() == Backend::cuda) {
    EXPECT_EQ(reducer->name(), std::string(want)) << candidates[0].reason;
  }
  if (GetParam() == Backend::host) {
    EXPECT_FALSE(candidates[0].enabled);
    EXPECT_FALSE(candidates[0].reason.empty());
    EXPECT_EQ(reducer->name(), "mpi");
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, ReduceTest, testing::Values(Backend::host, Backend::cuda), backend_param_name);

// Ranks of one job may differ in backend (a node without a GPU). Their collectives must still
// match: the MPI reducer chooses blocking or non-blocking per-bucket all-reduces once for the
// whole job, never per rank (blocking and non-blocking collectives do not match). Odd ranks
// run on CUDA where it is there.
TEST(MixedBackends, HostAndDeviceRanksReduceTogetherFusedAndOverlapped) {
  Communicator comm = Communicator::duplicate(MPI_COMM_WORLD);
  const std::string why = backend_unavailable(Backend::cuda);
  if (!why.empty() && comm.size() > 1) GTEST_SKIP() << "mixed host/CUDA ranks need a CUDA device: " << why;
  const bool on_device = comm.rank() % 2 == 1;
  const DeviceInfo device = select_device(comm.rank(), on_device ? DevicePreference::cuda : DevicePreference::host);
  ASSERT_EQ(device.backend, on_device ? Backend::cuda : Backend::host);
  auto reducer = make_reducer(comm, device);
  EXPECT_EQ(reducer->name(), "mpi") << "NCCL needs every rank on a GPU";
  MlpConfig cfg;
  cfg.layers = {6, 24, 16, 4};
  constexpr std::int64_t kBatch = 40;
  const Samples data = gaussian_clusters(kBatch, 6, 4, 3.0, 17);
  auto reference = make_mlp(cfg, DeviceInfo{});
  reference->zero_gradients();
  (void)reference->accumulate(data.x(0), data.y(0), kBatch);
  const std::vector<float> expected = gradient_snapshot(*reference);
  const std::int64_t share = kBatch / comm.size(), first = share * comm.rank();
  const std::int64_t mine = comm.rank() + 1 == comm.size() ? kBatch - first : share;
  for (const bool overlap : {false, true}) {
    SCOPED_TRACE(overlap ? "overlapped" : "fused");
    auto model = make_mlp(cfg, device);
    model->zero_gradients();
    auto pending = overlap ? reducer->begin_overlapped(model->gradient_buffer(), model->gradient_count(),
                                                       model->gradient_buckets())
                           : nullptr;
    ASSERT_EQ(pending != nullptr, overlap) << "the MPI reducer overlaps";
    (void)accumulate_micro_batches(*model, data.x(first), data.y(first), mine, 4, pending.get());
    if (pending) {
      pending->finish();
    } else {
      reducer->allreduce_sum(model->gradient_buffer(), model->gradient_count());
    }
    const std::vector<float> got = gradient_snapshot(*model);
    EXPECT_EQ(count_of(got), kBatch);
    EXPECT_LT(relative_error(sums_of(got), sums_of(expected)), 1e-5);
  }
}

TEST(MpiReducer, SumsHostBuffersInPlace) {
  Communicator comm = Communicator::duplicate(MPI_COMM_WORLD);
  auto reducer = make_reducer(comm, DeviceInfo{});
  EXPECT_EQ(reducer->name(), "mpi");
  const std::int64_t count = (1 << 16) + 3;
  std::vector<float> buffer(static_cast<std::size_t>(count));
  for (std::int64_t i = 0; i < count; ++i)
    buffer[static_cast<std::size_t>(i)] = static_cast<float>((i % 17) * (comm.rank() + 1));
  reducer->allreduce_sum(buffer.data(), count);
  const int n = comm.size();
  for (std::int64_t i = 0; i < count; ++i) {
    ASSERT_EQ(buffer[static_cast<std::size_t>(i)], static_cast<float>((i % 17) * n * (n + 1) / 2)) << "index " << i;
  }
  reducer->allreduce_sum(buffer.data(), 0);  // an empty reduction is legal
}

// Large buffers on 4 ranks or more are sent from a copy (Open MPI's libnbc then runs
// Rabenseifner's algorithm instead of a binomial tree): the sums are the same, fused and
// overlapped, with a large and a small bucket, step after step (the copy is reused).
TEST(MpiReducer, SendsLargeBuffersFromACopyWithTheSameSums) {
  Communicator comm = Communicator::duplicate(MPI_COMM_WORLD);
  const int n = comm.size();
  const std::int64_t large = (1 << 14) + 5, small = 100, count = large + small;  // 64 KiB + 20 bytes
#if defined(OPEN_MPI) && OPEN_MPI
  EXPECT_EQ(detail::send_copy_pays(comm.get(), static_cast<int>(large), MPI_FLOAT), n >= 4);
  EXPECT_FALSE(detail::send_copy_pays(comm.get(), (1 << 14) - 1, MPI_FLOAT));  // under 64 KiB
#else
  EXPECT_FALSE(detail::send_copy_pays(comm.get(), static_cast<int>(large), MPI_FLOAT));
#endif
  auto reducer = make_reducer(comm, DeviceInfo{});
  std::vector<float> buffer(static_cast<std::size_t>(count));
  for (int step = 0; step < 3; ++step) {
    const auto fill = [&] {
      for (std::int64_t i = 0; i < count; ++i)
        buffer[static_cast<std::size_t>(i)] = static_cast<float>((i % 13 + step) * (comm.rank() + 1));
    };
    const auto check = [&](const char* how) {
      for (std::int64_t i = 0; i < count; ++i) {
        ASSERT_EQ(buffer[static_cast<std::size_t>(i)], static_cast<float>((i % 13 + step) * n * (n + 1) / 2))
            << how << ", step " << step << ", index " << i;
      }
    };
    fill();
    reducer->allreduce_sum(buffer.data(), count);
    check("fused");
    fill();
    auto pending = reducer->begin_overlapped(buffer.data(), count, {{0, large}, {large, small}});
    pending->ready(0);
    pending->poll();
    pending->ready(1);
    pending->finish();
    check("overlapped");
  }
}

TEST(Nccl, LibraryLoadsAndReportsItsVersion) {
#if ANTDT_HAVE_NCCL
  int version = 0;
  ASSERT_EQ(ncclGetVersion(&version), ncclSuccess);
  EXPECT_GE(version, 20000) << "NCCL 2.x or later";
#else
  GTEST_SKIP() << "this build has no NCCL (ANTDT_ENABLE_NCCL=OFF)";
#endif
}

}  // namespace
