// Model correctness on every enabled backend: gradients against central finite differences
// of a double-precision reference, one optimizer step against hand-written SGD/Adam, micro-
// batch accumulation, learning a synthetic problem, and host/CUDA agreement.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "antdt/error.hpp"
#include "compute_test_support.hpp"
#include "model/model.hpp"
#include "runtime/device_copy.hpp"

using namespace antdt;
using namespace antdt::test;

namespace {

class ModelTest : public BackendTest {};

TEST_P(ModelTest, GradientMatchesCentralFiniteDifferences) {
  MlpConfig cfg;
  cfg.layers = {5, 19, 37, 3};  // widths past 16 cover the SIMD main loops and their tails
  cfg.seed = 7;
  auto model = make(cfg);
  // Non-zero biases, so the bias path is checked too.
  std::vector<float> p = model->parameters();
  for (std::size_t i = 0; i < p.size(); ++i) p[i] += 0.05f * static_cast<float>(static_cast<int>(i % 7) - 3);
  model->set_parameters(p);
  const Samples data = gaussian_clusters(6, 5, 3, 2.0, 99);

  model->zero_gradients();
  const BatchResult r = model->accumulate(data.x(0), data.y(0), data.size());
  const std::vector<float> g = gradient_snapshot(*model);
  ASSERT_EQ(static_cast<std::int64_t>(g.size()), model->parameter_count() + kSampleCountSlots);
  EXPECT_EQ(count_of(g), 6) << "the count slots hold the samples accumulated";
  EXPECT_EQ(r.samples, 6);

  const std::vector<double> pd(p.begin(), p.end());
  const double loss = reference_loss_sum(cfg.layers, pd, data);
  EXPECT_NEAR(r.loss_sum, loss, 1e-5 * std::fabs(loss));

  const std::vector<float> fd = central_difference_gradient(cfg.layers, pd, data);
  const std::vector<float> analytic = sums_of(g);
  EXPECT_LT(relative_error(analytic, fd), 1e-4);
  EXPECT_LT(max_elementwise_error(analytic, fd), 1e-2);

  // evaluate() is forward only: the same loss, and the gradient buffer is untouched.
  const BatchResult e = model->evaluate(data.x(0), data.y(0), data.size());
  EXPECT_NEAR(e.loss_sum, r.loss_sum, 1e-6 * std::fabs(loss));
  EXPECT_EQ(e.correct, r.correct);
  EXPECT_EQ(gradient_snapshot(*model), g);
}

// The count slots' encoding (src/comm/sample_count.hpp): it round-trips any count, and the float
// sums of every rank's slots decode to the exact total, in any order, up to
// kExactCountMaxRanks ranks at any count and at any number of ranks up to 2^24 samples.
TEST(SampleCount, DigitSlotsSumExactlyWhereOneFloatDoesNot) {
  std::vector<float> slots(kSampleCountSlots);
  for (const std::int64_t n :
       {std::int64_t{0}, std::int64_t{1}, std::int64_t{15}, std::int64_t{16}, std::int64_t{1} << 24,
        (std::int64_t{1} << 24) + 1, (std::int64_t{1} << 40) - 1, std::int64_t{1} << 40,
        (std::int64_t{1} << 62) + 12345, std::numeric_limits<std::int64_t>::max()}) {
    encode_sample_count(n, slots.data());
    EXPECT_EQ(decode_sample_count(slots.data()), n);
    for (int j = 0; j + 1 < kSampleCountSlots; ++j) EXPECT_LE(slots[static_cast<std::size_t>(j)], 15.0f);
    EXPECT_LT(slots.back(), 8388608.0f) << "the last slot stays below 2^23";
  }
  add_sample_count(slots.data(), 0);
  EXPECT_EQ(decode_sample_count(slots.data()), std::numeric_limits<std::int64_t>::max());
  encode_sample_count(-5, slots.data());
  EXPECT_EQ(decode_sample_count(slots.data()), 0) << "a negative count encodes as 0";
  add_sample_count(slots.data(), 37);
  add_sample_count(slots.data(), (std::int64_t{1} << 33) + 5);
  EXPECT_EQ(decode_sample_count(slots.data()), (std::int64_t{1} << 33) + 42);

  // The worst case of the digit slots: kExactCountMaxRanks ranks whose every digit is 15, summed
  // slot by slot in float, front to back and back to front (two reduction orders).
  const std::int64_t per_rank = (std::int64_t{1} << 40) - 1 + (std::int64_t{3} << 40);
  encode_sample_count(per_rank, slots.data());
  for (const bool reversed : {false, true}) {
    std::vector<float> sum(kSampleCountSlots, 0.0f), partial(kSampleCountSlots, 0.0f);
    float one_slot = 0.0f;
    for (std::int64_t r = 0; r < kExactCountMaxRanks; ++r) {
      // Every rank holds per_rank except rank 0, added first or last.
      const std::int64_t rank = reversed ? kExactCountMaxRanks - 1 - r : r;
      const std::int64_t n = rank == 0 ? 12345 : per_rank;
      encode_sample_count(n, partial.data());
      for (std::size_t j = 0; j < sum.size(); ++j) sum[j] += partial[j];
      one_slot += static_cast<float>(n);
    }
    const std::int64_t exact = (kExactCountMaxRanks - 1) * per_rank + 12345;
    EXPECT_EQ(decode_sample_count(sum.data()), exact);
    EXPECT_NE(static_cast<std::int64_t>(one_slot), exact) << "one float slot cannot carry this count";
  }
  // Not a sum of encodings: -1 (apply_update then skips the step, as for B == 0).
  encode_sample_count(100, slots.data());
  for (const float bad : {-1.0f, 0.5f, std::numeric_limits<float>::quiet_NaN(), 16777218.0f}) {
    std::vector<float> broken = slots;
    broken[3] = bad;
    EXPECT_EQ(decode_sample_count(broken.data()), -1) << bad;
  }
  std::vector<float> overflow(kSampleCountSlots, 0.0f);
  overflow.back() = 16777216.0f;  // 2^24 x 2^40 = 2^64: past int64
  EXPECT_EQ(decode_sample_count(overflow.data()), -1);
}

TEST_P(ModelTest, SgdMomentumStepsMatchHandWrittenReference) {
  MlpConfig cfg;
  cfg.layers = {4, 8, 3};
  cfg.optimizer = OptimizerKind::sgd;
  cfg.learning_rate = 0.1f;
  cfg.momentum = 0.9f;
  cfg.weight_decay = 0.01f;
  auto model = make(cfg);
  std::vector<float> p = model->parameters();
  std::vector<float> v(p.size(), 0.0f);
  for (int step = 0; step < 2; ++step) {
    const Samples data = gaussian_clusters(10 + step, 4, 3, 2.0, 50 + static_cast<std::uint64_t>(step));
    model->zero_gradients();
    (void)model->accumulate(data.x(0), data.y(0), data.size());
    const std::vector<float> g = gradient_snapshot(*model);
    const auto count = static_cast<float>(count_of(g));
    for (std::size_t i = 0; i < p.size(); ++i) {
      const float grad = g[i] / count + cfg.weight_decay * p[i];
      v[i] = cfg.momentum * v[i] + grad;
      p[i] = p[i] - cfg.learning_rate * v[i];
    }
    model->apply_update();
  }
  EXPECT_LT(max_elementwise_error(model->parameters(), p), 1e-5);
  EXPECT_LT(max_elementwise_error(model->optimizer_state(), v), 1e-5);
  EXPECT_EQ(model->optimizer_steps(), 2);
}

TEST_P(ModelTest, AdamStepsMatchHandWrittenReference) {
  MlpConfig cfg;
  cfg.layers = {4, 8, 3};
  cfg.optimizer = OptimizerKind::adam;
  cfg.learning_rate = 0.01f;
  auto model = make(cfg);
  std::vector<float> p = model->parameters();
  std::vector<double> m(p.size(), 0.0), v(p.size(), 0.0);
  for (int t = 1; t <= 2; ++t) {
    const Samples data = gaussian_clusters(9, 4, 3, 2.0, 70 + static_cast<std::uint64_t>(t));
    model->zero_gradients();
    (void)model->accumulate(data.x(0), data.y(0), data.size());
    const std::vector<float> g = gradient_snapshot(*model);
    for (std::size_t i = 0; i < p.size(); ++i) {
      const double grad = static_cast<double>(g[i]) / static_cast<double>(count_of(g));
      m[i] = cfg.beta1 * m[i] + (1.0 - cfg.beta1) * grad;
      v[i] = cfg.beta2 * v[i] + (1.0 - cfg.beta2) * grad * grad;
      const double m_hat = m[i] / (1.0 - std::pow(static_cast<double>(cfg.beta1), t));
      const double v_hat = v[i] / (1.0 - std::pow(static_cast<double>(cfg.beta2), t));
      p[i] = static_cast<float>(p[i] - cfg.learning_rate * m_hat / (std::sqrt(v_hat) + cfg.epsilon));
    }
    model->apply_update();
  }
  EXPECT_LT(max_elementwise_error(model->parameters(), p), 1e-5);
  const std::vector<float> state = model->optimizer_state();
  ASSERT_EQ(state.size(), 2 * p.size());
  std::vector<float> mv;
  for (double x : m) mv.push_back(static_cast<float>(x));
  for (double x : v) mv.push_back(static_cast<float>(x));
  EXPECT_LT(relative_error(state, mv), 1e-5);
  EXPECT_EQ(model->optimizer_steps(), 2);
}

TEST_P(ModelTest, UpdateWithZeroSamplesIsANoOp) {
  MlpConfig cfg;
  cfg.layers = {3, 4, 2};
  cfg.optimizer = OptimizerKind::adam;
  auto model = make(cfg);
  const std::vector<float> before = model->parameters();
  model->zero_gradients();
  (void)model->accumulate(nullptr, nullptr, 0);
  model->apply_update();
  EXPECT_EQ(model->parameters(), before);
  EXPECT_EQ(model->optimizer_steps(), 0);
  EXPECT_EQ(count_of(gradient_snapshot(*model)), 0);
}

// Adam's step count t lives with the optimizer (on the device for CUDA): an empty step must
// not advance it, and a restored count must set the bias corrections of the next step.
TEST_P(ModelTest, AdamStepCountSkipsEmptyStepsAndResumesFromARestoredValue) {
  MlpConfig cfg;
  cfg.layers = {4, 8, 3};
  cfg.optimizer = OptimizerKind::adam;
  cfg.learning_rate = 0.01f;
  const Samples data = gaussian_clusters(12, 4, 3, 2.0, 91);
  auto step = [&](Model& m, std::int64_t n) {
    m.zero_gradients();
    (void)m.accumulate(data.x(0), data.y(0), n);
    m.apply_update();
  };
  auto plain = make(cfg);
  auto with_empty = make(cfg);
  step(*plain, 12);
  step(*plain, 12);
  step(*with_empty, 12);
  step(*with_empty, 0);
  step(*with_empty, 12);
  EXPECT_EQ(with_empty->optimizer_steps(), 2);
  EXPECT_EQ(with_empty->parameters(), plain->parameters());

  // A model given another's parameters, moments and t continues exactly as that one does;
  // with t wrong by one the bias corrections differ and so do the parameters.
  auto resumed = make(cfg);
  auto off_by_one = make(cfg);
  for (Model* m : {resumed.get(), off_by_one.get()}) {
    m->set_parameters(plain->parameters());
    m->set_optimizer_state(plain->optimizer_state());
  }
  resumed->set_optimizer_steps(plain->optimizer_steps());
  off_by_one->set_optimizer_steps(plain->optimizer_steps() - 1);
  step(*plain, 12);
  step(*resumed, 12);
  step(*off_by_one, 12);
  EXPECT_EQ(resumed->optimizer_steps(), 3);
  EXPECT_EQ(resumed->parameters(), plain->parameters());
  EXPECT_GT(max_elementwise_error(off_by_one->parameters(), plain->parameters()), 1e-6);
}

TEST_P(ModelTest, MicroBatchAccumulationEqualsOneBatch) {
  MlpConfig cfg;
  cfg.layers = {6, 16, 16, 4};
  auto whole = make(cfg);
  auto micro = make(cfg);
  const Samples data = gaussian_clusters(23, 6, 4, 2.0, 5);
  whole->zero_gradients();
  micro->zero_gradients();
  const BatchResult a = whole->accumulate(data.x(0), data.y(0), data.size());
  const BatchResult b = accumulate_micro_batches(*micro, data.x(0), data.y(0), data.size(), 5);
  EXPECT_EQ(micro_steps(data.size(), 5), 5);
  EXPECT_EQ(b.samples, 23);
  EXPECT_EQ(a.correct, b.correct);
  EXPECT_NEAR(a.loss_sum, b.loss_sum, 1e-6 * std::fabs(a.loss_sum));
  const auto ga = gradient_snapshot(*whole), gb = gradient_snapshot(*micro);
  EXPECT_EQ(count_of(ga), 23);
  EXPECT_EQ(count_of(gb), 23);
  EXPECT_LT(relative_error(gb, ga), 1e-5);
}

// What a model tells a GradientListener: each bucket once, in order, and at that moment the
// bucket already holds its final sums (in the host copy for a device model).
class RecordingListener final : public GradientListener {
 public:
  RecordingListener(Model& model, std::vector<GradientBucket> buckets)
      : model_(model), buckets_(std::move(buckets)), copy_(static_cast<std::size_t>(model.gradient_count()), -1.0f) {}
  float* host_copy() override { return model_.backend() == Backend::cuda ? copy_.data() : nullptr; }
  void ready(std::size_t index) override {
    order.push_back(index);
    ASSERT_LT(index, buckets_.size());
    const GradientBucket& b = buckets_[index];
    const float* from = model_.backend() == Backend::cuda ? copy_.data() : model_.gradient_buffer();
    seen.emplace_back(from + b.offset, from + b.offset + b.count);
  }
  void poll() override { ++polls; }

  std::vector<std::size_t> order;
  std::vector<std::vector<float>> seen;  // bucket values at ready(), by report
  int polls = 0;

 private:
  Model& model_;
  std::vector<GradientBucket> buckets_;
  std::vector<float> copy_;
};

TEST_P(ModelTest, OverlappedAccumulateReportsEachFinishedBucketInOrder) {
  MlpConfig cfg;
  cfg.layers = {6, 24, 16, 4};
  auto plain = make(cfg);
  auto streamed = make(cfg);
  const std::vector<GradientBucket> buckets = streamed->gradient_buckets();
  // One bucket per layer, last layer first; together they tile the buffer, and the first
  // holds the count slots.
  ASSERT_EQ(buckets.size(), 3u);
  EXPECT_EQ(buckets[0].offset + buckets[0].count, streamed->gradient_count());
  EXPECT_EQ(buckets[1].offset + buckets[1].count, buckets[0].offset);
  EXPECT_EQ(buckets[2].offset + buckets[2].count, buckets[1].offset);
  EXPECT_EQ(buckets[2].offset, 0);
  EXPECT_EQ(buckets[0].count, 16 * 4 + 4 + kSampleCountSlots);

  const Samples data = gaussian_clusters(20, 6, 4, 2.0, 9);
  plain->zero_gradients();
  streamed->zero_gradients();
  // An earlier micro-batch, then the step's last one streamed: reported sums include both.
  (void)plain->accumulate(data.x(0), data.y(0), 7);
  (void)streamed->accumulate(data.x(0), data.y(0), 7);
  const BatchResult a = plain->accumulate(data.x(7), data.y(7), 13);
  RecordingListener listener(*streamed, buckets);
  const BatchResult b = streamed->accumulate_overlapped(data.x(7), data.y(7), 13, listener);
  EXPECT_EQ(a.correct, b.correct);
  EXPECT_EQ(a.loss_sum, b.loss_sum);
  EXPECT_EQ(listener.order, (std::vector<std::size_t>{0, 1, 2}));
  const std::vector<float> final_sums = gradient_snapshot(*streamed);
  EXPECT_EQ(final_sums, gradient_snapshot(*plain)) << "streaming changes no number";
  EXPECT_EQ(count_of(final_sums), 20);
  ASSERT_EQ(listener.seen.size(), buckets.size());
  for (std::size_t i = 0; i < buckets.size(); ++i) {
    const auto first = final_sums.begin() + buckets[i].offset;
    EXPECT_EQ(listener.seen[i], std::vector<float>(first, first + buckets[i].count))
        << "bucket " << i << " was reported before its sums were final";
  }
  // No samples: nothing is final, nothing is reported.
  RecordingListener idle(*streamed, buckets);
  (void)streamed->accumulate_overlapped(data.x(0), data.y(0), 0, idle);
  EXPECT_TRUE(idle.order.empty());
}

TEST_P(ModelTest, GradientsFiniteSeesEveryNonFiniteValue) {
  MlpConfig cfg;
  cfg.layers = {4, 9, 3};
  auto model = make(cfg);
  Samples data = gaussian_clusters(7, 4, 3, 2.0, 5);
  model->zero_gradients();
  (void)model->accumulate(data.x(0), data.y(0), data.size());
  EXPECT_TRUE(model->gradients_finite());
  // One NaN feature: the first layer's weight gradients it meets turn NaN (0 * NaN is NaN). The
  // loss need not: CUDA's ReLU (fmaxf) maps a NaN activation to 0 where the host's keeps it,
  // so only the gradient check sees this sample on both backends.
  data.features[2 * 4 + 1] = std::nanf("");
  model->zero_gradients();
  (void)model->accumulate(data.x(0), data.y(0), data.size());
  EXPECT_FALSE(model->gradients_finite());
  // An infinity in a single slot of an otherwise finite buffer, the count slot included
  // (the last element, where a reducer writes the sample count).
  std::vector<float> params = model->parameters();
  for (const std::size_t slot : {std::size_t{0}, params.size()}) {
    model->zero_gradients();
    (void)model->accumulate(data.x(3), data.y(3), 2);
    ASSERT_TRUE(model->gradients_finite());
    std::vector<float> g = gradient_snapshot(*model);
    g[slot] = std::numeric_limits<float>::infinity();
    if (model->backend() == Backend::host) {
      std::copy(g.begin(), g.end(), model->gradient_buffer());
    } else {
      detail::copy_host_to_device(model->gradient_buffer(), g.data(), g.size() * sizeof(float));
    }
    EXPECT_FALSE(model->gradients_finite()) << "slot " << slot;
  }
}

TEST_P(ModelTest, StateRoundTripsAndSizesAreChecked) {
  MlpConfig cfg;
  cfg.layers = {3, 5, 2};
  cfg.optimizer = OptimizerKind::adam;
  auto model = make(cfg);
  EXPECT_EQ(model->parameter_count(), 3 * 5 + 5 + 5 * 2 + 2);
  EXPECT_EQ(model->gradient_count(), model->parameter_count() + kSampleCountSlots);
  EXPECT_EQ(model->input_dim(), 3);
  EXPECT_EQ(model->num_classes(), 2);
  EXPECT_EQ(model->backend(), GetParam());
  std::vector<float> p(static_cast<std::size_t>(model->parameter_count()));
  for (std::size_t i = 0; i < p.size(); ++i) p[i] = 0.01f * static_cast<float>(i);
  model->set_parameters(p);
  EXPECT_EQ(model->parameters(), p);
  std::vector<float> s(2 * p.size(), 0.5f);
  model->set_optimizer_state(s);
  EXPECT_EQ(model->optimizer_state(), s);
  model->set_optimizer_steps(11);
  EXPECT_EQ(model->optimizer_steps(), 11);
  EXPECT_THROW(model->set_parameters(std::vector<float>(3)), UsageError);
  EXPECT_THROW(model->set_optimizer_state(p), UsageError);
  const std::vector<float> x(3, 0.0f);
  const std::vector<std::int32_t> bad_label{2};
  EXPECT_THROW((void)model->accumulate(x.data(), bad_label.data(), 1), UsageError);
  EXPECT_GT(model->bytes_per_sample(), 0);
  EXPECT_GT(model->fixed_bytes(), static_cast<std::int64_t>(sizeof(float)) * 2 * model->parameter_count());
}

TEST_P(ModelTest, SameSeedSameParametersDifferentSeedDifferent) {
  MlpConfig cfg;
  cfg.layers = {4, 6, 3};
  auto a = make(cfg);
  auto b = make_mlp(cfg, DeviceInfo{});  // host
  EXPECT_EQ(a->parameters(), b->parameters()) << "init happens on the host, identical on every backend";
  cfg.seed = 2;
  EXPECT_NE(make(cfg)->parameters(), a->parameters());
}

// Learning: 4 Gaussian clusters in 8-D; a held-out set must reach the stated accuracy in a
// fixed number of steps (the data and init are seeded, so this is deterministic per backend).
void expect_learns(Model& model, double min_accuracy) {
  const Samples train = gaussian_clusters(4096, 8, 4, 6.0, 1);
  const Samples held_out = gaussian_clusters(1024, 8, 4, 6.0, 2);
  const double before = static_cast<double>(model.evaluate(held_out.x(0), held_out.y(0), held_out.size()).correct) /
                        static_cast<double>(held_out.size());
  const std::int64_t batch = 32;
  for (std::int64_t step = 0; step < 120; ++step) {
    const std::int64_t first = (step * batch) % train.size();
    model.zero_gradients();
    (void)model.accumulate(train.x(first), train.y(first), batch);
    model.apply_update();
  }
  const BatchResult r = model.evaluate(held_out.x(0), held_out.y(0), held_out.size());
  const double accuracy = static_cast<double>(r.correct) / static_cast<double>(held_out.size());
  EXPECT_GE(accuracy, min_accuracy) << "accuracy before training: " << before;
  EXPECT_LT(r.loss_sum / static_cast<double>(held_out.size()), 0.5);
}

TEST_P(ModelTest, SgdLearnsGaussianClusters) {
  MlpConfig cfg;
  cfg.layers = {8, 32, 32, 4};
  cfg.learning_rate = 0.05f;
  auto model = make(cfg);
  expect_learns(*model, 0.9);
}

TEST_P(ModelTest, AdamLearnsGaussianClusters) {
  MlpConfig cfg;
  cfg.layers = {8, 32, 32, 4};
  cfg.optimizer = OptimizerKind::adam;
  cfg.learning_rate = 0.005f;
  auto model = make(cfg);
  expect_learns(*model, 0.9);
}

INSTANTIATE_TEST_SUITE_P(Backends, ModelTest, testing::Values(Backend::host, Backend::cuda), backend_param_name);

TEST(ModelAgreement, HostAndCudaAgreeWithin1e4) {
  const std::string why = backend_unavailable(Backend::cuda);
  if (!why.empty()) GTEST_SKIP() << "host/CUDA agreement needs a GPU: " << why;
  MlpConfig cfg;
  cfg.layers = {16, 64, 32, 5};
  cfg.optimizer = OptimizerKind::adam;
  cfg.learning_rate = 0.01f;
  auto host = make_mlp(cfg, device_for(Backend::host));
  auto gpu = make_mlp(cfg, device_for(Backend::cuda));
  const Samples data = gaussian_clusters(300, 16, 5, 3.0, 3);
  for (int step = 0; step < 3; ++step) {
    host->zero_gradients();
    gpu->zero_gradients();
    const BatchResult a = accumulate_micro_batches(*host, data.x(step * 100), data.y(step * 100), 100, 37);
    const BatchResult b = accumulate_micro_batches(*gpu, data.x(step * 100), data.y(step * 100), 100, 37);
    EXPECT_NEAR(a.loss_sum, b.loss_sum, 1e-4 * std::fabs(a.loss_sum));
    EXPECT_LT(relative_error(gradient_snapshot(*gpu), gradient_snapshot(*host)), 1e-4);
    host->apply_update();
    gpu->apply_update();
  }
  EXPECT_LT(relative_error(gpu->parameters(), host->parameters()), 1e-4);
  EXPECT_LT(relative_error(gpu->optimizer_state(), host->optimizer_state()), 1e-4);
}

TEST(ModelConfig, ParseLayersAndOptimizer) {
  EXPECT_EQ(parse_layers("32,64,64,10"), (std::vector<std::int64_t>{32, 64, 64, 10}));
  EXPECT_EQ(parse_layers("3,2"), (std::vector<std::int64_t>{3, 2}));
  for (const char* bad : {"", "32", "32,", ",10", "32,0,10", "32,-4,10", "a,b", "32,10x", "32;10"}) {
    EXPECT_THROW((void)parse_layers(bad), UsageError) << bad;
  }
  EXPECT_EQ(parse_optimizer("sgd"), OptimizerKind::sgd);
  EXPECT_EQ(parse_optimizer("adam"), OptimizerKind::adam);
  EXPECT_THROW((void)parse_optimizer("rmsprop"), UsageError);
  MlpConfig cfg;
  cfg.layers = {5};
  EXPECT_THROW((void)make_mlp(cfg, DeviceInfo{}), UsageError);
  cfg.layers = {5, 0, 2};
  EXPECT_THROW((void)make_mlp(cfg, DeviceInfo{}), UsageError);
  cfg.layers = {5, 2};
  cfg.momentum = 1.0f;
  EXPECT_THROW((void)make_mlp(cfg, DeviceInfo{}), UsageError);
}

TEST(MicroBatchCap, FollowsMemoryBudgetAndClamps) {
  MlpConfig cfg;
  cfg.layers = {32, 64, 10};
  auto model = make_mlp(cfg, DeviceInfo{});
  DeviceInfo host;
  // Exactly 10 samples fit after the fixed part.
  host.free_memory = static_cast<std::size_t>(model->fixed_bytes() + 10 * model->bytes_per_sample());
  EXPECT_EQ(micro_batch_cap(*model, host, 1.0), 10);
  EXPECT_EQ(micro_batch_cap(*model, host, 1.0, 4), 4) << "hard_max clamps";
  host.free_memory = 1;  // nothing fits: still 1
  EXPECT_EQ(micro_batch_cap(*model, host, 0.8), 1);
  host.free_memory = 0;  // host default budget: 1 GiB
  const auto expected = static_cast<std::int64_t>(
      (0.8 * static_cast<double>(kDefaultHostMemoryBudget) - static_cast<double>(model->fixed_bytes())) /
      static_cast<double>(model->bytes_per_sample()));
  EXPECT_EQ(micro_batch_cap(*model, host, 0.8, std::int64_t{1} << 40), expected);
  EXPECT_EQ(micro_batch_cap(*model, host), std::min<std::int64_t>(expected, 1 << 20));
  EXPECT_THROW((void)micro_batch_cap(*model, host, 0.0), UsageError);
  EXPECT_EQ(micro_steps(0, 5), 0);
  EXPECT_EQ(micro_steps(10, 5), 2);
  EXPECT_EQ(micro_steps(11, 5), 3);
  EXPECT_EQ(micro_steps(1, 1000), 1);
  EXPECT_THROW((void)micro_steps(3, 0), UsageError);
}

}  // namespace
