// Session integration over MPI: the Monitor -> Controller -> Agent loop with the DDS, at
// 1 to 4 ranks, with emulated speeds (virtual device: ranks wait out modelled compute, so
// they do not compete for this machine's cores).
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <map>
#include <numeric>
#include <random>
#include <thread>
#include <vector>

#include "antdt/error.hpp"
#include "checkpoint/checkpoint.hpp"
#include "comm/reduce.hpp"
#include "core/bytes.hpp"
#include "core/plan_codec.hpp"
#include "core/plan_rules.hpp"
#include "model/model.hpp"
#include "runtime/device.hpp"
#include "session/session.hpp"
#include "session/session_setup.hpp"

using namespace antdt;

namespace {

int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}
int world_size() {
  int s = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &s);
  return s;
}

// Speeds 1,...,1,0.33: the last rank is the slow one (all 1 on a single rank).
std::vector<double> slow_last(int n) {
  std::vector<double> v(static_cast<std::size_t>(n), 1.0);
  if (n > 1) v.back() = 0.33;
  return v;
}

SessionOptions dd_options(std::int64_t n, std::int64_t batch, std::int64_t steps) {
  SessionOptions o;
  o.dataset_size = n;
  o.global_batch = batch;
  o.max_steps = steps;
  o.controller.policy = "dd";
  o.controller.min_interval = 4;
  o.controller.window = 8;
  o.controller.persistence = 2;
  o.emulation.speeds = slow_last(world_size());
  o.emulation.virtual_seconds_per_sample = 1e-4;
  return o;
}

// Every rank's vector, concatenated in rank order, on every rank.
std::vector<std::int64_t> allgather(const std::vector<std::int64_t>& mine, MPI_Comm comm) {
  int size = 0;
  MPI_Comm_size(comm, &size);
  int n = static_cast<int>(mine.size());
  std::vector<int> counts(static_cast<std::size_t>(size)), displs(static_cast<std::size_t>(size));
  MPI_Allgather(&n, 1, MPI_INT, counts.data(), 1, MPI_INT, comm);
  std::partial_sum(counts.begin(), counts.end() - 1, displs.begin() + 1);
  std::vector<std::int64_t> all(static_cast<std::size_t>(displs.back() + counts.back()));
  MPI_Allgatherv(mine.data(), n, MPI_INT64_T, all.data(), counts.data(), displs.data(), MPI_INT64_T, comm);
  return all;
}

// Runs the session to the end with no model; how often each of the n indices was handed
// out, over all ranks (counted independently of the ledger).
std::vector<int> count_uses_until_finished(Session& s, std::int64_t n) {
  std::vector<std::int64_t> mine;
  while (!s.finished()) {
    StepWork w = s.begin_step();
    mine.insert(mine.end(), w.samples.begin(), w.samples.end());
    s.end_step();
  }
  std::vector<int> count(static_cast<std::size_t>(n), 0);
  for (auto i : allgather(mine, MPI_COMM_WORLD)) {
    EXPECT_TRUE(i >= 0 && i < n) << "index " << i << " out of range";
    if (i >= 0 && i < n) ++count[static_cast<std::size_t>(i)];
  }
  return count;
}

// Rank 0's coverage counters: `epochs` complete epochs, each with all n samples once.
void expect_exactly_once(const Session& s, std::int64_t n, std::size_t epochs) {
  EXPECT_EQ(s.samples_committed(), static_cast<std::int64_t>(epochs) * n);
  if (s.rank() != 0) return;
  const auto cov = s.coverage();
  ASSERT_EQ(cov.size(), epochs);
  for (const auto& c : cov) {
    EXPECT_EQ(c.committed, n) << "epoch " << c.epoch;
    EXPECT_EQ(c.missing, 0) << "epoch " << c.epoch;
    EXPECT_EQ(c.duplicated, 0) << "epoch " << c.epoch;
  }
}

// Runs steps with no model: compute time is the emulator's modelled time.
std::vector<std::vector<std::int64_t>> run_steps(Session& s, std::int64_t steps,
                                                 std::vector<std::int64_t>* versions = nullptr) {
  std::vector<std::vector<std::int64_t>> used;
  for (std::int64_t i = 0; i < steps && !s.finished(); ++i) {
    StepWork w = s.begin_step();
    if (versions) versions->push_back(w.plan_version);
    used.push_back(w.samples);
    s.end_step();
  }
  return used;
}

}  // namespace

TEST(Session, SplitSettlesNearSpeedProportionalShares) {
  const int p = world_size();
  if (p < 2) GTEST_SKIP() << "needs at least 2 ranks to have a slow one";
  auto opt = dd_options(100000, 64, 70);
  // Modelled steps of about 30 ms, not 3: the Monitor times the virtual device's waits with the
  // wall clock, and on a loaded machine (CI runs this beside the Slurm tests) a rank that wakes a
  // millisecond late looks 30 % slower in a 3 ms step (a plan of 6 samples for the 1/3 rank
  // where 9 were due).
  opt.emulation.virtual_seconds_per_sample = 1e-3;
  Session s(MPI_COMM_WORLD, opt);
  run_steps(s, 70);
  const auto& b = s.plan().batch;
  ASSERT_EQ(static_cast<int>(b.size()), p);
  EXPECT_EQ(std::accumulate(b.begin(), b.end(), std::int64_t{0}), 64) << "the global batch stays fixed";
  const double total_speed = (p - 1) + 0.33;
  for (int r = 0; r < p; ++r) {
    const double ideal = 64.0 * opt.emulation.speeds[static_cast<std::size_t>(r)] / total_speed;
    EXPECT_NEAR(static_cast<double>(b[static_cast<std::size_t>(r)]), ideal, std::max(2.0, 0.15 * ideal))
        << "rank " << r << " share; plan: " << s.plan().reason;
  }
  if (s.rank() == 0) {
    const auto x = s.rank_throughput();
    EXPECT_NEAR(x.back() / x.front(), 0.33, 0.05) << "the Monitor sees the emulated speed ratio";
    EXPECT_GE(s.plan_history().size(), 2u) << "dd changed the plan at least once";
  }
}

TEST(Session, AllRanksSwitchPlansAtTheSameStepUnderRandomDelays) {
  auto opt = dd_options(5000, 48, 40);
  Session s(MPI_COMM_WORLD, opt);
  std::mt19937 rng(1234u + static_cast<unsigned>(world_rank()));
  std::uniform_int_distribution<int> delay_us(0, 3000);
  std::vector<std::int64_t> versions;
  while (!s.finished()) {
    // Random, rank-dependent delays between the collective calls must not desynchronise plans.
    std::this_thread::sleep_for(std::chrono::microseconds(delay_us(rng)));
    StepWork w = s.begin_step();
    versions.push_back(w.plan_version);
    std::this_thread::sleep_for(std::chrono::microseconds(delay_us(rng)));
    s.end_step();
  }
  ASSERT_EQ(versions.size(), 40u);
  std::vector<std::int64_t> from_root = versions;
  MPI_Bcast(from_root.data(), static_cast<int>(from_root.size()), MPI_INT64_T, 0, MPI_COMM_WORLD);
  EXPECT_EQ(versions, from_root) << "every rank applies every plan at the same step";
  if (world_size() > 1) {
    EXPECT_GT(versions.back(), versions.front()) << "at least one plan change happened";
  }
}

TEST(Session, EverySampleOnceAcrossEpochsWhilePlansChange) {
  const std::int64_t n = 997;  // prime: not divisible by any batch or world size
  auto opt = dd_options(n, 40, 0);
  opt.max_epochs = 3;
  opt.shard_size = 17;
  Session s(MPI_COMM_WORLD, opt);
  EXPECT_EQ(count_uses_until_finished(s, n), std::vector<int>(static_cast<std::size_t>(n), 3));
  expect_exactly_once(s, n, 3);
}

// next_samples(), asked during step s, is the guess a read-ahead acts on: it must agree with
// what begin_step() hands out at s + 1 on their common prefix always, and entirely while the
// plan stays (the grants it peeks at are the ones taken next, and a new plan only resizes).
TEST(Session, NextSamplesAreTheNextStepsSamplesWhenItsPlanIsKnown) {
  auto opt = dd_options(3001, 48, 60);
  opt.shard_size = 7;  // several shards per step: the guess crosses shard boundaries
  Session s(MPI_COMM_WORLD, opt);
  // Every rank composes its steps from the data order: the first step's slice is known at once.
  std::vector<std::int64_t> guess = s.next_samples();
  std::int64_t exact = 0, replanned = 0, version_guessed = s.plan().version;
  while (!s.finished()) {
    StepWork w = s.begin_step();
    if (w.plan_version == version_guessed) {
      EXPECT_EQ(guess, w.samples) << "step " << w.step << ": the plan was known, so the guess is exact";
      ++exact;
    } else {
      ++replanned;  // a plan that arrived after the guess moved this rank's slice
    }
    guess = s.next_samples();
    version_guessed = s.plan().version;
    EXPECT_EQ(s.next_samples(), guess) << "asking consumes nothing";
    s.end_step();
  }
  EXPECT_TRUE(s.next_samples().empty()) << "nothing comes after the last step";
  EXPECT_EQ(exact + replanned, 60);
  EXPECT_GE(exact, 55) << "plans change rarely, so the guess is almost always exact";
  if (world_size() > 1) {
    EXPECT_GE(replanned, 1) << "dd moved off the equal split at least once";
  }
  EXPECT_EQ(s.samples_committed(), 60 * 48);
}

TEST(Session, TinyDataSetSmallerThanOneStep) {
  // N < B: every step spans several epochs; still exactly once per epoch.
  SessionOptions o;
  o.dataset_size = 5;
  o.global_batch = 12;
  o.max_epochs = 7;
  o.controller.policy = "static";
  Session s(MPI_COMM_WORLD, o);
  EXPECT_EQ(count_uses_until_finished(s, 5), std::vector<int>(5, 7));
}

namespace {

// Invariant 2 through the whole loop: uneven, changing splits with accumulation (dd), or
// pooled steps whose chunks fall to whichever rank claims them (nd), still give the
// parameters one rank gets from the same samples.
void expect_one_rank_equivalence(const std::string& policy) {
  const std::int64_t dim = 6, classes = 3, n = 600;
  auto sample = [&](std::int64_t i, float* x, std::int32_t* y) {
    for (std::int64_t j = 0; j < dim; ++j)
      x[j] = std::sin(0.37f * static_cast<float>(i * (j + 1)) + static_cast<float>(j));
    *y = static_cast<std::int32_t>(i % classes);
  };
  MlpConfig mc;
  mc.layers = {dim, 10, classes};
  mc.learning_rate = 0.1f;
  const DeviceInfo host = select_device(0, DevicePreference::host);
  auto model = make_mlp(mc, host);
  auto reference = make_mlp(mc, host);  // every rank keeps a one-rank reference

  auto opt = dd_options(n, 30, 24);
  opt.controller.policy = policy;
  opt.micro_batch_cap = 4;  // shares above 4 run as accumulation micro-steps
  opt.gradient_bytes = model->gradient_count() * 4;
  Session s(MPI_COMM_WORLD, opt);
  auto reducer = make_reducer(s.comm(), host);
  std::vector<float> x, xr;
  std::vector<std::int32_t> y, yr;
  bool accumulated = false;
  double worst = 0;
  while (!s.finished()) {
    // The reference starts every step from the distributed model's state, so each step's
    // update is compared on its own (errors would otherwise compound over steps).
    reference->set_parameters(model->parameters());
    reference->set_optimizer_state(model->optimizer_state());
    StepWork w = s.begin_step();
    const auto load = [&](const std::vector<std::int64_t>& idx) {
      const auto m = static_cast<std::int64_t>(idx.size());
      x.resize(static_cast<std::size_t>(m * dim));
      y.resize(static_cast<std::size_t>(m));
      for (std::int64_t k = 0; k < m; ++k)
        sample(idx[static_cast<std::size_t>(k)], &x[static_cast<std::size_t>(k * dim)],
               &y[static_cast<std::size_t>(k)]);
    };
    model->zero_gradients();
    EXPECT_EQ(w.pooled, policy == "nd");
    if (w.pooled) {
      for (auto chunk = s.next_chunk(); !chunk.empty(); chunk = s.next_chunk()) {
        load(chunk);
        model->accumulate(x.data(), y.data(), static_cast<std::int64_t>(chunk.size()));
        s.chunk_done();
        w.samples.insert(w.samples.end(), chunk.begin(), chunk.end());
        w.micro_batches.push_back(static_cast<std::int64_t>(chunk.size()));
      }
    } else {
      load(w.samples);
      s.mark_data_ready();
      std::int64_t off = 0;
      for (auto mb : w.micro_batches) {
        model->accumulate(x.data() + off * dim, y.data() + off, mb);
        off += mb;
      }
    }
    accumulated = accumulated || w.micro_batches.size() > 1;
    s.reduce_sums(model->gradient_buffer(), model->gradient_count(), *reducer);
    model->apply_update();
    s.end_step();

    const auto all = allgather(w.samples, MPI_COMM_WORLD);
    const auto total = static_cast<std::int64_t>(all.size());
    xr.resize(static_cast<std::size_t>(total * dim));
    yr.resize(static_cast<std::size_t>(total));
    for (std::int64_t k = 0; k < total; ++k)
      sample(all[static_cast<std::size_t>(k)], &xr[static_cast<std::size_t>(k * dim)],
             &yr[static_cast<std::size_t>(k)]);
    reference->zero_gradients();
    reference->accumulate(xr.data(), yr.data(), total);
    reference->apply_update();
    const auto p = model->parameters();
    const auto q = reference->parameters();
    ASSERT_EQ(p.size(), q.size());
    for (std::size_t i = 0; i < p.size(); ++i) {
      worst = std::max(
          worst, std::abs(static_cast<double>(p[i]) - q[i]) / std::max(1e-3, std::abs(static_cast<double>(q[i]))));
    }
  }
  EXPECT_LT(worst, 1e-5) << "largest relative parameter difference of one step's update, over 24 steps";
  int any_acc = accumulated ? 1 : 0;
  MPI_Allreduce(MPI_IN_PLACE, &any_acc, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  EXPECT_EQ(any_acc, 1) << "the test must exercise gradient accumulation";
}

}  // namespace

TEST(Session, TrainingUnderDdMatchesOneRankOnTheSameSamples) { expect_one_rank_equivalence("dd"); }

TEST(Session, PooledStepsUnderNdMatchOneRankOnTheSameSamples) { expect_one_rank_equivalence("nd"); }

TEST(Session, UserReduceAveragesOverAllSamples) {
  SessionOptions o;
  o.dataset_size = 100;
  o.global_batch = 10;
  o.max_steps = 1;
  o.controller.policy = "static";
  Session s(MPI_COMM_WORLD, o);
  StepWork w = s.begin_step();
  // Gradient sum of sample i is (i, 1): the mean over the step is (mean index, 1).
  std::vector<float> g(2, 0.0f);
  for (auto i : w.samples) g[0] += static_cast<float>(i), g[1] += 1.0f;
  const auto all = allgather(w.samples, MPI_COMM_WORLD);
  const std::int64_t b = s.reduce(g, static_cast<std::int64_t>(w.samples.size()));
  s.end_step();
  EXPECT_EQ(b, 10);
  EXPECT_NEAR(g[0], std::accumulate(all.begin(), all.end(), 0.0) / 10.0, 1e-4);
  EXPECT_FLOAT_EQ(g[1], 1.0f);
}

// Session::reduce carries the count in digit slots of its one all-reduce: counts past 2^24, odd
// (no float holds them), come back exact, and the sums are divided by that exact count.
// A reduction divides by the samples every rank says it trained on: a rank that passes another
// count than it was given (or reduces outside a step) is a usage error, not a silently wrong
// mean. (The count's exactness above 2^24 is ReduceTest.SampleCountsAbove2To24StayExact.)
TEST(Session, UserReduceRefusesAWrongSampleCount) {
  SessionOptions o;
  o.dataset_size = 100;
  o.global_batch = 10;
  o.max_steps = 2;
  o.controller.policy = "static";
  Session s(MPI_COMM_WORLD, o);
  std::vector<float> g{1.0f, 2.0f};
  EXPECT_THROW((void)s.reduce(g, 0), antdt::UsageError) << "before begin_step";
  const auto work = s.begin_step();
  const auto mine = static_cast<std::int64_t>(work.samples.size());
  try {
    (void)s.reduce(g, mine + 7);
    ADD_FAILURE() << "7 samples more than this rank was given were accepted";
  } catch (const antdt::UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("was given " + std::to_string(mine)), std::string::npos) << e.what();
  }
  g = {static_cast<float>(mine), 3.0f * static_cast<float>(mine)};  // sums of mean 1 and 3
  EXPECT_EQ(s.reduce(g, mine), o.global_batch);
  EXPECT_FLOAT_EQ(g[0], 1.0f);
  EXPECT_FLOAT_EQ(g[1], 3.0f);
  (void)s.end_step();
  // Fixed-point sums reduce exactly, whatever the split.
  const auto next = s.begin_step();
  std::vector<std::int64_t> fixed{static_cast<std::int64_t>(next.samples.size()) * 3, -1};
  EXPECT_EQ(s.reduce(fixed, static_cast<std::int64_t>(next.samples.size())), o.global_batch);
  EXPECT_EQ(fixed[0], 3 * o.global_batch);
  EXPECT_EQ(fixed[1], -s.size());
  (void)s.end_step();
}

TEST(Session, RestoreReplaysAndElasticRestoreKeepsExactlyOnce) {
  // Checkpoint after 9 steps; (a) a same-size restore replays the very same samples per
  // rank; (b) a restore onto a smaller communicator (world - 1 ranks) finishes the epochs
  // with every sample committed exactly once.
  const auto dir = std::filesystem::temp_directory_path() / ("antdt-session-ckpt-" + std::to_string(world_size()));
  const std::int64_t n = 331;
  auto opt = dd_options(n, 24, 0);
  opt.max_epochs = 2;
  std::vector<std::vector<std::int64_t>> after_cut;
  {
    Session s(MPI_COMM_WORLD, opt);
    run_steps(s, 9);
    if (s.rank() == 0) {
      std::filesystem::remove_all(dir);
      CheckpointWriter w(dir.string(), s.step());
      s.save(w);
      w.commit();
    }
    after_cut = run_steps(s, 6);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  {
    Session s(MPI_COMM_WORLD, opt);
    std::optional<CheckpointReader> r;
    if (world_rank() == 0) r.emplace(*find_latest_checkpoint(dir.string()));
    s.restore(r ? &*r : nullptr);
    EXPECT_EQ(s.step(), 9);
    EXPECT_EQ(run_steps(s, 6), after_cut) << "a same-size resume consumes what the uninterrupted run did";
  }
  MPI_Barrier(MPI_COMM_WORLD);
  const int p = world_size();
  if (p < 2) return;
  MPI_Comm smaller = MPI_COMM_NULL;
  MPI_Comm_split(MPI_COMM_WORLD, world_rank() < p - 1 ? 0 : MPI_UNDEFINED, world_rank(), &smaller);
  if (smaller != MPI_COMM_NULL) {
    opt.emulation.speeds = slow_last(p - 1);
    Session s(smaller, opt);
    std::optional<CheckpointReader> r;
    if (world_rank() == 0) r.emplace(*find_latest_checkpoint(dir.string()));
    s.restore(r ? &*r : nullptr);
    EXPECT_EQ(s.size(), p - 1);
    EXPECT_EQ(static_cast<int>(s.plan().batch.size()), p - 1) << "re-planned for the new world";
    while (!s.finished()) {
      s.begin_step();
      s.end_step();
    }
    expect_exactly_once(s, n, 2);
    MPI_Comm_free(&smaller);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (world_rank() == 0) std::filesystem::remove_all(dir);
}

// A checkpoint whose saved plan breaks the plan invariant (it passes its checksum: written so)
// is refused on every rank with a CheckpointError that says what is wrong, instead of
// training with a batch that does not sum to B.
TEST(Session, RestoreRefusesASavedPlanThatBreaksTheInvariant) {
  const auto dir = std::filesystem::temp_directory_path() / ("antdt-session-badplan-" + std::to_string(world_size()));
  const auto opt = dd_options(97, 12, 20);
  if (world_rank() == 0) std::filesystem::remove_all(dir);
  {
    Session s(MPI_COMM_WORLD, opt);
    run_steps(s, 3);
    if (s.rank() == 0) {
      const auto good_dir = dir / "good";
      CheckpointWriter w(good_dir.string(), s.step());
      s.save(w);
      const CheckpointReader good(w.commit());
      // The same checkpoint, with one more sample on rank 0 than the plan's B allows.
      Plan bad = s.plan();
      bad.batch[0] += 1;
      update_accumulation(bad);
      detail::ByteWriter plan_bytes;
      encode_plan(bad, plan_bytes);
      plan_bytes.put<std::uint8_t>(0);  // no pending plan
      CheckpointWriter copy(dir.string(), s.step());
      for (const char* name : {"antdt/dds", "antdt/controller"}) copy.put_bytes(name, good.bytes(name));
      copy.put_bytes("antdt/plan", plan_bytes.bytes());
      for (const char* name : {"antdt/step", "antdt/world_size", "antdt/dataset_size", "antdt/global_batch",
                               "antdt/completed_epochs", "antdt/committed_total"}) {
        copy.put_int64(name, good.int64(name));
      }
      copy.put_uint64s("antdt/seeds", good.uint64s("antdt/seeds"));
      copy.put_string("antdt/policy", good.string("antdt/policy"));
      copy.commit();
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
  Session s(MPI_COMM_WORLD, opt);
  std::optional<CheckpointReader> r;
  if (world_rank() == 0) r.emplace(*find_latest_checkpoint(dir.string()));
  try {
    s.restore(r ? &*r : nullptr);
    ADD_FAILURE() << "a plan that breaks the invariant was restored";
  } catch (const CheckpointError& e) {
    if (world_rank() == 0) {
      // One rank: "batch 13 outside [0, global batch]"; more: "batches do not sum to the global batch".
      const std::string what = e.what();
      EXPECT_NE(what.find("the saved plan is invalid: "), std::string::npos) << what;
      EXPECT_NE(what.find("global batch"), std::string::npos) << what;
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (world_rank() == 0) std::filesystem::remove_all(dir);
}

TEST(Session, BadOptionsAreUsageErrors) {
  SessionOptions o;
  o.dataset_size = 0;
  o.global_batch = 4;
  o.max_steps = 1;
  EXPECT_THROW(Session(MPI_COMM_WORLD, o), UsageError);
  o.dataset_size = 10;
  o.max_steps = 0;
  EXPECT_THROW(Session(MPI_COMM_WORLD, o), UsageError) << "neither steps nor epochs";
  o.max_steps = 1;
  o.emulation.speeds = std::vector<double>(static_cast<std::size_t>(world_size() + 1), 1.0);
  EXPECT_THROW(Session(MPI_COMM_WORLD, o), UsageError) << "one speed per rank";
  o.emulation.speeds.clear();
  o.first_chunk = 1.0;
  EXPECT_THROW(Session(MPI_COMM_WORLD, o), UsageError) << "a first chunk of the whole share leaves no tail";
  o.first_chunk = std::nan("");
  EXPECT_THROW(Session(MPI_COMM_WORLD, o), UsageError);
  o.first_chunk = 0.0;
  // Past kExactCountMaxRanks ranks the reduced count is exact only up to 2^24 samples per step.
  o.emulation.speeds.clear();
  o.global_batch = (std::int64_t{1} << 24) + 1;
  EXPECT_NO_THROW(detail::validate_session_options(o, static_cast<int>(kExactCountMaxRanks)));
  EXPECT_THROW(detail::validate_session_options(o, static_cast<int>(kExactCountMaxRanks) + 1), UsageError);
  o.global_batch = std::int64_t{1} << 24;
  EXPECT_NO_THROW(detail::validate_session_options(o, static_cast<int>(kExactCountMaxRanks) + 1));
}

TEST(Session, DevicePriorsSeedTheFirstSplit) {
  const int p = world_size();
  if (p < 2) GTEST_SKIP() << "needs two ranks to split unevenly";
  SessionOptions o;
  o.dataset_size = 1000;
  o.global_batch = 60;
  o.max_steps = 1;
  o.controller.policy = "dd";
  o.device_prior = world_rank() == p - 1 ? 0.5 : 1.0;  // e.g. an older GPU generation last
  Session s(MPI_COMM_WORLD, o);
  const auto& b = s.plan().batch;
  EXPECT_EQ(std::accumulate(b.begin(), b.end(), std::int64_t{0}), 60);
  EXPECT_NEAR(static_cast<double>(b.back()) / static_cast<double>(b.front()), 0.5, 0.1)
      << "the slower generation gets about half the share before any step ran";
  o.controller.policy = "static";
  Session equal(MPI_COMM_WORLD, o);
  EXPECT_EQ(equal.plan().batch.front() - equal.plan().batch.back(), 60 % p ? 1 : 0) << "static ignores priors";
}

TEST(Session, LastEpochEndsWithoutALongTailOnTheSlowRank) {
  // Grants are cut to each rank's prefetch target, so the slow rank never holds a whole
  // shard that everyone else waits for once the last epoch has no TODO left.
  if (world_size() < 2) GTEST_SKIP() << "needs a slow rank";
  const std::int64_t n = 2000, batch = 64;
  auto opt = dd_options(n, batch, 0);
  opt.max_epochs = 2;
  opt.shard_size = 500;  // large shards on purpose
  Session s(MPI_COMM_WORLD, opt);
  std::int64_t steps = 0;
  while (!s.finished()) {
    s.begin_step();
    s.end_step();
    ++steps;
  }
  expect_exactly_once(s, n, 2);
  EXPECT_LE(steps, ceil_div(2 * n, batch) + 3) << "steps beyond the full-batch minimum are the epoch-end tail";
}

TEST(Session, AStopAskedOnOneRankEndsTheRunOnEveryRankAtThatStep) {
  // A signal reaches one rank (say the last): it asks to stop during step 3, and every rank's
  // run ends after step 3 with stopped() true, none after a later step.
  const int p = world_size();
  auto opt = dd_options(4000, 64, 50);
  Session s(MPI_COMM_WORLD, opt);
  std::vector<float> g(3, 1.0f);
  while (!s.finished()) {
    StepWork w = s.begin_step();
    if (s.step() == 3 && s.rank() == p - 1) s.request_stop();
    (void)s.reduce(g, static_cast<std::int64_t>(w.samples.size()));
    s.end_step();
  }
  EXPECT_TRUE(s.stopped());
  EXPECT_FALSE(s.restart_requested());
  EXPECT_EQ(s.step(), 4) << "the run ends after the step in which the stop was asked";
  EXPECT_EQ(s.samples_committed(), 4 * 64) << "the stopped step's samples are committed: nothing lost";
}

TEST(Session, ARankThatWaitsSleepsInsteadOfSpinning) {
  // Rank 0 is slow by 1 s before its reduction; the others wait for it in the reduction. Their
  // CPU time over that wait stays a small part of it (a blocking collective would spin all of it).
  const int p = world_size();
  if (p < 2) GTEST_SKIP() << "needs a rank to wait for";
  auto opt = dd_options(4000, 64, 1);
  Session s(MPI_COMM_WORLD, opt);
  std::vector<float> g(3, 1.0f);
  StepWork w = s.begin_step();
  if (s.rank() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1000));
  const std::clock_t cpu0 = std::clock();
  const auto t0 = std::chrono::steady_clock::now();
  (void)s.reduce(g, static_cast<std::int64_t>(w.samples.size()));
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double cpu = static_cast<double>(std::clock() - cpu0) / CLOCKS_PER_SEC;
  s.end_step();
  if (s.rank() != 0) {
    EXPECT_GT(wall, 0.5) << "this rank did wait for rank 0";
    EXPECT_LT(cpu, 0.25 * wall) << "a waiting rank idles: " << cpu << " s of CPU in " << wall << " s";
  }
}
