// The step protocol's pure core, driven directly with no MPI (docs/protocol.md): the
// StepCoordinator (rank 0) and Agents (every rank) with virtual clocks, and the messages
// between them.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <numeric>
#include <optional>
#include <utility>
#include <vector>

#include "agent/agent.hpp"
#include "antdt/error.hpp"
#include "core/bytes.hpp"
#include "core/plan_rules.hpp"
#include "core/saved_state.hpp"
#include "dds/wire.hpp"
#include "protocol/step_coordinator.hpp"
#include "protocol/step_messages.hpp"

using namespace antdt;
using protocol::ReplyStatus;
using protocol::StepCoordinator;
using protocol::StepDecision;
using protocol::StepReply;
using protocol::StepReport;

namespace {

// A job of `speeds.size()` ranks on the virtual device, driven step by step like the Session.
struct Job {
  dds::LedgerOptions ledger;
  protocol::StepCoordinatorOptions options;
  EmulationOptions emulation;
  std::vector<agent::VirtualClock> clocks;
  std::vector<agent::Agent> agents;
  std::unique_ptr<StepCoordinator> coordinator;

  Job(std::vector<double> speeds, std::int64_t n, std::int64_t batch, std::int64_t epochs, const std::string& policy,
      int backup_workers = 0, EmulationOptions extra = {}, std::int64_t cap = 5, double first_chunk = 0.0,
      PoolMechanism mechanism = PoolMechanism::counter)
      : emulation(std::move(extra)), clocks(speeds.size()) {
    const int p = static_cast<int>(speeds.size());
    ledger.dataset_size = n;
    ledger.shard_size = 7;
    ledger.seed = 5;
    ledger.max_epochs = epochs;
    options.max_epochs = epochs;
    options.max_steps = epochs > 0 ? 0 : 60;
    options.dataset_size = n;
    options.data_seed = 5;
    options.controller.policy = policy;
    options.controller.world_size = p;
    options.controller.global_batch = batch;
    options.controller.caps.assign(speeds.size(), cap);  // accumulation above `cap` samples (5)
    options.controller.min_interval = 4;
    options.controller.window = 8;
    options.controller.persistence = 2;
    options.pool.pooled = policy_pools(policy);
    options.pool.backup_workers = backup_workers;
    options.pool.first_chunk = first_chunk;
    options.pool.mechanism = mechanism;
    emulation.speeds = std::move(speeds);
    emulation.virtual_seconds_per_sample = 1e-3;
    coordinator = std::make_unique<StepCoordinator>(options, ledger, equal_plan(batch, options.controller.caps));
    agents.reserve(clocks.size());
    for (int i = 0; i < p; ++i) {
      agents.emplace_back(i, p, ledger, emulation, clocks[static_cast<std::size_t>(i)], std::string(), options.pool);
      agents.back().reset_plan(std::make_shared<const Plan>(coordinator->plans().current()));
    }
    apply(coordinator->start());
  }

  void apply(const StepDecision& d) {
    for (std::size_t i = 0; i < agents.size(); ++i) (void)agents[i].apply(d.reply_for(static_cast<int>(i)), d.plan);
  }

  // A checkpoint of `other`'s coordinator (another job, maybe of another world size) becomes this
  // job's state, as Session::restore does it: every rank resumes where rank 0's order stands.
  void resume_from(const StepCoordinator& other) {
    detail::MemoryState saved;
    other.save(saved);
    coordinator = std::make_unique<StepCoordinator>(StepCoordinator::restore(saved, options, ledger));
    const protocol::ResumeState state = coordinator->resume_state();
    for (auto& a : agents) {
      a.reset_plan(coordinator->plans().current_ptr(), coordinator->plans().pending());
      a.resume(state, ledger);
    }
    apply(coordinator->start());
  }

  // Every rank's step, then rank 0's decision; returns it (not yet applied).
  StepDecision step(std::vector<std::vector<std::int64_t>>* used = nullptr) {
    std::vector<StepReport> reports;
    for (auto& a : agents) {
      const StepWork w = a.begin();
      EXPECT_EQ(std::accumulate(w.micro_batches.begin(), w.micro_batches.end(), std::int64_t{0}),
                static_cast<std::int64_t>(w.samples.size()));
      if (used) used->push_back(w.samples);
      a.mark_compute_done(0.0);
      reports.push_back(a.report(1.0, 0));
    }
    return coordinator->decide(reports);
  }
};

// Every completed epoch's indices committed once, by the coordinator's own coverage counter.
void expect_clean_coverage(const StepCoordinator& c) {
  for (const auto& e : c.dds().coverage()) {
    EXPECT_EQ(e.missing, 0) << "epoch " << e.epoch;
    EXPECT_EQ(e.duplicated, 0) << "epoch " << e.epoch;
  }
}

std::vector<std::byte> bytes_of(const StepReply& r) {
  detail::ByteWriter w;
  protocol::encode(r, w);
  return w.take();
}

}  // namespace

TEST(StepProtocol, AProbeMovesOffTheSplitInForceOnlyForMoreThanTheMinGain) {
  // Equal ranks measured 3 % apart by a short noisy probe: the split it would make
  // (260 / 252 of 512) is predicted to gain 1.4 %, under the 5 % min gain, so the equal split
  // stays; nothing is installed and no plan version is used up.
  Job equal({1, 1}, 10000, 512, 0, "dd", 0, {}, 1000);
  const std::int64_t version = equal.coordinator->plans().current().version;
  const Plan& kept = equal.coordinator->install_probe(std::vector<double>{1030.0, 1000.0}, {}, 3);
  EXPECT_EQ(kept.batch, (std::vector<std::int64_t>{256, 256}));
  EXPECT_EQ(kept.version, version);
  // A rank at half speed: the split gains 25 %, and it is installed.
  Job slow({1, 1}, 10000, 512, 0, "dd", 0, {}, 1000);
  const Plan& split = slow.coordinator->install_probe(std::vector<double>{1000.0, 500.0}, {}, 3);
  EXPECT_EQ(split.batch, (std::vector<std::int64_t>{341, 171}));
  EXPECT_EQ(slow.coordinator->plans().current().batch, split.batch);
  EXPECT_NE(split.reason.find("probe"), std::string::npos);
  // Just above the bar: x = 1000 / 900 puts the equal split's step at 256 / 900 s and the
  // probed one's at about 512 / 1900 s, a 5.2 % gain: installed.
  Job near({1, 1}, 10000, 512, 0, "dd", 0, {}, 1000);
  EXPECT_NE(near.coordinator->install_probe(std::vector<double>{1000.0, 900.0}, {}, 3).batch,
            (std::vector<std::int64_t>{256, 256}));
  // Static keeps its split whatever the probe says.
  Job fixed({1, 1}, 10000, 512, 0, "static", 0, {}, 1000);
  EXPECT_EQ(fixed.coordinator->install_probe(std::vector<double>{1000.0, 500.0}, {}, 3).batch,
            (std::vector<std::int64_t>{256, 256}));
}

TEST(StepProtocol, TheSameReportsGiveTheSameDecisions) {
  Job a({1, 1, 0.33}, 500, 30, 0, "dd"), b({1, 1, 0.33}, 500, 30, 0, "dd");
  std::int64_t plans = 0;
  while (!a.coordinator->finished()) {
    const StepDecision da = a.step(), db = b.step();
    ASSERT_EQ(da.reply.status, ReplyStatus::ok) << da.reply.error;
    for (int r = 0; r < 3; ++r) EXPECT_EQ(bytes_of(da.reply_for(r)), bytes_of(db.reply_for(r)));
    ASSERT_EQ(da.plan != nullptr, db.plan != nullptr);
    if (da.plan) {
      EXPECT_EQ(da.plan->batch, db.plan->batch);
      ++plans;
    }
    a.apply(da);
    b.apply(db);
  }
  EXPECT_GE(plans, 1) << "dd moved work off the slow rank";
  EXPECT_EQ(a.coordinator->plans().current().batch, b.coordinator->plans().current().batch);
  EXPECT_LT(a.coordinator->plans().current().batch[2], a.coordinator->plans().current().batch[0]);
}

TEST(StepProtocol, EverySampleOncePerEpochAndEveryRankSwitchesPlansAtItsEffectiveStep) {
  const std::int64_t n = 211;
  Job job({1, 0.5, 1, 0.25}, n, 24, 3, "dd");
  std::vector<std::int64_t> seen(static_cast<std::size_t>(n), 0);
  std::int64_t switched = 0;
  while (!job.coordinator->finished()) {
    std::vector<std::vector<std::int64_t>> used;
    const std::int64_t step = job.agents[0].step();
    const StepDecision d = job.step(&used);
    ASSERT_EQ(d.reply.status, ReplyStatus::ok) << d.reply.error;
    for (const auto& u : used)
      for (auto i : u) ++seen[static_cast<std::size_t>(i)];
    // The record describes the plan every rank ran under.
    for (const auto& a : job.agents) EXPECT_EQ(a.plan().version, d.record->plan_version);
    if (d.plan) {
      EXPECT_EQ(d.plan->effective_step, step + 1);
      ++switched;
    }
    job.apply(d);
  }
  EXPECT_GE(switched, 1);
  EXPECT_EQ(seen, std::vector<std::int64_t>(static_cast<std::size_t>(n), 3));
  for (const auto& c : job.coordinator->dds().coverage()) {
    EXPECT_EQ(c.committed, n);
    EXPECT_EQ(c.missing, 0);
    EXPECT_EQ(c.duplicated, 0);
  }
  for (const auto& a : job.agents) EXPECT_TRUE(a.finished());
}

TEST(StepProtocol, AReportOutOfLockstepIsRejectedAndChangesNothing) {
  Job job({1, 1}, 100, 8, 0, "static"), twin({1, 1}, 100, 8, 0, "static");
  std::vector<StepReport> reports;
  for (auto& a : job.agents) {
    (void)a.begin();
    reports.push_back(a.report(0.0, 0));
  }
  for (auto& a : twin.agents) (void)a.begin();
  auto late = reports;
  late[1].step = 7;
  const StepDecision bad = job.coordinator->decide(late);
  EXPECT_EQ(bad.reply.status, ReplyStatus::error);
  EXPECT_NE(bad.reply.error.find("rank 1 is at step 7"), std::string::npos) << bad.reply.error;
  auto greedy = reports;
  greedy[0].consumed = 1000;  // more than rank 0 held
  const StepDecision refused = job.coordinator->decide(greedy);
  EXPECT_EQ(refused.reply.status, ReplyStatus::error);
  EXPECT_NE(refused.reply.error.find("rank 0 reports 1000 samples consumed"), std::string::npos) << refused.reply.error;
  EXPECT_THROW((void)job.agents[0].apply(refused.reply_for(0)), Error) << "the rank throws what rank 0 sent";
  // Nothing was committed or decided: the good reports give what they give a fresh twin.
  std::vector<StepReport> twin_reports;
  for (auto& a : twin.agents) twin_reports.push_back(a.report(0.0, 0));
  const StepDecision good = job.coordinator->decide(reports), expected = twin.coordinator->decide(twin_reports);
  ASSERT_EQ(good.reply.status, ReplyStatus::ok);
  for (int r = 0; r < 2; ++r) EXPECT_EQ(bytes_of(good.reply_for(r)), bytes_of(expected.reply_for(r)));
  EXPECT_EQ(job.coordinator->committed_total(), 8);
}

TEST(StepProtocol, AReplyHoldsNothingPerRankAndItsSizeDoesNotGrowWithTheRanks) {
  std::vector<std::size_t> sizes;
  for (const int p : {1, 8, 64, 512}) {
    Job job(std::vector<double>(static_cast<std::size_t>(p), 1.0), 100000, 16L * p, 0, "static");
    const StepDecision d = job.step();
    ASSERT_EQ(d.reply.status, ReplyStatus::ok) << d.reply.error;
    EXPECT_TRUE(d.reply.undone.empty()) << "every rank trained its slice";
    EXPECT_EQ(d.reply.next_position, 16L * p) << "the next step starts B positions on";
    sizes.push_back(protocol::encoded_size(d.reply));
    job.apply(d);  // every rank's own stream moved past the step, as rank 0's did
  }
  EXPECT_EQ(sizes.front(), sizes.back()) << "a reply at 512 ranks is as large as at 1";
}

TEST(StepProtocol, AStopAskedByOneRankEndsTheRunForAllAtThatStepAndAResumeGoesOn) {
  Job job({1, 1, 0.33}, 500, 30, 0, "dd");
  for (int s = 0; s < 3; ++s) job.apply(job.step());
  job.agents[2].request_stop();  // a signal reached rank 2 during step 3
  const StepDecision d = job.step();
  ASSERT_EQ(d.reply.status, ReplyStatus::ok) << d.reply.error;
  EXPECT_TRUE(d.reply.stopped);
  EXPECT_TRUE(d.reply.finished);
  EXPECT_FALSE(d.reply.restart);
  job.apply(d);
  for (const auto& a : job.agents) {
    EXPECT_TRUE(a.finished() && a.stopped()) << "rank " << a.rank();
    EXPECT_EQ(a.step(), 4);
    EXPECT_EQ(a.committed_total(), 4 * 30) << "the stopped step's samples are committed";
  }
  EXPECT_TRUE(job.coordinator->stopped());
  EXPECT_EQ(job.coordinator->resume_state().finished, false) << "a stop is not the end of the run: it resumes";
}

TEST(StepProtocol, AgentMisuseIsAUsageError) {
  Job job({1}, 20, 4, 1, "static");
  auto& a = job.agents[0];
  EXPECT_THROW((void)a.report(0.0, 0), UsageError) << "end_step without begin_step";
  (void)a.begin();
  EXPECT_THROW((void)a.begin(), UsageError) << "begin_step twice";
  (void)a.report(0.0, 0);
  job.apply(job.coordinator->decide(std::vector<StepReport>{a.report(0.0, 0)}));
  while (!a.finished()) job.apply(job.step());
  EXPECT_THROW((void)a.begin(), UsageError) << "begin_step after the run finished";
}

TEST(StepProtocol, TheAgentTimesEmulatedComputeOnItsClock) {
  Job job({0.25}, 1000, 40, 0, "static");
  auto& a = job.agents[0];
  job.clocks[0].set(10.0);
  (void)a.begin();
  job.clocks[0].wait(0.002);  // reading the batch
  a.mark_data_ready();
  a.mark_compute_done(0.0);
  const StepReport r = a.report(0.0, 0);
  EXPECT_NEAR(r.data_wait_seconds, 0.002, 1e-12);
  EXPECT_DOUBLE_EQ(r.compute_seconds, 40 * 1e-3 / 0.25) << "b * c / speed, waited out on the virtual clock";
  EXPECT_NEAR(job.clocks[0].now(), 10.0 + 0.002 + 0.16, 1e-12);
  EXPECT_EQ(r.micro_steps, 8) << "40 samples under a cap of 5";
}

TEST(StepProtocol, MessagesRoundTripAndRefuseAnotherVersion) {
  StepReply reply;
  reply.ends_step = true;
  reply.plan_follows = true;
  reply.error = "none";
  reply.samples = 77;
  reply.loss_sum = 3.5;
  reply.next_position = 1234;
  reply.undone = {{3, 9}, {12, 20}};
  detail::ByteWriter w;
  protocol::encode(reply, w);
  EXPECT_EQ(w.bytes().size(), protocol::encoded_size(reply));
  detail::ByteReader r(w.bytes());
  const StepReply back = protocol::decode_reply(r);
  EXPECT_TRUE(r.done());
  EXPECT_EQ(bytes_of(back), w.bytes());
  EXPECT_EQ(back.undone, reply.undone);
  EXPECT_EQ(back.next_position, 1234);
  auto other = w.take();
  other[0] = std::byte{StepReply::kVersion + 1};
  detail::ByteReader bad(other);
  EXPECT_THROW((void)protocol::decode_reply(bad), Error);
  other[0] = std::byte{StepReply::kVersion};
  other[2 + reply.error.size() + 8] = std::byte{2};  // ends_step is a flag: 2 is not one
  detail::ByteReader flag(other);
  EXPECT_THROW((void)protocol::decode_reply(flag), Error);
}

namespace {

// Job, pooled: every rank claims micro-chunks from one counter, in the order of the ranks'
// virtual times, as the simulator does.
struct PooledJob : Job {
  agent::CounterPool pool;
  bool by_deadline = false;
  std::vector<std::vector<std::int64_t>> chunks;  // the last step's chunk sizes, per rank
  double step_seconds = 0.0;                      // the last step's compute span: the latest rank's end

  std::vector<bool> modes;     // per step: whether every rank ran it pooled
  double chunk_seconds = 0.0;  // what a chunk's claim and read cost its rank, besides its compute

  PooledJob(std::vector<double> speeds, std::int64_t n, std::int64_t batch, std::int64_t epochs, int backup,
            EmulationOptions extra = {}, std::int64_t cap = 5, double first_chunk = 0.0,
            const std::string& policy = "nd", PoolMechanism mechanism = PoolMechanism::counter)
      : Job(std::move(speeds), n, batch, epochs, policy, backup, std::move(extra), cap, first_chunk, mechanism),
        by_deadline(mechanism == PoolMechanism::deadline) {}

  // One step, pooled when its plan says so (nd: always); `done[r]`: what rank r trained.
  StepDecision step_pooled(std::vector<std::vector<std::int64_t>>* done = nullptr) {
    pool.reset();
    chunks.assign(agents.size(), {});
    if (done) done->assign(agents.size(), {});
    std::vector<bool> finished(agents.size(), false);
    std::vector<StepWork> work;
    for (std::size_t i = 0; i < agents.size(); ++i) {
      clocks[i].set(0.0);
      work.push_back(agents[i].begin());
      EXPECT_EQ(work.back().pooled, work.front().pooled) << "every rank runs a step in the same mode";
    }
    const bool pooled = work.front().pooled;
    EXPECT_EQ(pooled, coordinator->controller().plan_at(coordinator->step()).pooled) << "the plan's mode";
    if (options.controller.policy == "nd") {
      EXPECT_TRUE(pooled);
    }
    modes.push_back(pooled);
    for (std::size_t i = 0; !pooled && i < agents.size(); ++i) {
      if (done) (*done)[i] = work[i].samples;
      agents[i].mark_compute_done(0.0);
      finished[i] = true;
    }
    for (std::size_t left = pooled ? agents.size() : 0; left > 0;) {
      // The rank whose virtual clock is earliest claims next.
      std::size_t i = agents.size();
      for (std::size_t k = 0; k < agents.size(); ++k)
        if (!finished[k] && (i == agents.size() || clocks[k].now() < clocks[i].now())) i = k;
      const auto chunk = agents[i].next_chunk(by_deadline ? nullptr : &pool);
      if (chunk.empty()) {
        agents[i].mark_compute_done();
        finished[i] = true;
        --left;
        continue;
      }
      EXPECT_LE(static_cast<std::int64_t>(chunk.size()), options.controller.caps[i]) << "a chunk fits the cap";
      if (done) (*done)[i].insert((*done)[i].end(), chunk.begin(), chunk.end());
      chunks[i].push_back(static_cast<std::int64_t>(chunk.size()));
      clocks[i].wait(chunk_seconds);  // its claim and read
      agents[i].chunk_done(0.0);
    }
    step_seconds = 0.0;
    for (auto& c : clocks) step_seconds = std::max(step_seconds, c.now());
    std::vector<StepReport> reports;
    for (auto& a : agents) reports.push_back(a.report(0.0, 0));
    StepDecision d = coordinator->decide(reports);
    if (twin && d.record) {  // a Controller restored from a checkpoint decides the same steps the same way
      const std::optional<Plan> t = twin->on_step(d.record->step, d.record->ranks);
      EXPECT_EQ(t.has_value(), d.plan != nullptr) << "step " << d.record->step;
      if (t && d.plan) {
        EXPECT_EQ(t->batch, d.plan->batch);
        EXPECT_EQ(t->pooled, d.plan->pooled);
        EXPECT_EQ(t->reason, d.plan->reason);
      }
    }
    return d;
  }
  std::unique_ptr<Controller> twin;
};

}  // namespace

// auto (docs/controller.md): a run that is steady, then has transient bursts, then is steady
// again. The step mode is each plan's decision: every rank runs every step in the mode of the
// plan in force, the switches happen at the plans' effective steps, and every sample is still
// trained exactly once per epoch across them.
TEST(StepProtocol, AutoSwitchesTheStepModeAtThePlansEffectiveStepOnEveryRankAndKeepsEverySampleOnce) {
  const std::int64_t n = 2003;
  EmulationOptions bursts;
  parse_transient("0.25,4,1,50,100", bursts);
  bursts.seed = 7;
  bursts.virtual_seconds_per_sample = 1e-3;
  PooledJob job({1, 1, 1, 1}, n, 40, 3, 1, bursts, 5, 0.0, "auto");
  job.chunk_seconds = 5e-4;  // 10 % of a chunk of 5: pooling costs something
  std::vector<std::int64_t> seen(static_cast<std::size_t>(n), 0);
  while (!job.coordinator->finished()) {
    std::vector<std::vector<std::int64_t>> done;
    const StepDecision d = job.step_pooled(&done);
    ASSERT_EQ(d.reply.status, ReplyStatus::ok) << d.reply.error;
    if (job.modes.back() && !d.reply.finished) {
      EXPECT_EQ(d.reply.samples, 40) << "a pooled step does exactly B";
    }
    for (const auto& r : done)
      for (auto i : r) ++seen[static_cast<std::size_t>(i)];
    job.apply(d);
  }
  EXPECT_EQ(seen, std::vector<std::int64_t>(static_cast<std::size_t>(n), 3));
  for (const auto& c : job.coordinator->dds().coverage()) {
    EXPECT_EQ(c.missing, 0);
    EXPECT_EQ(c.duplicated, 0);
  }
  // Pooled from the start, plain once the claims are measured to cost more, pooled in the
  // bursts, plain after them.
  std::vector<std::pair<std::size_t, bool>> switches;
  for (std::size_t s = 1; s < job.modes.size(); ++s)
    if (job.modes[s] != job.modes[s - 1]) switches.emplace_back(s, job.modes[s]);
  EXPECT_TRUE(job.modes.front());
  ASSERT_GE(switches.size(), 3U);
  EXPECT_FALSE(switches[0].second);
  EXPECT_LT(switches[0].first, 50U);
  EXPECT_TRUE(switches[1].second);
  EXPECT_GT(switches[1].first, 50U);
  EXPECT_LT(switches[1].first, 70U);
  EXPECT_FALSE(switches.back().second);
  EXPECT_GT(switches.back().first, 100U);
  const PoolingStatus status = job.coordinator->controller().pooling_status();
  EXPECT_EQ(status.switches.size(), switches.size());
}

// A coordinator restored from a checkpoint of an auto run (its ring of steps, o, e, damping and
// switches) decides exactly as the one that never stopped, through the switches.
TEST(StepProtocol, AnAutoRunResumesFromACheckpointExactly) {
  EmulationOptions bursts;
  parse_transient("0.25,4,1,30,60", bursts);
  bursts.seed = 7;
  bursts.virtual_seconds_per_sample = 1e-3;
  PooledJob job({1, 1, 1, 0.5}, 2000, 40, 3, 1, bursts, 5, 0.0, "auto");
  job.chunk_seconds = 5e-4;
  for (int s = 0; s < 40; ++s) job.apply(job.step_pooled());
  job.twin = std::make_unique<Controller>(
      Controller::restore(job.coordinator->controller().serialize(), job.options.controller));
  while (!job.coordinator->finished()) job.apply(job.step_pooled());
  EXPECT_EQ(job.twin->serialize(), job.coordinator->controller().serialize());
  const auto switches = job.coordinator->controller().pooling_status().switches;
  ASSERT_FALSE(switches.empty());
  EXPECT_GT(switches.back().step, 40) << "a switch after the checkpoint";
}

TEST(StepProtocol, APooledStepDoesExactlyBSamplesWhoeverDidThem) {
  // Rank 2 is slowed 3x in one step in three: it claims less then, the others more.
  EmulationOptions slow;
  slow.schedule = parse_schedule("2:0:0.33,2:1:1,2:3:0.33,2:4:1");
  PooledJob job({1, 1, 1, 1, 1}, 2000, 100, 0, 1, slow);
  std::vector<std::int64_t> slowed_did, nominal_did;
  for (int s = 0; s < 6; ++s) {
    std::vector<std::vector<std::int64_t>> done;
    const StepDecision d = job.step_pooled(&done);
    ASSERT_EQ(d.reply.status, ReplyStatus::ok) << d.reply.error;
    EXPECT_EQ(d.reply.samples, 100) << "exactly B samples in step " << s;
    (s % 3 == 0 ? slowed_did : nominal_did).push_back(static_cast<std::int64_t>(done[2].size()));
    job.apply(d);
  }
  for (auto n : slowed_did) EXPECT_LT(n, 12) << "a slowed rank claims fewer than its 20";
  for (auto n : nominal_did) EXPECT_GE(n, 18);
}

TEST(StepProtocol, APooledStepWithAFirstChunkBalancesOnlyItsTail) {
  // --nd-first-chunk 0.75: each rank's first chunk of a step is 3/4 of its share (75 of 100),
  // one large GEMM on real compute; only the last quarter is claimed in small chunks. Rank 2
  // is slowed 3x in steps 4 and 5.
  EmulationOptions slow;
  slow.schedule = parse_schedule("2:4:0.33,2:6:1");
  PooledJob front({1, 1, 1, 1}, 100000, 400, 0, 1, slow, 1000, 0.75);
  PooledJob usual({1, 1, 1, 1}, 100000, 400, 0, 1, slow, 1000, 0.0);
  for (int s = 0; s < 6; ++s) {
    const StepDecision d = front.step_pooled();
    const StepDecision u = usual.step_pooled();
    ASSERT_EQ(d.reply.status, ReplyStatus::ok) << d.reply.error;
    EXPECT_EQ(d.reply.samples, 400) << "exactly B samples in step " << s;
    for (std::size_t r = 0; r < 4; ++r) {
      ASSERT_FALSE(front.chunks[r].empty());
      EXPECT_EQ(front.chunks[r][0], 75) << "step " << s << " rank " << r << ": the first chunk is 0.75 of 100";
      for (std::size_t k = 1; k < front.chunks[r].size(); ++k)
        EXPECT_LE(front.chunks[r][k], 13) << "the tail in chunks of at most ceil(100 / 8)";
      EXPECT_LE(usual.chunks[r][0], 13) << "without it, every chunk is the usual size";
    }
    if (s == 4) {
      // The slowed rank's 75 samples take 0.225 s, and nobody can take them from it: the cost
      // of a first chunk on a transient straggler, which the usual chunks avoid.
      EXPECT_NEAR(front.step_seconds, 75 * 1e-3 / 0.33, 1e-3);
      EXPECT_LT(usual.step_seconds, 0.75 * front.step_seconds);
      EXPECT_EQ(front.chunks[2].size(), 1U) << "the others drained the tail meanwhile";
    }
    front.apply(d);
    usual.apply(u);
  }
}

// A rank under a CPU quota (set_capped) claims its own share of a pooled step and no more, in
// chunks as large as its cap allows, as under dd: claiming until the pool drains would spend its
// quota, and the kernel would stop it while it holds a chunk that every rank waits for. The others
// pool the rest, so the step still does exactly B, and every sample stays once per epoch.
TEST(StepProtocol, ARankUnderACpuQuotaClaimsItsOwnShareOfAPooledStepAndTheOthersPoolTheRest) {
  const std::int64_t n = 4000;
  PooledJob job({1, 0.25, 1}, n, 120, 2, 1, {}, 1000);
  PooledJob greedy({1, 0.25, 1}, n, 120, 2, 1, {}, 1000);
  job.agents[1].set_capped(true);
  std::vector<std::int64_t> seen(static_cast<std::size_t>(n), 0);
  std::int64_t first_share = -1, last_share = -1;
  for (int s = 0; !job.coordinator->finished(); ++s) {
    std::vector<std::vector<std::int64_t>> done;
    const StepDecision d = job.step_pooled(&done);
    const std::int64_t share = job.agents[1].plan().batch[1];  // the plan of the step that ran
    ASSERT_EQ(d.reply.status, ReplyStatus::ok) << d.reply.error;
    if (!d.reply.finished) {
      EXPECT_EQ(d.reply.samples, 120) << "step " << s << ": exactly B";
      EXPECT_EQ(job.chunks[1], std::vector<std::int64_t>{share}) << "step " << s << ": its share, in one chunk";
      EXPECT_GT(job.chunks[0].size(), 1U) << "step " << s << ": the others pool";
    }
    if (first_share < 0) first_share = share;
    last_share = share;
    for (const auto& r : done)
      for (auto i : r) ++seen[static_cast<std::size_t>(i)];
    job.apply(d);
  }
  EXPECT_EQ(seen, std::vector<std::int64_t>(static_cast<std::size_t>(n), 2));
  expect_clean_coverage(*job.coordinator);
  EXPECT_EQ(first_share, 40);
  EXPECT_LT(last_share, 25) << "its share follows its measured speed, as under dd";
  // Without a quota the same rank claims small chunks as long as the pool lasts.
  const StepDecision g = greedy.step_pooled();
  ASSERT_EQ(g.reply.status, ReplyStatus::ok) << g.reply.error;
  EXPECT_GT(greedy.chunks[1].size(), 1U);
  EXPECT_LE(greedy.chunks[1][0], 5) << "about 40 / 8";
}

TEST(StepProtocol, PooledStepsKeepEverySampleOncePerEpoch) {
  const std::int64_t n = 331;
  EmulationOptions noisy;
  noisy.transient_probability = 0.3;
  noisy.transient_factor = 4;
  noisy.transient_steps = 1;
  noisy.seed = 3;
  for (const double first_chunk : {0.0, 0.6}) {  // the usual chunks, and a large first one
    PooledJob job({1, 0.5, 1, 1}, n, 36, 3, 1, noisy, 5, first_chunk);
    std::vector<std::int64_t> seen(static_cast<std::size_t>(n), 0);
    while (!job.coordinator->finished()) {
      std::vector<std::vector<std::int64_t>> done;
      const StepDecision d = job.step_pooled(&done);
      ASSERT_EQ(d.reply.status, ReplyStatus::ok) << d.reply.error;
      for (const auto& r : done)
        for (auto i : r) ++seen[static_cast<std::size_t>(i)];
      job.apply(d);
    }
    EXPECT_EQ(seen, std::vector<std::int64_t>(static_cast<std::size_t>(n), 3)) << "first chunk " << first_chunk;
    expect_clean_coverage(*job.coordinator);
  }
}

TEST(StepProtocol, APooledStepByDeadlineStopsEachRankAtThePredictedComputeTime) {
  EmulationOptions slow;
  slow.schedule = parse_schedule("2:8:0.33,2:9:1");  // rank 2 is 3x slower in step 8 only
  PooledJob job({1, 1, 1, 1, 1}, 100000, 100, 0, 1, slow, 5, 0.0, "nd", PoolMechanism::deadline);
  for (int s = 0; s < 12; ++s) {
    std::vector<std::vector<std::int64_t>> done;
    const StepDecision d = job.step_pooled(&done);
    ASSERT_EQ(d.reply.status, ReplyStatus::ok) << d.reply.error;
    if (s < 4) {  // no deadline before the Monitor has timed every rank: each does its share
      for (const auto& r : done) EXPECT_EQ(r.size(), 20U) << "step " << s;
    } else if (s == 8) {
      EXPECT_LT(done[2].size(), 10U) << "the slowed rank stops at the deadline with what it finished";
      EXPECT_LT(d.reply.samples, 100) << "the step does fewer than B; the update stays exact over what was done";
      for (std::size_t r : {0U, 1U, 3U, 4U}) EXPECT_EQ(done[r].size(), 20U) << "the others stop at the deadline too";
    } else {
      EXPECT_EQ(d.reply.samples, 100) << "step " << s << ": at the usual speeds the deadline is B's compute time";
    }
    if (s >= 4) {
      EXPECT_NEAR(d.reply.deadline_seconds, 100 * 1e-3 / 5, 1e-9) << "B / sum x_i";
    }
    job.apply(d);
  }
}

namespace {

// The samples each step trained on, over all ranks, in rank order (the order of the step's
// batch for steps that are not pooled), and the same sorted (the set its update is over).
struct Steps {
  std::vector<std::vector<std::int64_t>> ordered, sorted;
  void add(const std::vector<std::vector<std::int64_t>>& by_rank) {
    std::vector<std::int64_t> all;
    for (const auto& r : by_rank) all.insert(all.end(), r.begin(), r.end());
    ordered.push_back(all);
    std::sort(all.begin(), all.end());
    sorted.push_back(all);
  }
};

Steps run_dedicated(Job& job, std::int64_t steps = -1) {
  Steps out;
  for (std::int64_t s = 0; !job.coordinator->finished() && s != steps; ++s) {
    std::vector<std::vector<std::int64_t>> used;
    const StepDecision d = job.step(&used);
    EXPECT_EQ(d.reply.status, ReplyStatus::ok) << d.reply.error;
    out.add(used);
    job.apply(d);
  }
  return out;
}

Steps run_pooled(PooledJob& job) {
  Steps out;
  while (!job.coordinator->finished()) {
    std::vector<std::vector<std::int64_t>> done;
    const StepDecision d = job.step_pooled(&done);
    EXPECT_EQ(d.reply.status, ReplyStatus::ok) << d.reply.error;
    out.add(done);
    job.apply(d);
  }
  return out;
}

}  // namespace

TEST(StepProtocol, AStepsSamplesDependOnTheDataOrderAloneNotOnThePolicyOrTheWorldSize) {
  // 211 samples in shards of 7, B = 24, three epochs: steps cross shards and epochs, and the
  // last step is short. Reference: one rank.
  const std::int64_t n = 211, b = 24;
  Job one({1}, n, b, 3, "static");
  const Steps reference = run_dedicated(one);
  ASSERT_EQ(static_cast<std::int64_t>(reference.sorted.size()), (3 * n + b - 1) / b);
  EXPECT_EQ(reference.sorted.back().size(), static_cast<std::size_t>(3 * n % b)) << "only max_epochs cuts a step";
  for (const std::size_t p : {2U, 3U, 4U}) {
    Job job(std::vector<double>(p, 1.0), n, b, 3, "static");
    EXPECT_EQ(run_dedicated(job).ordered, reference.ordered) << p << " ranks cut the same batch into slices";
  }
  // dd on uneven speeds changes the split mid-run: the slices move, the batches do not.
  Job dd({1, 0.5, 1, 0.25}, n, b, 3, "dd");
  EXPECT_EQ(run_dedicated(dd).ordered, reference.ordered);
  EXPECT_GE(dd.coordinator->controller().history().size(), 2U) << "dd changed the plan";
  // A counter pool: whoever claims a chunk, the chunks are the step's own positions.
  EmulationOptions noisy;
  noisy.transient_probability = 0.3;
  noisy.transient_factor = 4;
  noisy.transient_steps = 1;
  noisy.seed = 3;
  PooledJob nd({1, 0.5, 1}, n, b, 3, 1, noisy);
  EXPECT_EQ(run_pooled(nd).sorted, reference.sorted);
  EXPECT_EQ(nd.coordinator->altered_steps(), 0);
}

TEST(StepProtocol, AResumeOnAnotherWorldSizeRunsTheUncommittedStepsWithTheSameSamples) {
  const std::int64_t n = 211, b = 24;
  Job one({1}, n, b, 3, "static");
  const Steps reference = run_dedicated(one);
  for (const std::size_t after : {1U, 2U, 4U}) {
    Job before({1, 0.5, 1}, n, b, 3, "dd");
    Steps run = run_dedicated(before, 11);  // a checkpoint after step 10; the job then dies
    Job resumed(std::vector<double>(after, 1.0), n, b, 3, "dd");
    resumed.resume_from(*before.coordinator);
    const Steps rest = run_dedicated(resumed);
    run.ordered.insert(run.ordered.end(), rest.ordered.begin(), rest.ordered.end());
    EXPECT_EQ(run.ordered, reference.ordered) << "3 ranks, then " << after;
    expect_clean_coverage(*resumed.coordinator);
  }
}

TEST(StepProtocol, ADeadlinePoolCarriesWhatASlowedRankLeftUndoneIntoTheNextStep) {
  EmulationOptions slow;
  slow.schedule = parse_schedule("2:8:0.33,2:9:1");  // rank 2 is 3x slower in step 8 only
  PooledJob job({1, 1, 1, 1, 1}, 1000, 100, 2, 1, slow, 5, 0.0, "nd", PoolMechanism::deadline);
  const dds::ShardMap map(job.ledger);
  std::vector<std::int64_t> left;  // the samples of rank 2's slice it did not reach in step 8
  std::vector<std::int64_t> seen(1000, 0);
  std::int64_t short_steps = 0;
  for (std::int64_t s = 0; !job.coordinator->finished(); ++s) {
    std::vector<std::vector<std::int64_t>> done;
    const StepDecision d = job.step_pooled(&done);
    ASSERT_EQ(d.reply.status, ReplyStatus::ok) << d.reply.error;
    for (const auto& r : done)
      for (auto i : r) ++seen[static_cast<std::size_t>(i)];
    if (s == 8) {
      const auto c = static_cast<std::int64_t>(done[2].size());
      ASSERT_LT(c, 20);
      ASSERT_EQ(d.reply.undone, (std::vector<dds::BatchRange>{{40 + c, 60}})) << "the tail of rank 2's slice";
      for (std::int64_t p = 800 + 40 + c; p < 860; ++p) left.push_back(map.index_at(p));
    }
    if (s == 9) {
      // The carried positions come first in the next batch: rank 0's slice begins with them.
      ASSERT_GE(done[0].size(), left.size());
      EXPECT_TRUE(std::equal(left.begin(), left.end(), done[0].begin()));
      EXPECT_EQ(d.reply.samples, 100) << "and the step still holds B";
    }
    short_steps += d.reply.undone.empty() ? 0 : 1;
    job.apply(d);
  }
  EXPECT_EQ(seen, std::vector<std::int64_t>(1000, 2)) << "every sample once per epoch all the same";
  EXPECT_GE(short_steps, 1);
  EXPECT_EQ(job.coordinator->altered_steps(), short_steps);
}

namespace {

// Reply lag 1, driven as the Session drives it: each round sends rank 0's decision of the step
// before (made meanwhile) and, when the step settles, the step's own; a step no reply ends is
// passed. Returns the samples each step trained, and fills `settled` with the settled steps.
struct PipelinedRun {
  std::vector<std::int64_t> seen;                            // per sample: times trained
  std::vector<std::int64_t> settled;                         // the steps decided in their own round
  std::vector<std::pair<std::int64_t, std::int64_t>> plans;  // (decided at step, effective step)
  std::vector<std::int64_t> switched_at;                     // steps where rank 0's plan in force changed
};

void make_pipelined(Job& job) {
  job.options.pipelined = true;
  job.options.controller.plan_lag = 1;
  job.coordinator = std::make_unique<StepCoordinator>(
      job.options, job.ledger, equal_plan(job.options.controller.global_batch, job.options.controller.caps));
  job.apply(job.coordinator->start());
}

PipelinedRun run_pipelined(Job& job, std::int64_t n, const std::function<void(std::int64_t)>& before_report = {}) {
  PipelinedRun out;
  out.seen.assign(static_cast<std::size_t>(n), 0);
  std::optional<StepDecision> pending;
  bool settle_next = job.coordinator->start().reply.settle_next;
  std::int64_t version = job.agents[0].plan().version;
  while (!job.agents[0].finished()) {
    std::vector<StepReport> reports;
    const std::int64_t step = job.agents[0].step();
    for (auto& a : job.agents) {
      const StepWork w = a.begin();
      for (auto i : w.samples) ++out.seen[static_cast<std::size_t>(i)];
      EXPECT_EQ(w.plan_version, job.agents[0].plan().version) << "every rank runs step " << step << " on one plan";
      a.mark_compute_done(0.0);
    }
    if (job.agents[0].plan().version != version) out.switched_at.push_back(step);
    version = job.agents[0].plan().version;
    if (before_report) before_report(step);
    for (auto& a : job.agents) reports.push_back(a.report(1.0, 0));
    const bool settle =
        std::exchange(settle_next, false) || job.coordinator->settles(reports, pending ? &pending->reply : nullptr);
    if (pending) {
      EXPECT_EQ(pending->reply.step, step - 1) << "a pipelined reply comes one step late";
      job.apply(*pending);
      pending.reset();
    }
    if (settle) {
      const StepDecision d = job.coordinator->decide(reports, true);
      EXPECT_EQ(d.reply.status, ReplyStatus::ok) << d.reply.error;
      if (d.plan) out.plans.emplace_back(step, d.plan->effective_step);
      settle_next = d.reply.settle_next;
      job.apply(d);
      out.settled.push_back(step);
    } else {
      for (auto& a : job.agents) a.pass();
      StepDecision d = job.coordinator->decide(reports, false);
      EXPECT_EQ(d.reply.status, ReplyStatus::ok) << d.reply.error;
      EXPECT_FALSE(d.reply.finished || d.reply.stopped || d.reply.checkpoint) << "those come settled";
      if (d.plan) out.plans.emplace_back(step, d.plan->effective_step);
      pending = std::move(d);
    }
    if (job.coordinator->finished()) {
      EXPECT_FALSE(pending) << "the last step is settled";
    }
  }
  return out;
}

}  // namespace

TEST(StepProtocol, PipelinedEverySampleOncePerEpochPlansTwoStepsOnAndTheLastStepSettled) {
  const std::int64_t n = 211;
  Job job({1, 0.5, 1, 0.25}, n, 24, 3, "dd");
  make_pipelined(job);
  const PipelinedRun run = run_pipelined(job, n);
  EXPECT_EQ(run.seen, std::vector<std::int64_t>(static_cast<std::size_t>(n), 3));
  expect_clean_coverage(*job.coordinator);
  ASSERT_GE(run.plans.size(), 1U) << "dd moved work off the slow ranks";
  for (const auto& [decided, effective] : run.plans) EXPECT_EQ(effective, decided + 2) << "t + 1 + plan_lag";
  std::vector<std::int64_t> effective;
  for (const auto& p : run.plans) effective.push_back(p.second);
  EXPECT_EQ(run.switched_at, effective) << "every rank switched at each plan's effective step, none earlier";
  const std::int64_t steps = job.agents[0].step();
  EXPECT_EQ(steps, (3 * n + 23) / 24);
  ASSERT_EQ(run.settled.size(), 1U) << "only the last step waits for its decision";
  EXPECT_EQ(run.settled.back(), steps - 1);
  for (const auto& a : job.agents) EXPECT_TRUE(a.finished() && !a.stopped()) << "rank " << a.rank();
}

TEST(StepProtocol, PipelinedStopsAndCheckpointsComeAtTheStepAskedAsWithoutTheLag) {
  const std::int64_t n = 500;
  Job job({1, 1, 0.33}, n, 30, 0, "dd");
  make_pipelined(job);
  const PipelinedRun run = run_pipelined(job, n, [&](std::int64_t step) {
    if (step == 3) job.agents[1].request_checkpoint();
    if (step == 7) job.agents[2].request_stop();
  });
  EXPECT_EQ(run.settled, (std::vector<std::int64_t>{3, 7}));
  for (const auto& a : job.agents) {
    EXPECT_TRUE(a.finished() && a.stopped()) << "rank " << a.rank();
    EXPECT_EQ(a.step(), 8) << "the run ends after the step the stop was asked in";
    EXPECT_EQ(a.committed_total(), 8 * 30) << "every step that ended is committed";
  }
}

TEST(StepProtocol, PipelinedACheckpointJustBeforeTheLastStepStillEndsEveryRankAtTheLimit) {
  // Checkpoints settle steps 57 and 58: the reply that says step 59 is the last comes settled.
  for (const std::int64_t asked : {57, 58}) {
    Job job({1, 1}, 10000, 8, 0, "static");  // 60 steps (max_steps)
    make_pipelined(job);
    const PipelinedRun run = run_pipelined(job, 10000, [&](std::int64_t step) {
      if (step == asked) job.agents[0].request_checkpoint();
    });
    EXPECT_EQ(run.settled, (std::vector<std::int64_t>{asked, 59}));
    for (const auto& a : job.agents) EXPECT_EQ(a.step(), 60) << "rank " << a.rank() << ", checkpoint at " << asked;
  }
}

TEST(StepProtocol, PipelinedMisuseIsRefused) {
  Job job({1, 1}, 100, 8, 0, "static");
  make_pipelined(job);
  std::vector<StepReport> reports;
  for (auto& a : job.agents) {
    (void)a.begin();
    reports.push_back(a.report(0.0, 0));
  }
  auto stop = reports;
  stop[1].stop = true;
  const StepDecision refused = job.coordinator->decide(stop, false);
  EXPECT_EQ(refused.reply.status, ReplyStatus::error);
  EXPECT_NE(refused.reply.error.find("must be settled"), std::string::npos) << refused.reply.error;
  // A late reply must find every rank's order where rank 0's is.
  for (auto& a : job.agents) a.pass();
  StepDecision d = job.coordinator->decide(reports, false);
  ASSERT_EQ(d.reply.status, ReplyStatus::ok) << d.reply.error;
  auto wrong = d.reply;
  wrong.next_position += 1;
  EXPECT_THROW((void)job.agents[0].apply(wrong), Error);
  // A rank cannot pass a second step while the reply to the first is due.
  for (auto& a : job.agents) (void)a.begin();
  EXPECT_THROW(job.agents[1].pass(), Error);
  // A coordinator without plan_lag cannot pipeline: its plans would arrive after their step.
  auto options = job.options;
  options.controller.plan_lag = 0;
  EXPECT_THROW(StepCoordinator(options, job.ledger, equal_plan(8, options.controller.caps)), UsageError);
}

namespace {

// A virtual clock whose thread the test says the kernel held back (Clock::held).
class HeldClock final : public agent::Clock {
 public:
  [[nodiscard]] double now() override { return now_; }
  void wait(double seconds) override { now_ += std::max(0.0, seconds); }
  [[nodiscard]] double held() override { return held_; }
  [[nodiscard]] double cpu() override { return cpu_; }
  void run(double seconds) {  // the thread ran: it used the CPU
    now_ += seconds;
    cpu_ += seconds;
  }
  void hold(double seconds) {  // the thread wanted to run and could not
    now_ += seconds;
    held_ += seconds;
  }

 private:
  double now_ = 0.0, held_ = 0.0, cpu_ = 0.0;
};

// One rank under the static policy, B 20, on a HeldClock: for the tests of what a rank reports.
struct OneRank {
  static dds::LedgerOptions ledger_options() {
    dds::LedgerOptions ledger;
    ledger.dataset_size = 1000;
    ledger.shard_size = 10;
    ledger.seed = 5;
    return ledger;
  }
  static protocol::StepCoordinatorOptions coordinator_options() {
    protocol::StepCoordinatorOptions options;
    options.max_steps = 60;
    options.dataset_size = 1000;
    options.data_seed = 5;
    options.controller.policy = "static";
    options.controller.world_size = 1;
    options.controller.global_batch = 20;
    options.controller.caps.assign(1, 100);
    return options;
  }
  OneRank() {
    agent.reset_plan(std::make_shared<const Plan>(coordinator.plans().current()));
    (void)agent.apply(coordinator.start().reply_for(0));
  }
  // The open step, from its data ready: 10 ms of compute (held `compute_held` seconds inside
  // it), 1 ms of reduction, then held `waiting`; its report, decided and applied.
  StepReport compute_and_end_step(double compute_held, double waiting) {
    agent.mark_data_ready();
    clock.run(0.010);
    clock.hold(compute_held);
    agent.mark_compute_done();
    clock.run(0.001);
    clock.hold(waiting);
    const StepReport r = agent.report(0.0, 0);
    const std::vector<StepReport> reports{r};
    const StepDecision d = coordinator.decide(reports);
    (void)agent.apply(d.reply_for(0), d.plan);
    return r;
  }

  dds::LedgerOptions ledger = ledger_options();
  protocol::StepCoordinatorOptions options = coordinator_options();
  StepCoordinator coordinator{options, ledger, equal_plan(20, options.controller.caps)};
  HeldClock clock;
  agent::Agent agent{0, 1, ledger, EmulationOptions{}, clock};
};

}  // namespace

// A rank under a CPU quota is stopped wherever its quota runs out. The time it is held back in
// its compute is in its compute time already; the time outside it (its data, its update, its
// waits) is added to the compute time it reports, as the mean over its last 8 reports, so that
// the Monitor sees the rate the quota allows. A rank without a quota adds nothing.
TEST(StepProtocol, TimeTheKernelHoldsACappedRankBackOutsideItsComputeIsCountedAsItsOwn) {
  OneRank job;
  HeldClock& clock = job.clock;
  agent::Agent& a = job.agent;
  // One step: held `data` before its compute, `compute_held` inside it, `waiting` in its
  // reduction, `update` after it. Returns the compute time reported.
  const auto step = [&](double data, double compute_held, double waiting, bool capped, double update) {
    a.set_capped(capped);
    (void)a.begin();
    clock.hold(data);
    const StepReport r = job.compute_and_end_step(compute_held, waiting);
    clock.hold(update);
    return r.compute_seconds;
  };
  // Without a quota nothing is added, whatever the kernel did.
  EXPECT_EQ(step(0.004, 0.002, 0.005, false, 0.003), 0.012);
  // Capped: the first report has no interval before it: its compute window alone.
  EXPECT_NEAR(step(0.0, 0.002, 0.0, true, 0.003), 0.012, 1e-12);
  // Held 0.003 in the update after the last report, 0.004 before this compute and 0.005 in its
  // reduction: 0.012, and the mean of the last three reports is 0.004.
  EXPECT_NEAR(step(0.004, 0.0, 0.005, true, 0.0), 0.010 + 0.004, 1e-12);
  // Nothing held outside now: the mean of 0, 0, 0.012, 0.
  EXPECT_NEAR(step(0.0, 0.001, 0.0, true, 0.0), 0.011 + 0.003, 1e-12);
  // The mean is over the last 8 reports: after 8 clean ones, nothing is added.
  for (int i = 0; i < 8; ++i) (void)step(0.0, 0.0, 0.0, true, 0.0);
  EXPECT_NEAR(step(0.0, 0.0, 0.0, true, 0.0), 0.010, 1e-12);
  // Uncapped again: the interval is not charged (no report to start it from).
  EXPECT_NEAR(step(0.0, 0.0, 0.0, false, 0.004), 0.010, 1e-12);
  EXPECT_NEAR(step(0.003, 0.0, 0.0, true, 0.0), 0.010, 1e-12);
}

// Under a quota of less than one core the rank's time is modelled from the CPU it used: the
// wall time that CPU takes at its share, less its CPU outside its compute windows, as the mean
// over its last 8 reports. Whether the kernel happened to stop it in a step changes nothing: the
// same work reports the same time, so a rank that runs within its quota in some periods does not
// look fast in them.
TEST(StepProtocol, UnderAQuotaOfLessThanACoreARankReportsTheTimeItsCpuUseTakesAtItsShare) {
  OneRank job;
  HeldClock& clock = job.clock;
  agent::Agent& a = job.agent;
  // One step: 2 ms of data loading, 10 ms of compute (held `compute_held` inside it), 1 ms of
  // reduction (then held `waiting`), 1 ms of update. 14 ms of CPU a step.
  const auto step = [&](double cores, double compute_held, double waiting) {
    a.set_capped(true, cores);
    (void)a.begin();
    clock.run(0.002);
    const StepReport r = job.compute_and_end_step(compute_held, waiting);
    clock.run(0.001);
    return r.compute_seconds;
  };
  // The first report has no interval before it: its compute without the time held in it.
  EXPECT_NEAR(step(0.5, 0.004, 0.0), 0.010, 1e-12);
  // 14 ms of CPU at half a core take 28 ms, 4 of them outside the compute: 24 ms, whether the
  // kernel held it (6 ms in its compute, 8 ms after it) or not; the mean of 0 and 14 ms adds 7.
  EXPECT_NEAR(step(0.5, 0.006, 0.008), 0.010 + 0.007, 1e-12);
  for (int i = 0; i < 7; ++i) (void)step(0.5, 0.0, 0.0);
  EXPECT_NEAR(step(0.5, 0.0, 0.0), 0.024, 1e-12);
  EXPECT_NEAR(step(0.5, 0.007, 0.003), 0.024, 1e-12);
  // A quarter of a core: 56 ms less 4; the mean moves by (42 - 14) / 8 ms a report.
  EXPECT_NEAR(step(0.25, 0.0, 0.0), 0.010 + (7 * 0.014 + 0.042) / 8, 1e-12);
  // A quota of a core or more, or none known: the time held outside the compute, as before.
  for (int i = 0; i < 8; ++i) (void)step(1.5, 0.0, 0.0);
  EXPECT_NEAR(step(1.5, 0.0, 0.0), 0.010, 1e-12);
  EXPECT_NEAR(step(0.0, 0.0, 0.005), 0.010 + 0.005 / 8, 1e-12);
}

// A rank that rejoins after sitting out (Agent::resume) starts its quota accounting afresh: it
// has not reported for the steps it sat out, so the CPU it used meanwhile is no step's interval,
// and the time its quota held it before is no mean of its last reports. (Carried over, the
// first trial steps of a rank whose quota had just gone reported 45 ms for 0.7 ms of work.)
TEST(StepProtocol, ARankThatResumesStartsItsQuotaAccountingAfresh) {
  OneRank job;
  HeldClock& clock = job.clock;
  agent::Agent& a = job.agent;
  const auto step = [&](double cores) {
    a.set_capped(cores > 0.0, cores);
    (void)a.begin();
    clock.run(0.002);
    const StepReport r = job.compute_and_end_step(0.0, 0.0);
    clock.run(0.001);
    return r.compute_seconds;
  };
  for (int i = 0; i < 9; ++i) (void)step(0.25);
  EXPECT_NEAR(step(0.25), 0.052, 1e-12) << "14 ms of CPU at a quarter of a core take 56 ms, 4 outside the compute";
  clock.run(2.0);  // it sits out: CPU for its naps and the guard's answers, and no report
  a.resume(job.coordinator.resume_state(), job.ledger);
  EXPECT_NEAR(step(0.25), 0.010, 1e-12) << "under the quota still: a first report, its compute window alone";
  EXPECT_NEAR(step(0.25), 0.010 + 0.042 / 2, 1e-12) << "then the mean of its reports since";
  // Its quota went while it sat out: nothing of the time held before is charged.
  for (int i = 0; i < 8; ++i) (void)step(0.25);
  clock.run(2.0);
  a.resume(job.coordinator.resume_state(), job.ledger);
  EXPECT_NEAR(step(0.0), 0.010, 1e-12);
  EXPECT_NEAR(step(0.0), 0.010, 1e-12);
}
