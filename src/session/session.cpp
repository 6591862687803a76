// antdt::Session: the step protocol's application in a real job (docs/protocol.md).
//
// Session = this rank's Agent + the control channel + (on rank 0) the StepCoordinator. The
// Agent plans, times and emulates the rank's own step; once per step the channel gathers every
// rank's StepReport to rank 0, the StepCoordinator decides, and each rank gets its own
// StepReply (and a new plan, when there is one). Everything that decides lives in those two
// pure objects; this file only moves their messages over MPI and keeps rank 0's records.
#include "session/session.hpp"

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <thread>

#include "agent/agent.hpp"
#include "antdt/error.hpp"
#include "checkpoint/checkpoint.hpp"
#include "checkpoint/checkpoint_state.hpp"
#include "comm/reduce.hpp"
#include "controller/planner.hpp"
#include "core/bytes.hpp"
#include "core/log.hpp"
#include "core/plan_codec.hpp"
#include "core/plan_rules.hpp"
#include "core/step_record.hpp"
#include "protocol/step_coordinator.hpp"
#include "runtime/launcher.hpp"
#include "session/run_recorder.hpp"
#include "session/session_setup.hpp"
#include "transport/collectives.hpp"
#include "transport/control_channel.hpp"
#include "transport/guard.hpp"
#include "transport/rma_pool.hpp"
#include "transport/stall_watchdog.hpp"

namespace antdt {

namespace {

std::vector<std::byte> plan_bytes(const Plan& p) {
  detail::ByteWriter w;
  encode_plan(p, w);
  return w.take();
}

// Rank 0's bytes, on every rank.
std::vector<std::byte> broadcast(const Communicator& comm, std::vector<std::byte> bytes) {
  return detail::broadcast_vector(comm, std::move(bytes), MPI_BYTE);
}

std::shared_ptr<const Plan> plan_from(std::span<const std::byte> bytes) {
  detail::ByteReader r(bytes);
  return std::make_shared<const Plan>(decode_plan(r));
}

double seconds_now() { return agent::SteadyClock().now(); }

// Rank 0's data order on every rank: every rank composes its steps from it, so they must agree
// (a rank's own options could differ, e.g. another --data-seed; rank 0's wins, as its ledger's does).
dds::LedgerOptions agreed_order(const Communicator& comm, dds::LedgerOptions mine) {
  detail::ByteWriter w;
  if (comm.is_root()) {
    w.put(mine.shard_size);
    w.put(mine.seed);
    w.put<std::uint8_t>(mine.shuffle_shards ? 1 : 0);
    w.put<std::uint8_t>(mine.shuffle_within_shard ? 1 : 0);
  }
  const auto bytes = detail::broadcast_vector(comm, w.take(), MPI_BYTE);
  detail::ByteReader r(bytes);
  mine.shard_size = r.get<std::int64_t>();
  mine.seed = r.get<std::uint64_t>();
  mine.shuffle_shards = r.get<std::uint8_t>() != 0;
  mine.shuffle_within_shard = r.get<std::uint8_t>() != 0;
  return mine;
}

// The Agent's step pool over rank 0's one-sided counter (the transport knows nothing of the Agent).
class CounterOnRoot final : public agent::StepPool {
 public:
  explicit CounterOnRoot(const Communicator& comm) : counter(comm) {}
  std::int64_t claim(std::int64_t want, std::int64_t global_batch, std::int64_t& claimed_before) override {
    return counter.claim(want, global_batch, claimed_before);
  }
  [[nodiscard]] std::int64_t claimed() override { return counter.claimed(); }
  detail::RmaStepPool counter;
};

// One task at a time on a thread of its own: rank 0's decision of a pipelined step, made while
// this rank computes the next one. It does no MPI. A thread waiting here sleeps.
class Background {
 public:
  Background() = default;
  Background(const Background&) = delete;
  Background& operator=(const Background&) = delete;
  ~Background() {
    {
      std::lock_guard lock(mutex_);
      quit_ = true;
    }
    wake_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

  void start(std::function<void()> task) {
    if (!thread_.joinable()) thread_ = std::thread([this] { loop(); });
    {
      std::lock_guard lock(mutex_);
      task_ = std::move(task);
      busy_ = true;
    }
    wake_.notify_all();
  }

  // Waits for the task started last (if any); rethrows what it threw.
  void wait() {
    std::unique_lock lock(mutex_);
    done_.wait(lock, [&] { return !busy_; });
    if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
  }

 private:
  void loop() {
    std::unique_lock lock(mutex_);
    for (;;) {
      wake_.wait(lock, [&] { return quit_ || task_ != nullptr; });
      if (quit_) return;
      auto task = std::exchange(task_, nullptr);
      lock.unlock();
      std::exception_ptr error;
      try {
        task();
      } catch (...) {
        error = std::current_exception();
      }
      lock.lock();
      error_ = error;
      busy_ = false;
      done_.notify_all();
    }
  }

  std::mutex mutex_;
  std::condition_variable wake_, done_;
  std::function<void()> task_;
  std::exception_ptr error_;
  bool busy_ = false, quit_ = false;
  std::thread thread_;
};

}  // namespace

// A Guard for this Session's waits, unless the process has one already (a Job's, or its
// program's: guard.hpp); installed for the Session's life.
std::unique_ptr<detail::Guard> own_guard(MPI_Comm user, const SessionOptions& o, const std::string& node) {
  if (detail::installed_guard() != nullptr) return nullptr;
  return std::make_unique<detail::Guard>(user, o.step_timeout_seconds, o.wait_spin_seconds, node);
}

struct Session::Impl {
  SessionOptions opt;
  std::string node;  // this rank's node name
  std::unique_ptr<detail::Guard> guard_owned;
  detail::GuardInstall guard_install{guard_owned.get() ? guard_owned.get() : detail::installed_guard()};
  detail::Guard* guard = detail::installed_guard();
  Communicator comm;     // every rank
  Communicator members;  // the ranks that take part in this step's reduction and control round
  std::unique_ptr<detail::ControlChannel> channel = std::make_unique<detail::ControlChannel>(members);
  // Backup workers (docs/nd.md, "Sitting out"): the ranks outside `members` now, ascending.
  std::vector<std::int32_t> sitting_now;
  std::function<void()> share_state;       // the program's state from rank 0 to a rank that rejoins (Job)
  std::int64_t sit_outs = 0, rejoins = 0;  // this rank's
  dds::LedgerOptions ledger;
  std::vector<std::int64_t> caps;  // m_i of every rank
  std::vector<double> priors;      // device priors of every rank (0 = unknown)
  std::vector<std::string> nodes;  // rank 0: every rank's
  protocol::StepCoordinatorOptions coordinator_opt;
  agent::SteadyClock clock;
  agent::Agent agent;
  std::unique_ptr<CounterOnRoot> pool;  // pooled steps only
  // The last resort behind the guarded waits, for a wait antdt cannot poll (a blocking NCCL
  // all-reduce): past the timeout and three graces it ends the process with exit code 5.
  std::unique_ptr<detail::StallWatchdog> watchdog;
  std::unique_ptr<protocol::StepCoordinator> coordinator;  // rank 0 only
  std::vector<Plan> history;                               // rank 0: the plans of this run; others: the plans applied
  detail::RunRecorder recorder;                            // rank 0
  double t_session = seconds_now(), t_step_begin = t_session, t_last_end = t_session;
  // Rank 0, pipelined steps (docs/protocol.md): the decision of the step passed last round, made
  // in the background while this rank computes, and sent in the next round.
  struct Pending {
    protocol::StepDecision decision;
    double start_seconds = 0.0, wall_seconds = 0.0;  // its record's times, taken when it ended
  };
  std::optional<Pending> pending;
  bool deciding = false;               // the decider is making `pending`'s decision
  bool settle_next = false;            // the last reply rank 0 made within a round settles the next step
  double decision_wait_seconds = 0.0;  // rank 0: time this thread waited for the decider
  // Rank 0: how long the last pipelined decision took; under inline_decide_seconds (0.2 ms) the
  // next one is made on this thread, right after the round (written by the decider before it is
  // joined). ANTDT_DECIDE_INLINE_US sets that limit (0: every pipelined decision on the decider):
  // the tests use it to run the decider's path, which small jobs seldom take.
  double inline_decide_seconds = inline_decide_limit();
  double last_decide_seconds = 0.0;
  bool decide_after_round = false;
  std::vector<protocol::StepReport> decided_reports;  // what the decider decides from
  Background decider;                                 // last: joined first on destruction, before what it uses

  Impl(MPI_Comm user, SessionOptions o)
      : opt(std::move(o)),
        node(opt.node_name.empty() ? discover_node_name() : opt.node_name),
        guard_owned(own_guard(user, opt, node)),
        comm(Communicator::duplicate(user)),
        members(Communicator::duplicate(comm.get())),
        ledger(agreed_order(comm, detail::session_ledger_options(opt, comm.size()))),
        caps(detail::allgather_value<std::int64_t>(
            comm, opt.micro_batch_cap > 0 ? opt.micro_batch_cap : opt.global_batch, MPI_INT64_T)),
        priors(detail::allgather_value<double>(comm, opt.device_prior, MPI_DOUBLE)),
        nodes(detail::gather_strings(comm, node)),
        coordinator_opt(resolved(detail::coordinator_options(opt, caps, nodes), comm)),
        agent(comm.rank(), comm.size(), ledger, opt.emulation, clock, node, coordinator_opt.pool),
        pool(coordinator_opt.pool.pooled && coordinator_opt.pool.mechanism == PoolMechanism::counter
                 ? std::make_unique<CounterOnRoot>(comm)
                 : nullptr),
        watchdog(opt.step_timeout_seconds > 0.0 && comm.size() > 1
                     ? std::make_unique<detail::StallWatchdog>(
                           opt.step_timeout_seconds + 3 * detail::grace_seconds(opt.step_timeout_seconds), comm.rank())
                     : nullptr) {}

  static double inline_decide_limit() {
    const char* us = std::getenv("ANTDT_DECIDE_INLINE_US");
    if (us == nullptr || *us == '\0') return 200e-6;
    char* end = nullptr;
    const double v = std::strtod(us, &end);
    if (*end != '\0' || !(v >= 0.0))
      throw UsageError(std::string("ANTDT_DECIDE_INLINE_US must be microseconds >= 0, not '") + us + "'");
    return v * 1e-6;
  }

  // A pooled job's claims go to rank 0's counter only where MPI's atomics work well: one node.
  static protocol::StepCoordinatorOptions resolved(protocol::StepCoordinatorOptions c, const Communicator& comm) {
    if (c.pool.pooled && c.pool.mechanism == PoolMechanism::automatic) {
      c.pool.mechanism = detail::on_one_node(comm) ? PoolMechanism::counter : PoolMechanism::deadline;
    }
    return c;
  }

  [[nodiscard]] bool root() const { return comm.is_root(); }

  // Rank 0's plan in force (and pending one, if any), on every rank's Agent (over `over`, the
  // world unless said; `apply` false: the rank only takes part in the broadcasts).
  void share_plans(const Communicator* over = nullptr, bool apply = true) {
    const Communicator& c = over ? *over : comm;
    const auto bytes = [&](const std::shared_ptr<const Plan>& p) {
      return p ? plan_bytes(*p) : std::vector<std::byte>{};
    };
    const PlanSchedule* plans = root() ? &settled_coordinator().plans() : nullptr;
    auto current = broadcast(c, plans ? bytes(plans->current_ptr()) : std::vector<std::byte>{});
    auto pending_plan = broadcast(c, plans ? bytes(plans->pending()) : std::vector<std::byte>{});
    if (apply) agent.reset_plan(plan_from(current), pending_plan.empty() ? nullptr : plan_from(pending_plan));
  }

  // --- backup workers: sitting out and rejoining (docs/nd.md, "Sitting out") ---------------
  // A plan that lists ranks in Plan::sitting takes effect at a step every rank knows (the step
  // before it is settled: nothing is in flight). At its begin_step the ranks that took part so
  // far meet once (a guarded barrier, after rank 0 has woken the ranks that rejoin and heard
  // them ready); the leavers then wait, and the others make a communicator of themselves with
  // MPI_Comm_create_group (collective over them alone), which carries the steps' reductions and
  // control rounds from then on. A rank that rejoins gets where the run stands, the plans and
  // the program's state from rank 0 over that communicator. At the end of the run every rank
  // that sits out rejoins, so that the end (final checkpoint, report) has every rank.
  static constexpr int kWakeTag = 0x5157, kReadyTag = 0x5158, kGroupTag = 0x5159;

  void make_members(const std::vector<std::int32_t>& sitting) {
    MPI_Group all = MPI_GROUP_NULL, in = MPI_GROUP_NULL;
    ANTDT_CHECK_MPI(MPI_Comm_group(comm.get(), &all));
    ANTDT_CHECK_MPI(MPI_Group_excl(all, static_cast<int>(sitting.size()), sitting.data(), &in));
    MPI_Comm made = MPI_COMM_NULL;
    // Blocking, but every rank of the group is known to be here (the barrier or the wake before
    // it); the watchdog ends a process that stays in it anyway.
    watched([&] { ANTDT_CHECK_MPI(MPI_Comm_create_group(comm.get(), in, kGroupTag, &made)); });
    MPI_Group_free(&in);
    MPI_Group_free(&all);
    channel.reset();
    members = Communicator::duplicate(made);
    MPI_Comm_free(&made);
    channel = std::make_unique<detail::ControlChannel>(members);
    sitting_now = sitting;
  }

  // Rank 0: tells each rank of `joining` the ranks that sit out from now and waits until it is
  // ready to make the new communicator.
  void wake(const std::vector<std::int32_t>& joining, const std::vector<std::int32_t>& sitting) {
    std::int64_t length = static_cast<std::int64_t>(sitting.size());
    std::vector<int> ready(joining.size(), 0);
    std::vector<MPI_Request> requests;
    for (std::size_t k = 0; k < joining.size(); ++k) {
      requests.emplace_back();
      ANTDT_CHECK_MPI(MPI_Isend(&length, 1, MPI_INT64_T, joining[k], kWakeTag, comm.get(), &requests.back()));
      requests.emplace_back();
      ANTDT_CHECK_MPI(MPI_Isend(sitting.data(), static_cast<int>(length), MPI_INT32_T, joining[k], kWakeTag, comm.get(),
                                &requests.back()));
      requests.emplace_back();
      ANTDT_CHECK_MPI(MPI_Irecv(&ready[k], 1, MPI_INT, joining[k], kReadyTag, comm.get(), &requests.back()));
    }
    detail::wait_requests(requests);
  }

  // Where the run stands, the plans and the program's state, from rank 0 to every member;
  // applied by `joiner`s.
  void resync(bool joiner) {
    protocol::ResumeState state;
    detail::ByteWriter w;
    if (root()) {
      state = settled_coordinator().resume_state();
      state.finished = agent.finished();
      state.stopped = agent.stopped();
      state.restart = agent.restart_requested();
      protocol::encode(state, w);
    }
    const auto bytes = broadcast(members, w.take());
    detail::ByteReader in(bytes);
    state = protocol::decode_resume(in);
    share_plans(&members, joiner);
    if (joiner) {
      agent.resume(state, ledger);
      ++rejoins;
      if (state.finished) {
        ANTDT_LOG(info) << "rejoins for the end of the run, after step " << state.step - 1;
      } else {
        ANTDT_LOG(info) << "rejoins at step " << state.step;
      }
    }
    if (share_state) share_state();
  }

  // The ranks that take part change at this step, to all but `sitting`.
  void regroup(const std::vector<std::int32_t>& sitting) {
    detail::Guard::Scope scope(guard, detail::Phase::regroup, agent.step());
    std::vector<std::int32_t> joining;
    for (const auto r : sitting_now)
      if (!std::binary_search(sitting.begin(), sitting.end(), r)) joining.push_back(r);
    if (root()) wake(joining, sitting);
    detail::barrier(members.get());  // every rank that took part so far, the leavers too
    if (std::binary_search(sitting.begin(), sitting.end(), static_cast<std::int32_t>(comm.rank()))) {
      channel.reset();
      members = Communicator();
      sitting_now = sitting;
      ++sit_outs;
      ANTDT_LOG(info) << "sits out from step " << agent.step() << " (backup worker)";
      sit_out();
      return;
    }
    make_members(sitting);
    if (!joining.empty()) resync(false);
  }

  // A rank that sits out: waits (napping, answering the guard) until rank 0 wakes it, then
  // rejoins. Without a guard (--step-timeout 0) it naps too: MPI's own wait would poll, and take
  // the core from whatever made this rank sit out.
  void sit_out() {
    detail::Guard::Scope scope(guard, detail::Phase::sitting_out, agent.step());
    std::int64_t length = 0;
    MPI_Request request = MPI_REQUEST_NULL;
    ANTDT_CHECK_MPI(MPI_Irecv(&length, 1, MPI_INT64_T, 0, kWakeTag, comm.get(), &request));
    if (guard != nullptr) {
      detail::wait_requests({&request, 1});
    } else {
      for (int done = 0;;) {
        ANTDT_CHECK_MPI(MPI_Test(&request, &done, MPI_STATUS_IGNORE));
        if (done != 0) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
      }
    }
    if (length < 0 || length >= comm.size())
      throw Error("sitting out: a wake from rank 0 lists " + std::to_string(length) + " ranks");
    std::vector<std::int32_t> sitting(static_cast<std::size_t>(length));
    ANTDT_CHECK_MPI(
        MPI_Irecv(sitting.data(), static_cast<int>(length), MPI_INT32_T, 0, kWakeTag, comm.get(), &request));
    detail::wait_requests({&request, 1});
    int ready = 1;
    ANTDT_CHECK_MPI(MPI_Isend(&ready, 1, MPI_INT, 0, kReadyTag, comm.get(), &request));
    detail::wait_requests({&request, 1});
    make_members(sitting);
    resync(true);
  }

  [[nodiscard]] bool sitting_out() const noexcept { return members.get() == MPI_COMM_NULL; }

  // The run's first control round (collective): where the data order stands.
  void first_round() {
    if (agent.in_step() || agent.started() || agent.finished()) return;
    exchange(nullptr);
    t_last_end = seconds_now();
  }

  // At a step's start: the regroup its plan asks for, if any.
  void regroup_if_due() {
    if (!agent.started() || agent.finished() || agent.in_step()) return;
    const auto& sitting = agent.plans().at(agent.step()).sitting;
    if (sitting != sitting_now) regroup(sitting);
  }

  // A program's reduction: every rank must pass the same shape (docs/job.md); inside the timed
  // reduction, so that the wait for the slowest rank counts as reduction, not compute.
  void agree_on_call(const char* call, detail::CallShape::Type type, std::int64_t count) {
    detail::agree_on_call(members.get(), call, {type, count}, comm.rank());
  }

  // The step's reduction, guarded (guard.hpp): a rank that stalls before or inside it is named
  // by rank 0's judge and every rank stops. The watchdog stays behind it for what cannot be
  // polled (a blocking NCCL all-reduce).
  template <class F>
  void timed_reduction(F&& reduce) {
    agent.mark_compute_done();
    const double t0 = seconds_now();
    detail::Guard::Scope scope(guard, detail::Phase::reduction, agent.step());
    watched(reduce);
    agent.add_reduce_seconds(seconds_now() - t0);
  }

  // Runs `call`, a wait antdt cannot poll, with the watchdog armed (if there is one).
  template <class F>
  void watched(F&& call) {
    struct Disarm {
      detail::StallWatchdog* w;
      ~Disarm() {
        if (w) w->disarm();
      }
    } disarm{watchdog.get()};
    if (watchdog) watchdog->arm(agent.step());
    call();
  }

  // One control round: every rank's report (none for the first) to rank 0, each rank's replies
  // back: the reply to the step passed last round (pipelined), then the reply to this step if
  // rank 0 settles it. A step no reply ends is passed (Agent::pass): its reply comes next round.
  StepSummary exchange(const protocol::StepReport* report) {
    detail::Guard::Scope scope(guard, detail::Phase::control, agent.step());
    detail::ByteWriter mine;
    if (report) protocol::encode(*report, mine);
    const auto got = channel->exchange(mine.bytes(), [&](const std::vector<std::span<const std::byte>>& reports) {
      return decide(report != nullptr, reports);
    });
    if (decide_after_round) {  // rank 0: a short pipelined decision, off every rank's wait
      decide_after_round = false;
      decide_pending();
    }
    detail::ByteReader in(got.mine), shared(got.shared);
    const auto count = in.get<std::uint8_t>();
    const auto plans = got.shared.empty() ? std::uint8_t{0} : shared.get<std::uint8_t>();
    StepSummary summary;
    bool plan_changed = false;
    std::uint8_t plans_taken = 0;
    for (std::uint8_t i = 0; i < count; ++i) {
      const protocol::StepReply reply = protocol::decode_reply(in);
      std::shared_ptr<const Plan> plan;
      if (reply.plan_follows && plans_taken < plans) {
        plan = plan_from(shared.get_vector<std::byte>());
        ++plans_taken;
      }
      summary = agent.apply(reply, std::move(plan));
      plan_changed = plan_changed || summary.plan_changed;
    }
    if (report && agent.in_step()) {  // no reply ended it: pipelined
      agent.pass();
      summary.step = report->step;
    }
    summary.plan_changed = plan_changed;
    // A round that brings no reply (the step passed while rank 0 decides it) still tells where
    // the run stands: the epochs completed and the end, as the last reply left them.
    summary.completed_epochs = agent.completed_epochs();
    summary.finished = agent.finished();
    summary.stopped = agent.stopped();
    summary.restart = agent.restart_requested();
    return summary;
  }

  // Rank 0: the pipelined decision of the step in decided_reports, timed (on this thread or the
  // decider's).
  void decide_pending() {
    const double t0 = seconds_now();
    pending->decision = coordinator->decide(decided_reports, false);
    last_decide_seconds = seconds_now() - t0;
  }

  // Rank 0: waits for the decision the decider is making, if any.
  void join_decider() {
    if (!deciding) return;
    const double t0 = seconds_now();
    deciding = false;
    decider.wait();
    decision_wait_seconds += seconds_now() - t0;
  }

  // Rank 0: the coordinator, with no decision under way (what reads or saves it needs this).
  protocol::StepCoordinator& settled_coordinator() {
    join_decider();
    return *coordinator;
  }

  // Rank 0: decodes the reports; sends the pending decision (the step passed last round) and,
  // if this step settles, this step's decision; otherwise hands this step to the decider.
  detail::ControlChannel::Replies decide(bool step, const std::vector<std::span<const std::byte>>& reports) {
    const double now = seconds_now();
    join_decider();
    std::vector<protocol::StepDecision> out_decisions;
    std::vector<std::pair<double, double>> times;  // each sent decision's record times
    if (pending) {
      out_decisions.push_back(std::move(pending->decision));
      times.emplace_back(pending->start_seconds, pending->wall_seconds);
      pending.reset();
    }
    const std::pair<double, double> this_step{t_step_begin - t_session, now - t_last_end};
    if (step) {
      std::vector<protocol::StepReport> decoded;
      decoded.reserve(reports.size());
      for (const auto& bytes : reports) {
        detail::ByteReader in(bytes);
        decoded.push_back(protocol::decode_report(in));
      }
      if (!sitting_now.empty()) decoded = coordinator->with_sitting(decoded);  // those who sit out did nothing
      const protocol::StepReply* previous = out_decisions.empty() ? nullptr : &out_decisions.back().reply;
      const bool settle = std::exchange(settle_next, false) || coordinator->settles(decoded, previous) ||
                          (previous && previous->status != protocol::ReplyStatus::ok);
      if (settle) {
        out_decisions.push_back(coordinator->decide(decoded));
        settle_next = out_decisions.back().reply.settle_next;
        times.push_back(this_step);
      } else {
        decided_reports = std::move(decoded);
        pending.emplace();
        pending->start_seconds = this_step.first;
        pending->wall_seconds = this_step.second;
        // A decision far shorter than any step is made on this thread once the round is over
        // (exchange): waking a thread for it would cost more than it takes, and take a core
        // from a rank that shares it.
        if (last_decide_seconds < inline_decide_seconds) {
          decide_after_round = true;
        } else {
          deciding = true;  // started below, once nothing here reads the coordinator any more
        }
      }
    } else {
      out_decisions.push_back(coordinator->start());
      settle_next = out_decisions.back().reply.settle_next;
      times.push_back(this_step);
    }
    if (pool) pool->counter.reset();  // every rank has reported: no claim of this step is in flight
    detail::ControlChannel::Replies out;
    detail::ByteWriter w, shared;
    std::uint8_t plans = 0;
    for (std::size_t i = 0; i < out_decisions.size(); ++i) {
      auto& d = out_decisions[i];
      if (d.record) keep(*d.record, times[i]);
      if (d.plan) {
        history.push_back(*d.plan);
        ++plans;
      }
    }
    if (plans > 0) {
      shared.put(plans);
      for (const auto& d : out_decisions) {
        if (!d.plan) continue;
        shared.put_vector(plan_bytes(*d.plan));
      }
    }
    out.offsets.push_back(0);
    for (int r = 0; r < members.size(); ++r) {
      w.put(static_cast<std::uint8_t>(out_decisions.size()));
      for (const auto& d : out_decisions) protocol::encode(d.reply_for(r), w);
      out.offsets.push_back(w.bytes().size());
    }
    out.per_rank = w.take();
    out.shared = shared.take();
    // The decider may change the coordinator's plans as soon as it starts: the records kept above
    // read the plan in force, so it starts only now.
    if (deciding) decider.start([this] { decide_pending(); });
    return out;
  }

  // `times`: the step's start on rank 0's clock (data wait starts there) and its wall time.
  void keep(StepRecord& rec, std::pair<double, double> times) {
    rec.start_seconds = times.first;
    rec.wall_seconds = times.second;
    recorder.record(rec, coordinator->plans().current());
  }

  void restore_root(const CheckpointReader* reader, protocol::ResumeState& state) {
    try {
      if (!reader) throw UsageError("Session::restore: rank 0 needs a CheckpointReader");
      coordinator = std::make_unique<protocol::StepCoordinator>(
          protocol::StepCoordinator::restore(detail::CheckpointStateReader(*reader), coordinator_opt, ledger));
      coordinator->set_profiling_clock(seconds_now);
      state = coordinator->resume_state();
      history.assign(1, coordinator->plans().current());
    } catch (const Error& e) {
      state.status = protocol::ReplyStatus::error;
      state.error = e.what();
    }
  }
};

Session::Session(MPI_Comm comm, SessionOptions options) : impl_(std::make_unique<Impl>(comm, std::move(options))) {
  auto& s = *impl_;
  log::set_rank(s.comm.rank(), s.comm.size());
  if (s.root()) {
    s.coordinator = std::make_unique<protocol::StepCoordinator>(s.coordinator_opt, s.ledger,
                                                                detail::first_plan(s.opt, s.caps, s.priors));
    s.coordinator->set_profiling_clock(seconds_now);
    s.history.push_back(s.coordinator->plans().current());
    ANTDT_LOG(info) << "session: " << s.comm.size() << " ranks, N=" << s.opt.dataset_size
                    << ", B=" << s.opt.global_batch << ", shard=" << s.ledger.shard_size
                    << ", policy=" << s.opt.controller.policy
                    << (!s.coordinator_opt.pool.pooled                                ? ""
                        : s.coordinator_opt.pool.mechanism == PoolMechanism::deadline ? ", pool=deadline"
                                                                                      : ", pool=counter")
                    << (s.agent.emulator().emulated() ? ", EMULATED: " + s.opt.emulation.describe() : std::string());
  }
  s.share_plans();
}

Session::~Session() = default;

double Session::probe(const std::function<void(std::int64_t)>& micro_step, int repetitions) {
  auto& s = *impl_;
  if (s.agent.started()) throw UsageError("Session::probe must be called before the first begin_step");
  if (repetitions < 1) throw UsageError("Session::probe: repetitions must be at least 1");
  const auto my_cap = s.caps[static_cast<std::size_t>(s.comm.rank())];
  const std::int64_t n = std::max<std::int64_t>(1, std::min(my_cap, ceil_div(s.opt.global_batch, s.comm.size())));
  // Every rank probes at once, as in a step: a rank timed while the others are still setting
  // up (reading, allocating) shares the machine differently than it will in the steps.
  detail::Guard::Scope scope(s.guard, detail::Phase::probe, 0);
  detail::barrier(s.comm.get());
  const double x = s.agent.probe(micro_step, n, repetitions);
  const std::vector<double> all = detail::allgather_value<double>(s.comm, x, MPI_DOUBLE);
  if (s.root()) s.history.assign(1, s.coordinator->install_probe(all, s.priors, repetitions));
  s.share_plans();
  return x;
}

StepWork Session::begin_step() {
  auto& s = *impl_;
  if (s.guard) {
    s.guard->serve();  // rank 0 may have asked where this rank is
    s.guard->set_step(s.agent.step());
    s.guard->set_phase(detail::Phase::step);
  }
  s.first_round();
  s.regroup_if_due();  // a rank that sits out waits in here until it rejoins, or the run ends
  if (s.agent.finished())
    throw UsageError(
        "Session::begin_step: the run ended while this rank sat out (call await_turn(), then check finished())");
  s.t_step_begin = seconds_now();
  s.agent.set_capped(s.guard && s.guard->capped(), s.guard ? s.guard->quota_cores() : 0.0);
  const std::int64_t version = s.agent.plan().version;
  StepWork work = s.agent.begin();
  if (!s.root() && work.plan_version != version) s.history.push_back(s.agent.plan());
  return work;
}

std::vector<std::int64_t> Session::next_samples() const { return impl_->agent.next_samples(); }
void Session::mark_data_ready() { impl_->agent.mark_data_ready(); }
void Session::mark_compute_done(double measured_seconds) { impl_->agent.mark_compute_done(measured_seconds); }

std::vector<std::int64_t> Session::next_chunk() {
  auto& s = *impl_;
  if (!s.coordinator_opt.pool.pooled)
    throw UsageError("Session::next_chunk: the policy '" + s.opt.controller.policy + "' does not pool steps");
  return s.agent.next_chunk(s.pool.get());
}

void Session::chunk_done(double measured_seconds) { impl_->agent.chunk_done(measured_seconds); }

void Session::reduce_sums(float* buffer, std::int64_t count, GradientReducer& reducer, const char* call) {
  impl_->timed_reduction([&] {
    if (call != nullptr) impl_->agree_on_call(call, detail::CallShape::Type::device_float32, count);
    reducer.allreduce_sum(buffer, count);
  });
}

void Session::reduce_sums(OverlappedReduction& reduction) {
  impl_->timed_reduction([&] { reduction.finish(); });
}

namespace {

// A reduction of this rank's sums over `local_samples` samples must come inside a step, for
// exactly the samples this rank was given: otherwise the mean is divided by the wrong count,
// silently. The same checks on every rank make a misuse a usage error, not a hang.
void check_reduction(const agent::Agent& agent, std::int64_t local_samples, const char* call) {
  if (!agent.in_step()) {
    throw UsageError(std::string(call) + " outside a step: call begin_step() first (and end_step() after)");
  }
  if (local_samples != agent.samples()) {
    throw UsageError(std::string(call) + ": rank " + std::to_string(agent.rank()) + " reduces sums over " +
                     std::to_string(local_samples) + " samples but was given " + std::to_string(agent.samples()) +
                     " this step; the mean would be divided by the wrong count (pass the samples you trained on)");
  }
}

}  // namespace

std::int64_t Session::reduce(std::span<float> gradient_sums, std::int64_t local_samples, const char* call) {
  check_reduction(impl_->agent, local_samples, "Session::reduce");
  std::int64_t total = 0;
  impl_->timed_reduction([&] {
    if (call != nullptr) {
      impl_->agree_on_call(call, detail::CallShape::Type::float32, static_cast<std::int64_t>(gradient_sums.size()));
    }
    // One fused reduction: the count rides in trailing digit slots, exact at any count
    // (antdt/sample_count.hpp).
    std::vector<float> fused(gradient_sums.size() + kSampleCountSlots);
    std::copy(gradient_sums.begin(), gradient_sums.end(), fused.begin());
    encode_sample_count(local_samples, fused.data() + gradient_sums.size());
    detail::allreduce_in_place(fused.data(), static_cast<std::int64_t>(fused.size()), MPI_FLOAT, sizeof(float), MPI_SUM,
                               impl_->members.get());
    total = decode_sample_count(fused.data() + gradient_sums.size());
    if (total < 0) {  // the same on every rank: all of them throw
      throw Error(
          "Session::reduce: the reduced sample count does not decode (over 2^63 samples, or ranks passed "
          "buffers of different sizes)");
    }
    const float scale = total > 0 ? 1.0f / static_cast<float>(total) : 0.0f;
    for (std::size_t i = 0; i < gradient_sums.size(); ++i) gradient_sums[i] = fused[i] * scale;
  });
  return total;
}

std::int64_t Session::reduce(std::span<std::int64_t> sums, std::int64_t local_samples, const char* call) {
  check_reduction(impl_->agent, local_samples, "Session::reduce");
  std::int64_t total = 0;
  impl_->timed_reduction([&] {
    if (call != nullptr) {
      impl_->agree_on_call(call, detail::CallShape::Type::int64, static_cast<std::int64_t>(sums.size()));
    }
    std::vector<std::int64_t> fused(sums.begin(), sums.end());
    fused.push_back(local_samples);  // integers: the count is exact as it is
    detail::allreduce_in_place(fused.data(), static_cast<std::int64_t>(fused.size()), MPI_INT64_T, sizeof(std::int64_t),
                               MPI_SUM, impl_->members.get());
    total = fused.back();
    std::copy(fused.begin(), fused.end() - 1, sums.begin());
  });
  return total;
}

StepSummary Session::end_step(double loss_sum, std::int64_t correct) {
  auto& s = *impl_;
  if (s.guard) s.guard->serve();
  const protocol::StepReport report = s.agent.report(loss_sum, correct);
  StepSummary summary = s.exchange(&report);
  const double now = seconds_now();
  summary.step_seconds = now - s.t_last_end;
  s.t_last_end = now;
  return summary;
}

bool Session::finished() const noexcept { return impl_->agent.finished(); }
bool Session::restart_requested() const noexcept { return impl_->agent.restart_requested(); }
void Session::request_stop() noexcept { impl_->agent.request_stop(); }
void Session::request_checkpoint() noexcept { impl_->agent.request_checkpoint(); }
bool Session::stopped() const noexcept { return impl_->agent.stopped(); }

std::optional<RestartDecision> Session::restart_decision() const {
  return impl_->coordinator ? impl_->settled_coordinator().restart() : std::nullopt;
}

void Session::set_restart_cost(double seconds) {
  if (impl_->coordinator) impl_->settled_coordinator().set_restart_seconds(seconds);
}

void Session::save(CheckpointWriter& writer) const {
  auto& s = *impl_;
  if (!s.root()) return;
  if (s.agent.in_step()) throw UsageError("Session::save must be called between steps (after end_step)");
  detail::CheckpointStateWriter out(writer);
  // A pipelined step's decision is made (its commit is in the checkpoint); it is sent next round.
  s.settled_coordinator().save(out);
}

void Session::restore(const CheckpointReader* reader) {
  auto& s = *impl_;
  if (s.agent.started()) throw UsageError("Session::restore must be called before the first begin_step");
  detail::Guard::Scope scope(s.guard, detail::Phase::resume, s.agent.step());
  protocol::ResumeState state;
  if (s.root()) s.restore_root(reader, state);
  detail::ByteWriter w;
  if (s.root()) protocol::encode(state, w);
  const auto bytes = broadcast(s.comm, w.take());
  detail::ByteReader in(bytes);
  state = protocol::decode_resume(in);
  if (state.status != protocol::ReplyStatus::ok) {
    if (s.root()) throw CheckpointError(state.error);
    throw CheckpointError("restore failed on rank 0 (see its message)");
  }
  s.share_plans();
  s.ledger.shard_size = state.shard_size;
  s.ledger.shuffle_shards = state.shuffle_shards;
  s.ledger.shuffle_within_shard = state.shuffle_within_shard;
  s.agent.resume(state, s.ledger);
  s.recorder.clear();
}

const Communicator& Session::comm() const noexcept { return impl_->members; }
const Communicator& Session::world_comm() const noexcept { return impl_->comm; }
void Session::await_turn() {
  auto& s = *impl_;
  if (s.guard) s.guard->serve();
  s.first_round();
  if (s.agent.finished()) {
    // The end of the run has every rank (final checkpoint, report): those who sit out rejoin.
    if (!s.sitting_now.empty() && !s.sitting_out()) s.regroup({});
    return;
  }
  s.regroup_if_due();
}
void Session::keep_every_rank() {
  if (impl_->coordinator) impl_->settled_coordinator().keep_every_rank();
}
void Session::set_share_state(std::function<void()> share) { impl_->share_state = std::move(share); }
bool Session::sitting_out() const noexcept { return impl_->sitting_out(); }
const std::vector<std::int32_t>& Session::sitting_ranks() const noexcept { return impl_->sitting_now; }
std::int64_t Session::sit_outs() const {
  return impl_->coordinator ? impl_->settled_coordinator().controller().sit_outs() : impl_->sit_outs;
}
std::int64_t Session::rejoins() const {
  return impl_->coordinator ? impl_->settled_coordinator().controller().rejoins() : impl_->rejoins;
}
int Session::rank() const noexcept { return impl_->comm.rank(); }
int Session::size() const noexcept { return impl_->comm.size(); }
std::int64_t Session::step() const noexcept { return impl_->agent.step(); }
const Plan& Session::plan() const noexcept { return impl_->agent.plan(); }
const std::vector<Plan>& Session::plan_history() const noexcept { return impl_->history; }
const SessionOptions& Session::options() const noexcept { return impl_->opt; }
bool Session::emulated() const noexcept { return impl_->agent.emulator().emulated(); }
void Session::add_record_sink(RecordSink sink) { impl_->recorder.add_sink(std::move(sink)); }
RunTotals Session::totals() const { return impl_->recorder.totals(); }
std::int64_t Session::samples_committed() const noexcept { return impl_->agent.committed_total(); }
std::int64_t Session::altered_steps() const {
  return impl_->coordinator ? impl_->settled_coordinator().altered_steps() : 0;
}
double Session::dds_seconds() const { return impl_->coordinator ? impl_->settled_coordinator().dds_seconds() : 0.0; }
double Session::decision_wait_seconds() const noexcept { return impl_->decision_wait_seconds; }
double Session::elapsed_seconds() const noexcept { return seconds_now() - impl_->t_session; }
const std::vector<std::int64_t>& Session::micro_batch_caps() const noexcept { return impl_->caps; }
const std::vector<std::string>& Session::node_names() const noexcept { return impl_->nodes; }
std::size_t Session::control_bytes_received() const noexcept {
  return impl_->channel ? impl_->channel->last_received_bytes() : 0;
}
Session::PoolCost Session::pool_cost() const noexcept {
  return impl_->pool ? PoolCost{impl_->pool->counter.atomics(), impl_->pool->counter.seconds()} : PoolCost{};
}

std::vector<EpochCoverageReport> Session::coverage() const {
  std::vector<EpochCoverageReport> out;
  if (!impl_->coordinator) return out;
  for (const auto& c : impl_->settled_coordinator().dds().coverage())
    out.push_back({c.epoch, c.committed, c.missing, c.duplicated});
  return out;
}

std::vector<double> Session::rank_throughput() const {
  return impl_->coordinator ? impl_->settled_coordinator().controller().monitor().throughputs() : std::vector<double>{};
}

std::vector<RankAssessment> Session::assessments() const {
  if (!impl_->coordinator) return {};
  return impl_->settled_coordinator().controller().assessments();
}

}  // namespace antdt
