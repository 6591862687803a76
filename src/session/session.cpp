// The step protocol of antdt::Session.
//
// Rank 0 hosts the authoritative DDS Coordinator and the Controller; every rank holds a DDS
// Client (its prefetched grants) and its Agent state (plan in force, emulator, timers).
//
// One control exchange per step (end_step), through detail::ControlChannel: every rank
// sends a fixed-size Report (what it consumed, its timings, loss); rank 0 commits the
// consumed samples in the ledger (after the reduction, which every rank has finished by
// then), feeds the Controller, and replies with an optional new Plan (tagged with the step
// at which it takes effect) and the shard grants that keep every rank `prefetch_steps`
// ahead. Because grants travel one step ahead, begin_step never waits for rank 0.
#include "antdt/session.hpp"

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>

#include "antdt/checkpoint.hpp"
#include "antdt/config.hpp"
#include "antdt/dds.hpp"
#include "antdt/error.hpp"
#include "antdt/log.hpp"
#include "antdt/planner.hpp"
#include "antdt/reduce.hpp"
#include "core/bytes.hpp"
#include "core/control_channel.hpp"
#include "core/plan_codec.hpp"
#include "dds/wire.hpp"

namespace antdt {

namespace {

using Clock = std::chrono::steady_clock;
double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// What every rank sends at the end of a step. Fixed size: the gather needs equal sizes.
struct Report {
  std::int64_t step;
  std::int64_t consumed;
  std::int64_t correct;
  std::int64_t plan_version;
  double compute_seconds;
  double data_wait_seconds;
  double reduce_seconds;
  double loss_sum;
  std::int32_t micro_steps;
  std::int32_t reserved;
};

// Splits n samples into ceil(n / cap) near-equal micro-batches.
std::vector<std::int64_t> split_micro_batches(std::int64_t n, std::int64_t cap) {
  std::vector<std::int64_t> sizes;
  if (n <= 0) return sizes;
  const std::int64_t k = ceil_div(n, std::max<std::int64_t>(1, cap));
  sizes.reserve(static_cast<std::size_t>(k));
  for (std::int64_t j = 0; j < k; ++j) sizes.push_back(n / k + (j < n % k ? 1 : 0));
  return sizes;
}

void validate(const SessionOptions& o, int world) {
  if (o.dataset_size < 1) throw UsageError("Session: the data set is empty (dataset_size must be at least 1)");
  if (o.global_batch < 1) throw UsageError("Session: global_batch must be at least 1");
  if (o.micro_batch_cap < 0) throw UsageError("Session: micro_batch_cap must be >= 0 (0 = no cap)");
  if (o.prefetch_steps < 1) throw UsageError("Session: prefetch_steps must be at least 1");
  if (o.max_epochs < 0 || o.max_steps < 0) throw UsageError("Session: max_epochs and max_steps must be >= 0");
  if (o.max_epochs == 0 && o.max_steps == 0) {
    throw UsageError("Session: set max_steps or max_epochs (both 0 would train forever)");
  }
  if (!o.emulation.speeds.empty() && o.emulation.speeds.size() != 1 &&
      o.emulation.speeds.size() != static_cast<std::size_t>(world)) {
    throw UsageError("Session: --emulate-speed has " + std::to_string(o.emulation.speeds.size()) +
                     " values but the job has " + std::to_string(world) + " ranks (give one per rank, or one for all)");
  }
}

}  // namespace

struct Session::Impl {
  SessionOptions opt;
  Communicator comm;
  detail::ControlChannel channel{comm};
  dds::LedgerOptions ledger_opt;
  dds::Client client;
  std::unique_ptr<dds::Coordinator> coordinator;  // rank 0 only
  std::unique_ptr<Controller> controller;         // rank 0 only
  ControllerOptions controller_opt;
  SpeedEmulator emulator;
  std::vector<std::int64_t> caps;  // m_i of every rank

  Plan plan;                    // in force
  std::optional<Plan> pending;  // issued, not yet effective
  std::vector<Plan> history;

  std::int64_t step = 0;
  bool started = false;
  bool finished = false;
  std::int64_t completed_epochs = 0;
  std::int64_t committed_total = 0;
  double dds_seconds = 0;  // rank 0: time in the coordinator

  // This step's agent state.
  bool in_step = false;
  bool compute_marked = false;
  Clock::time_point t_begin, t_data_ready;
  double data_wait_s = 0, compute_s = 0, reduce_s = 0;
  std::int64_t samples_now = 0;
  std::int32_t micro_steps_now = 0;

  std::vector<StepRecord> records;  // rank 0
  Clock::time_point t_session = Clock::now();
  Clock::time_point t_last_end = Clock::now();

  Impl(MPI_Comm user, SessionOptions o)
      : opt(std::move(o)),
        comm(Communicator::duplicate(user)),
        ledger_opt(make_ledger_options(opt, comm.size())),
        client(ledger_opt),
        emulator(opt.emulation, comm.rank(), comm.size()) {}

  static dds::LedgerOptions make_ledger_options(const SessionOptions& o, int world) {
    validate(o, world);
    dds::LedgerOptions l;
    l.dataset_size = o.dataset_size;
    const std::int64_t per_rank = std::max<std::int64_t>(1, ceil_div(o.global_batch, world));
    const std::int64_t typical = o.micro_batch_cap > 0 ? std::min(o.micro_batch_cap, per_rank) : per_rank;
    l.shard_size = o.shard_size > 0 ? o.shard_size : dds::default_shard_size(o.dataset_size, typical);
    l.seed = o.seed;
    l.shuffle_shards = o.shuffle_shards;
    l.shuffle_within_shard = o.shuffle_within_shard;
    l.max_epochs = o.max_epochs;
    return l;
  }

  [[nodiscard]] int rank() const { return comm.rank(); }

  std::vector<double> priors;  // device priors of every rank (0 = unknown)

  void gather_caps() {
    std::int64_t mine = opt.micro_batch_cap > 0 ? opt.micro_batch_cap : opt.global_batch;
    caps.assign(static_cast<std::size_t>(comm.size()), 0);
    ANTDT_CHECK_MPI(MPI_Allgather(&mine, 1, MPI_INT64_T, caps.data(), 1, MPI_INT64_T, comm.get()));
    priors.assign(static_cast<std::size_t>(comm.size()), 0.0);
    ANTDT_CHECK_MPI(MPI_Allgather(&opt.device_prior, 1, MPI_DOUBLE, priors.data(), 1, MPI_DOUBLE, comm.get()));
  }

  [[nodiscard]] bool have_priors() const {
    return std::any_of(priors.begin(), priors.end(), [](double p) { return p > 0; });
  }

  // The Controller's options follow from the session's; fixed once the caps are gathered.
  void resolve_controller_options() {
    controller_opt = opt.controller;
    controller_opt.global_batch = opt.global_batch;
    controller_opt.caps = caps;
    controller_opt.world_size = comm.size();
    controller_opt.cost.gradient_bytes = opt.gradient_bytes;
  }

  void broadcast_plan(Plan& p) {
    std::vector<std::byte> bytes;
    if (comm.is_root()) {
      detail::ByteWriter w;
      encode_plan(p, w);
      bytes = w.take();
    }
    std::uint64_t n = bytes.size();
    ANTDT_CHECK_MPI(MPI_Bcast(&n, 1, MPI_UINT64_T, 0, comm.get()));
    bytes.resize(n);
    ANTDT_CHECK_MPI(MPI_Bcast(bytes.data(), static_cast<int>(n), MPI_BYTE, 0, comm.get()));
    detail::ByteReader r(bytes);
    p = decode_plan(r);
  }

  // Samples each rank will need per step from the next step on: the plan in force, or a
  // newer issued plan where it asks for more (it may take effect before the next top-up).
  std::vector<std::int64_t> upcoming_demand() const {
    std::vector<std::int64_t> demand = plan.batch;
    const Plan& latest = controller->plan();
    for (std::size_t i = 0; i < demand.size() && i < latest.batch.size(); ++i)
      demand[i] = std::max(demand[i], latest.batch[i]);
    return demand;
  }

  // Root's reply to a control exchange. `new_plan` may be null.
  std::vector<std::byte> make_reply(const Plan* new_plan, const std::vector<dds::Grant>& grants, bool done,
                                    double loss_sum, std::int64_t samples, std::int64_t correct, double max_compute) {
    detail::ByteWriter w;
    w.put<std::uint8_t>(new_plan ? 1 : 0);
    if (new_plan) encode_plan(*new_plan, w);
    dds::encode_grants(grants, w);
    w.put<std::int64_t>(coordinator->ledger().completed_epochs());
    w.put<std::int64_t>(committed_total);
    w.put<std::uint8_t>(done ? 1 : 0);
    w.put<double>(loss_sum);
    w.put<std::int64_t>(samples);
    w.put<std::int64_t>(correct);
    w.put<double>(max_compute);
    return w.take();
  }

  // Applies a reply on every rank; returns the summary fields it carries.
  StepSummary apply_reply(const std::vector<std::byte>& bytes) {
    detail::ByteReader r(bytes);
    StepSummary s;
    if (r.get<std::uint8_t>() != 0) {
      Plan p = decode_plan(r);
      s.plan_changed = true;
      pending = std::move(p);
    }
    client.add(dds::decode_grants(r), rank());
    completed_epochs = r.get<std::int64_t>();
    committed_total = r.get<std::int64_t>();
    finished = r.get<std::uint8_t>() != 0;
    s.loss_sum = r.get<double>();
    s.samples = r.get<std::int64_t>();
    s.correct = r.get<std::int64_t>();
    s.max_compute_seconds = r.get<double>();
    s.completed_epochs = completed_epochs;
    return s;
  }

  bool reached_end_after(std::int64_t next_step) const {
    if (opt.max_steps > 0 && next_step >= opt.max_steps) return true;
    return coordinator->ledger().exhausted();
  }

  // The first exchange: grants for the first steps. Collective.
  void start() {
    if (started) return;
    const std::vector<std::byte> no_report;
    auto reply = channel.exchange(no_report, [&](const std::vector<std::span<const std::byte>>&) {
      const bool done = reached_end_after(step);
      std::vector<dds::Grant> grants;
      if (!done) grants = coordinator->grant(upcoming_demand());
      return make_reply(nullptr, grants, done, 0.0, 0, 0, 0.0);
    });
    apply_reply(reply);
    started = true;
    t_last_end = Clock::now();
  }

  // Whether the issued plan is in force by step `at`.
  [[nodiscard]] bool pending_due(std::int64_t at) const { return pending && pending->effective_step <= at; }

  void apply_pending_plan() {
    if (pending_due(step)) {
      plan = std::move(*pending);
      pending.reset();
      if (!comm.is_root()) history.push_back(plan);
      ANTDT_LOG(debug) << "step " << step << ": applying plan v" << plan.version;
    }
  }

  StepRecord make_record(const std::vector<RankStepStats>& stats, double loss_sum) const {
    StepRecord rec;
    rec.step = step;
    rec.start_seconds = seconds_between(t_session, t_begin);  // rank 0's clock: data wait starts here
    rec.wall_seconds = seconds_between(t_last_end, Clock::now());
    rec.ranks = stats;
    rec.batch = plan.batch;
    rec.plan_version = plan.version;
    rec.predicted_seconds = controller->predicted_step_seconds();
    rec.loss_sum = loss_sum;
    return rec;
  }
};

Session::Session(MPI_Comm comm, SessionOptions options) : impl_(std::make_unique<Impl>(comm, std::move(options))) {
  auto& s = *impl_;
  log::set_rank(s.comm.rank(), s.comm.size());
  s.gather_caps();
  s.resolve_controller_options();
  s.plan = equal_plan(s.opt.global_batch, s.caps, 0);
  if (s.have_priors() && s.opt.controller.policy != "static") {
    // A table of GPU generations gives a first split before anything is measured.
    s.plan = initial_plan(s.opt.global_batch, std::vector<double>(s.priors.size(), 0.0), s.caps, s.priors, 0);
  }
  if (s.comm.is_root()) {
    s.coordinator = std::make_unique<dds::Coordinator>(s.ledger_opt, s.comm.size(), s.opt.prefetch_steps);
    s.controller = std::make_unique<Controller>(s.controller_opt, s.plan);
    s.plan = s.controller->plan();
    s.history.push_back(s.plan);
    ANTDT_LOG(info) << "session: " << s.comm.size() << " ranks, N=" << s.opt.dataset_size
                    << ", B=" << s.opt.global_batch << ", shard=" << s.ledger_opt.shard_size
                    << ", policy=" << s.controller_opt.policy
                    << (s.emulator.emulated() ? ", EMULATED: " + s.opt.emulation.describe() : std::string());
  }
  s.broadcast_plan(s.plan);
}

Session::~Session() = default;

double Session::probe(const std::function<void(std::int64_t)>& micro_step, int repetitions) {
  auto& s = *impl_;
  if (s.started) throw UsageError("Session::probe must be called before the first begin_step");
  if (repetitions < 1) throw UsageError("Session::probe: repetitions must be at least 1");
  const auto my_cap = s.caps[static_cast<std::size_t>(s.rank())];
  const std::int64_t n = std::max<std::int64_t>(1, std::min(my_cap, ceil_div(s.opt.global_batch, s.comm.size())));
  micro_step(n);  // warm-up: first-touch allocations, cuBLAS handles
  std::vector<double> times;
  for (int i = 0; i < repetitions; ++i) {
    const auto t0 = Clock::now();
    micro_step(n);
    const double measured = seconds_between(t0, Clock::now());
    // Emulated speeds apply to the probe as to every step (without transients: step -1).
    const double target = s.emulator.target_compute_seconds(measured, n, -1);
    if (target > measured) wait_for(target - measured);
    times.push_back(std::max(target, measured));
  }
  std::nth_element(times.begin(), times.begin() + static_cast<long>(times.size() / 2), times.end());
  const double x = static_cast<double>(n) / std::max(1e-12, times[times.size() / 2]);
  std::vector<double> all(static_cast<std::size_t>(s.comm.size()));
  ANTDT_CHECK_MPI(MPI_Allgather(&x, 1, MPI_DOUBLE, all.data(), 1, MPI_DOUBLE, s.comm.get()));
  if (s.comm.is_root()) {
    Plan p = s.controller_opt.policy == "static" ? s.plan : initial_plan(s.opt.global_batch, all, s.caps, s.priors, 0);
    p.reason = "planner: initial split from a " + std::to_string(repetitions) + "-step probe";
    p.effective_step = 0;
    s.plan = s.controller->install_plan(std::move(p), -1);
    s.history.assign(1, s.plan);
    std::string shares;
    for (auto b : s.plan.batch) shares += (shares.empty() ? "" : ",") + std::to_string(b);
    CostModel cost(s.controller_opt.cost);
    ANTDT_LOG(info) << "probe: x_i measured, initial split [" << shares << "], predicted step "
                    << cost.predict_step_seconds(s.plan, all) * 1e3 << " ms";
  }
  s.broadcast_plan(s.plan);
  return x;
}

StepWork Session::begin_step() {
  auto& s = *impl_;
  if (s.in_step) throw UsageError("Session::begin_step called twice without end_step");
  s.start();
  if (s.finished) throw UsageError("Session::begin_step called after the session finished (check finished())");
  s.apply_pending_plan();
  StepWork w;
  w.step = s.step;
  w.epoch = s.completed_epochs;
  w.plan_version = s.plan.version;
  const auto r = static_cast<std::size_t>(s.rank());
  w.samples = s.client.take(s.plan.batch[r]);
  w.micro_batches = split_micro_batches(static_cast<std::int64_t>(w.samples.size()), s.plan.micro_batch_cap[r]);
  s.samples_now = static_cast<std::int64_t>(w.samples.size());
  s.micro_steps_now = static_cast<std::int32_t>(w.micro_batches.size());
  s.in_step = true;
  s.compute_marked = false;
  s.data_wait_s = s.compute_s = s.reduce_s = 0;
  s.t_begin = s.t_data_ready = Clock::now();
  return w;
}

std::vector<std::int64_t> Session::next_samples() const {
  const auto& s = *impl_;
  if (s.finished) return {};
  const std::int64_t next = s.in_step ? s.step + 1 : s.step;
  const Plan& p = s.pending_due(next) ? *s.pending : s.plan;
  const auto r = static_cast<std::size_t>(s.rank());
  return r < p.batch.size() ? s.client.peek(p.batch[r]) : std::vector<std::int64_t>{};
}

void Session::mark_data_ready() {
  auto& s = *impl_;
  s.t_data_ready = Clock::now();
  s.data_wait_s = seconds_between(s.t_begin, s.t_data_ready);
}

void Session::mark_compute_done(double measured_seconds) {
  auto& s = *impl_;
  if (s.compute_marked) return;
  const double measured = measured_seconds >= 0 ? measured_seconds : seconds_between(s.t_data_ready, Clock::now());
  const double target = s.emulator.target_compute_seconds(measured, s.samples_now, s.step);
  if (target > measured) wait_for(target - measured);
  s.compute_s = std::max(measured, target);
  s.compute_marked = true;
}

void Session::reduce_sums(float* buffer, std::int64_t count, GradientReducer& reducer) {
  auto& s = *impl_;
  mark_compute_done();
  const auto t0 = Clock::now();
  reducer.allreduce_sum(buffer, count);
  s.reduce_s += seconds_between(t0, Clock::now());
}

void Session::reduce_sums(OverlappedReduction& reduction) {
  auto& s = *impl_;
  mark_compute_done();
  const auto t0 = Clock::now();
  reduction.finish();
  s.reduce_s += seconds_between(t0, Clock::now());
}

std::int64_t Session::reduce(std::span<float> gradient_sums, std::int64_t local_samples) {
  auto& s = *impl_;
  mark_compute_done();
  const auto t0 = Clock::now();
  // One fused reduction: the count rides in a trailing slot (exact in float up to 2^24).
  std::vector<float> fused(gradient_sums.size() + 1);
  std::copy(gradient_sums.begin(), gradient_sums.end(), fused.begin());
  fused.back() = static_cast<float>(local_samples);
  ANTDT_CHECK_MPI(
      MPI_Allreduce(MPI_IN_PLACE, fused.data(), static_cast<int>(fused.size()), MPI_FLOAT, MPI_SUM, s.comm.get()));
  const auto total = static_cast<std::int64_t>(std::llround(fused.back()));
  const float scale = total > 0 ? 1.0f / static_cast<float>(total) : 0.0f;
  for (std::size_t i = 0; i < gradient_sums.size(); ++i) gradient_sums[i] = fused[i] * scale;
  s.reduce_s += seconds_between(t0, Clock::now());
  return total;
}

StepSummary Session::end_step(double loss_sum, std::int64_t correct) {
  auto& s = *impl_;
  if (!s.in_step) throw UsageError("Session::end_step called without begin_step");
  mark_compute_done();
  Report rep{};
  rep.step = s.step;
  rep.consumed = s.samples_now;
  rep.correct = correct;
  rep.plan_version = s.plan.version;
  rep.compute_seconds = s.compute_s;
  rep.data_wait_seconds = s.data_wait_s;
  rep.reduce_seconds = s.reduce_s;
  rep.loss_sum = loss_sum;
  rep.micro_steps = s.micro_steps_now;
  const auto* rb = reinterpret_cast<const std::byte*>(&rep);

  auto reply = s.channel.exchange(
      std::span<const std::byte>(rb, sizeof rep), [&](const std::vector<std::span<const std::byte>>& reports) {
        const auto n = reports.size();
        std::vector<RankStepStats> stats(n);
        std::vector<std::int64_t> consumed(n);
        double loss = 0, max_compute = 0;
        std::int64_t samples = 0, corr = 0;
        for (std::size_t i = 0; i < n; ++i) {
          Report r{};
          std::memcpy(&r, reports[i].data(), sizeof r);
          if (r.step != s.step || r.plan_version != s.plan.version) {
            throw Error("Session: rank " + std::to_string(i) + " is at step " + std::to_string(r.step) + " plan v" +
                        std::to_string(r.plan_version) + " but rank 0 is at step " + std::to_string(s.step) +
                        " plan v" + std::to_string(s.plan.version) + " (ranks must call the step API in lockstep)");
          }
          stats[i] =
              RankStepStats{r.compute_seconds, r.data_wait_seconds, r.reduce_seconds, 0.0, r.consumed, r.micro_steps};
          consumed[i] = r.consumed;
          loss += r.loss_sum;
          samples += r.consumed;
          corr += r.correct;
          max_compute = std::max(max_compute, r.compute_seconds);
        }
        for (auto& st : stats) st.idle_seconds = max_compute - st.compute_seconds;
        // Every rank has returned from the reduction before it sent its report, so the samples
        // of this step may be committed now (invariant 1).
        const auto t_dds = Clock::now();
        const auto result = s.coordinator->commit_step(consumed);
        s.dds_seconds += seconds_between(t_dds, Clock::now());
        s.committed_total += result.committed;
        s.records.push_back(s.make_record(stats, loss));
        std::optional<Plan> next = s.controller->on_step(s.step, stats);
        if (next) {
          s.history.push_back(*next);
          ANTDT_LOG(info) << "step " << s.step << ": plan v" << next->version << " from step " << next->effective_step
                          << ": " << next->reason << " (cost model: " << s.controller->predicted_step_seconds() * 1e3
                          << " ms/step predicted; measured median " << s.controller->monitor().step_seconds() * 1e3
                          << " ms under the old plan)";
        }
        const bool done = s.reached_end_after(s.step + 1);
        std::vector<dds::Grant> grants;
        if (!done) {
          const auto t_grant = Clock::now();
          grants = s.coordinator->grant(s.upcoming_demand());  // controller->plan() is `next` if one was issued
          s.dds_seconds += seconds_between(t_grant, Clock::now());
        }
        return s.make_reply(next ? &*next : nullptr, grants, done, loss, samples, corr, max_compute);
      });
  StepSummary summary = s.apply_reply(reply);
  const auto now = Clock::now();
  summary.step = s.step;
  summary.step_seconds = seconds_between(s.t_last_end, now);
  s.t_last_end = now;
  s.in_step = false;
  ++s.step;
  return summary;
}

bool Session::finished() const noexcept { return impl_->finished; }

void Session::save(CheckpointWriter& writer) const {
  const auto& s = *impl_;
  if (!s.comm.is_root()) return;
  if (s.in_step) throw UsageError("Session::save must be called between steps (after end_step)");
  writer.put_bytes("antdt/dds", s.coordinator->serialize());
  writer.put_bytes("antdt/controller", s.controller->serialize());
  detail::ByteWriter plans;
  encode_plan(s.plan, plans);
  plans.put<std::uint8_t>(s.pending ? 1 : 0);
  if (s.pending) encode_plan(*s.pending, plans);
  writer.put_bytes("antdt/plan", plans.take());
  writer.put_int64("antdt/step", s.step);
  writer.put_int64("antdt/world_size", s.comm.size());
  writer.put_int64("antdt/dataset_size", s.opt.dataset_size);
  writer.put_int64("antdt/global_batch", s.opt.global_batch);
  writer.put_int64("antdt/completed_epochs", s.completed_epochs);
  writer.put_int64("antdt/committed_total", s.committed_total);
  writer.put_uint64s("antdt/seeds", std::vector<std::uint64_t>{s.opt.seed, s.opt.emulation.seed});
  writer.put_string("antdt/policy", s.controller_opt.policy);
}

void Session::restore(const CheckpointReader* reader) {
  auto& s = *impl_;
  if (s.started) throw UsageError("Session::restore must be called before the first begin_step");
  // step, completed epochs, committed, ok, and the ledger's sample order (shard size and
  // shuffle flags come from the checkpoint: the epoch order must not change on resume).
  std::int64_t header[8] = {0, 0, 0, 0, 0, 0, 0, 0};  // [7]: nothing left to do
  std::string error;
  if (s.comm.is_root()) {
    try {
      if (!reader) throw UsageError("Session::restore: rank 0 needs a CheckpointReader");
      const auto n = reader->int64("antdt/dataset_size");
      if (n != s.opt.dataset_size) {
        throw CheckpointError("checkpoint " + reader->path() + " was taken on a data set of " + std::to_string(n) +
                              " samples, but this run has " + std::to_string(s.opt.dataset_size));
      }
      const auto saved_world = reader->int64("antdt/world_size");
      const auto seeds = reader->uint64s("antdt/seeds", 2);
      if (seeds[0] != s.opt.seed) {
        throw CheckpointError("checkpoint " + reader->path() + " used data seed " + std::to_string(seeds[0]) +
                              " but this run uses " + std::to_string(s.opt.seed) + " (the epoch order would change)");
      }
      s.coordinator = std::make_unique<dds::Coordinator>(
          dds::Coordinator::restore(reader->bytes("antdt/dds"), s.comm.size(), s.opt.prefetch_steps));
      if (s.coordinator->ledger().options().max_epochs != s.opt.max_epochs) {
        // The run's own limit wins: a resumed job may be asked to train longer.
        s.coordinator->set_max_epochs(s.opt.max_epochs);
      }
      s.controller =
          std::make_unique<Controller>(Controller::restore(reader->bytes("antdt/controller"), s.controller_opt));
      const auto plan_bytes = reader->bytes("antdt/plan");
      detail::ByteReader pr(plan_bytes);
      Plan saved = decode_plan(pr);
      std::optional<Plan> saved_pending;
      if (pr.get<std::uint8_t>() != 0) saved_pending = decode_plan(pr);
      const auto saved_batch = reader->int64("antdt/global_batch");
      const auto check_saved = [&](const Plan& p) {
        if (auto problem = plan_problem(p); !problem.empty()) {
          throw CheckpointError("checkpoint " + reader->path() + ": the saved plan is invalid: " + problem);
        }
        if (p.world_size() != saved_world || p.global_batch != saved_batch) {
          throw CheckpointError("checkpoint " + reader->path() + ": the saved plan is for " +
                                std::to_string(p.world_size()) + " ranks and B = " + std::to_string(p.global_batch) +
                                ", not the checkpoint's " + std::to_string(saved_world) +
                                " ranks and B = " + std::to_string(saved_batch));
        }
      };
      check_saved(saved);
      if (saved_pending) check_saved(*saved_pending);
      const bool same_shape = saved_world == s.comm.size() && saved_batch == s.opt.global_batch;
      if (same_shape) {
        s.plan = saved;
        s.pending = saved_pending;
      } else {
        s.plan = s.controller->plan();
        s.pending.reset();
        ANTDT_LOG(info) << "elastic restore: checkpoint from " << saved_world << " ranks, now " << s.comm.size()
                        << "; re-planned: " << s.plan.reason;
      }
      s.history.assign(1, s.plan);
      header[0] = reader->int64("antdt/step");
      header[1] = reader->int64("antdt/completed_epochs");
      header[2] = reader->int64("antdt/committed_total");
      header[3] = 1;
      const auto& saved_order = s.coordinator->ledger().options();
      header[4] = saved_order.shard_size;
      header[5] = saved_order.shuffle_shards ? 1 : 0;
      header[6] = saved_order.shuffle_within_shard ? 1 : 0;
      header[7] = s.reached_end_after(header[0]) ? 1 : 0;
      if (saved_order.shard_size != s.ledger_opt.shard_size) {
        ANTDT_LOG(info) << "restore: keeping the checkpoint's shard size " << saved_order.shard_size
                        << " (this run asked for " << s.ledger_opt.shard_size << ")";
      }
    } catch (const Error& e) {
      error = e.what();
    }
  }
  ANTDT_CHECK_MPI(MPI_Bcast(header, 8, MPI_INT64_T, 0, s.comm.get()));
  if (header[3] != 1) {
    if (s.comm.is_root()) throw CheckpointError(error);
    throw CheckpointError("restore failed on rank 0 (see its message)");
  }
  s.step = header[0];
  s.completed_epochs = header[1];
  s.committed_total = header[2];
  s.broadcast_plan(s.plan);
  std::uint8_t has_pending = s.pending ? 1 : 0;
  ANTDT_CHECK_MPI(MPI_Bcast(&has_pending, 1, MPI_UINT8_T, 0, s.comm.get()));
  if (has_pending) {
    if (!s.pending) s.pending = Plan{};
    s.broadcast_plan(*s.pending);
  } else {
    s.pending.reset();
  }
  s.finished = header[7] != 0;  // a run resumed past its limits has nothing to do
  s.ledger_opt.shard_size = header[4];
  s.ledger_opt.shuffle_shards = header[5] != 0;
  s.ledger_opt.shuffle_within_shard = header[6] != 0;
  s.client = dds::Client(s.ledger_opt);
  s.records.clear();
}

const Communicator& Session::comm() const noexcept { return impl_->comm; }
int Session::rank() const noexcept { return impl_->comm.rank(); }
int Session::size() const noexcept { return impl_->comm.size(); }
std::int64_t Session::step() const noexcept { return impl_->step; }
const Plan& Session::plan() const noexcept { return impl_->plan; }
const std::vector<Plan>& Session::plan_history() const noexcept { return impl_->history; }
const SessionOptions& Session::options() const noexcept { return impl_->opt; }
bool Session::emulated() const noexcept { return impl_->emulator.emulated(); }
const std::vector<StepRecord>& Session::records() const noexcept { return impl_->records; }
std::int64_t Session::samples_committed() const noexcept { return impl_->committed_total; }
double Session::dds_seconds() const noexcept { return impl_->dds_seconds; }
double Session::elapsed_seconds() const noexcept { return seconds_between(impl_->t_session, Clock::now()); }

std::vector<EpochCoverageReport> Session::coverage() const {
  std::vector<EpochCoverageReport> out;
  if (!impl_->coordinator) return out;
  for (const auto& c : impl_->coordinator->coverage()) out.push_back({c.epoch, c.committed, c.missing, c.duplicated});
  return out;
}

std::vector<double> Session::rank_throughput() const {
  std::vector<double> x;
  if (!impl_->controller) return x;
  for (int r = 0; r < impl_->comm.size(); ++r) x.push_back(impl_->controller->monitor().throughput(r));
  return x;
}

std::vector<RankAssessment> Session::assessments() const {
  if (!impl_->controller) return {};
  return impl_->controller->assessments();
}

}  // namespace antdt
