// antdt::Job: a run's life around the Session (docs/job.md).
//
// The order of a run, on every rank:
//   constructor   check the options and every output path (agreed), claim the checkpoint
//                 directory (rank 0: lock, refuse another run's), handle the stop signals,
//                 build the Session;
//   first step    resume (rank 0 reads the newest usable checkpoint; every rank restores
//                 antdt's state and the program's), then record the run's identity, probe,
//                 open the outputs;
//   each step     begin; the program computes and reduces; end (commit, Controller), then a
//                 checkpoint when one is due, the progress line;
//   the end       the final checkpoint, the restart or stop records, the report.
// Every check whose outcome may differ between ranks (a file, a directory) runs inside
// detail::agree, so a failure is one line and the same error on every rank.
#include "antdt/job.hpp"

#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <numeric>
#include <optional>

#include "antdt/error.hpp"
#include "antdt/report.hpp"
#include "checkpoint/checkpoint.hpp"
#include "core/error_kind.hpp"
#include "core/log.hpp"
#include "core/option_names.hpp"
#include "core/step_record.hpp"
#include "job/agree.hpp"
#include "job/device_reduction.hpp"
#include "job/job_access.hpp"
#include "job/paths.hpp"
#include "job/restart_records.hpp"
#include "job/segments.hpp"
#include "job/stop_signals.hpp"
#include "runtime/launcher.hpp"
#include "session/report_writers.hpp"
#include "session/session.hpp"
#include "session/session_setup.hpp"
#include "transport/collectives.hpp"
#include "transport/guard.hpp"

namespace antdt {

namespace {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string format_eta(double seconds) {
  if (!(seconds >= 0) || seconds > 99 * 3600) return "--:--:--";
  const auto s = static_cast<long>(seconds);
  char buf[32];
  std::snprintf(buf, sizeof buf, "%02ld:%02ld:%02ld", s / 3600, (s / 60) % 60, s % 60);
  return buf;
}

// A name the checkpoint store accepts and the job does not own, registered before the first
// step: a resume restores state as the first next_step() begins, so state added later would be
// saved in every checkpoint and never read back.
void check_state_name(const std::string& name, bool started) {
  if (started) {
    throw UsageError("Job::add_state: '" + name +
                     "' is registered after the first next_step(); a resume would never restore it: register "
                     "all state before the loop");
  }
  if (name.rfind("antdt/", 0) == 0 || name.rfind("job/", 0) == 0) {
    throw UsageError("Job::add_state: '" + name + "' is under antdt/ or job/, which antdt keeps for itself");
  }
  bool ok = !name.empty() && name.front() != '/' && name.back() != '/';
  for (char c : name)
    ok = ok && (std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-' || c == '/');
  if (!ok || name.find("//") != std::string::npos) {
    throw UsageError("Job::add_state: '" + name + "' is not a state name: use [A-Za-z0-9_.-] parts joined by '/'");
  }
}

}  // namespace

namespace detail {

void validate_job_options(const JobOptions& opt, int world, bool dataset_known) {
  const auto name = [](const char* key) { return detail::option_name(key); };
  const auto& c = opt.checkpoint;
  if (c.resume && c.dir.empty()) throw UsageError(name("resume") + " needs " + name("checkpoint-dir"));
  if (c.overwrite && c.dir.empty()) throw UsageError(name("checkpoint-overwrite") + " needs " + name("checkpoint-dir"));
  if (c.overwrite && c.resume) {
    throw UsageError(name("resume") + " continues the run in " + name("checkpoint-dir") + " and " +
                     name("checkpoint-overwrite") + " discards it; give one");
  }
  if (c.every_steps < 0) throw UsageError(name("checkpoint-every") + " must be >= 0");
  if (c.every_steps > 0 && c.dir.empty())
    throw UsageError(name("checkpoint-every") + " needs " + name("checkpoint-dir"));
  if (!(c.every_minutes >= 0.0) || c.every_minutes > 1e6)
    throw UsageError(name("checkpoint-minutes") + " must be in [0, 1e6]");
  if (c.keep < 1) throw UsageError(name("checkpoint-keep") + " must be at least 1");
  if (opt.faults.fail_in_checkpoint >= 0 && c.dir.empty())
    throw UsageError(name("fail-in-checkpoint") + " needs " + name("checkpoint-dir"));
  if (opt.faults.fail_at_step >= 0 && (opt.faults.fail_rank < 0 || opt.faults.fail_rank >= world)) {
    throw UsageError(name("fail-rank") + " " + std::to_string(opt.faults.fail_rank) + " is not a rank of this " +
                     std::to_string(world) + "-rank job");
  }
  const auto& out = opt.output;
  if (out.progress != "auto" && out.progress != "always" && out.progress != "never")
    throw UsageError(name("progress") + " '" + out.progress + "' is not auto, always or never");
  if (out.progress_every < 1) throw UsageError(name("progress-every") + " must be at least 1");
  if (!out.log_level.empty()) (void)log::parse_level(out.log_level);
  (void)parse_stop_signals(opt.stop_signals);
  validate_session_options(opt.session, world, dataset_known);
}

// Every rank checks the outputs it will write (rank 0 all of its own, every rank its sample
// log) against every input and every other output, through links.
void check_paths(const JobOptions& opt, const std::string& job_id, const std::string& ckpt_dir, int rank) {
  const std::string log_path =
      opt.output.sample_log.empty() ? "" : expand_job_id(opt.output.sample_log, job_id) + "." + std::to_string(rank);
  std::vector<cli::NamedPath> outputs = {
      {option_name("summary-json"), expand_job_id(opt.output.summary_json, job_id)},
      {option_name("metrics"), expand_job_id(opt.output.metrics, job_id)},
      {option_name("timeline"), expand_job_id(opt.output.timeline, job_id)},
      {option_name("sample-log") + " (rank " + std::to_string(rank) + ")", log_path}};
  std::vector<cli::NamedPath> inputs;
  for (const auto& [option, path] : opt.inputs) inputs.push_back({option, path});
  if (!opt.config_file.empty()) inputs.push_back({"--config", opt.config_file});
  cli::check_outputs(outputs, inputs, ckpt_dir);
  for (const auto& in : inputs) {
    std::error_code ec;
    if (!ckpt_dir.empty() && !in.path.empty() && std::filesystem::equivalent(in.path, ckpt_dir, ec)) {
      throw UsageError(option_name("checkpoint-dir") + " '" + ckpt_dir + "' is " + in.option + "; give it a directory");
    }
  }
}

void check_job_outputs(const JobOptions& opt, MPI_Comm comm) {
  const LaunchInfo launch = discover_launch(comm);
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  agree(comm, [&] { check_paths(opt, launch.job_id, expand_job_id(opt.checkpoint.dir, launch.job_id), rank); });
}

}  // namespace detail

// The program's state, as registered.
struct State {
  enum class Kind { floats, doubles, int64s, bytes } kind;
  std::string name;
  std::span<float> floats;
  std::span<double> doubles;
  std::span<std::int64_t> int64s;
  std::function<std::vector<std::byte>()> save;
  std::function<void(std::span<const std::byte>)> load;
};

struct Job::Impl {
  JobOptions opt;
  // Every wait of the job guarded from its first collective (transport/guard.hpp), unless the
  // program made the process's Guard itself.
  std::unique_ptr<detail::Guard> guard_owned;
  detail::GuardInstall guard_install;
  detail::Guard* guard;
  Communicator setup;  // before the Session exists: agreement on the checks
  LaunchInfo launch;
  std::string ckpt_dir;  // %j expanded
  std::optional<CheckpointDirectoryLock> lock;
  std::optional<RunIdentity> identity;  // rank 0: what to record once the resume is checked
  std::unique_ptr<detail::StopSignals> signals;
  std::unique_ptr<Session> session;
  std::unique_ptr<detail::DeviceReduction> device_reduction;  // reduce_device's, from its first call
  std::vector<State> states;
  std::vector<detail::CheckpointPart> parts;
  std::function<void(std::int64_t)> probe;
  std::vector<std::function<void(const StepSummary&)>> step_hooks;
  std::vector<std::function<void(RunSummary&)>> report_hooks;

  // Where the run stands.
  bool started = false, in_step = false, over = false, resumed = false;
  StepWork work;
  std::size_t next_batch = 0;  // dedicated steps: the next of work.micro_batches
  std::int64_t batch_offset = 0;
  std::int64_t handed = 0;            // samples handed out by next_micro_batch this step
  bool used_batches = false;          // next_micro_batch was called this step
  bool stop_requested = false;        // this rank called request_stop()
  bool told_sitting = false;          // rank 0 told the ranks that sit out of its error
  std::vector<std::int64_t> batch;    // the last micro-batch (pooled chunks)
  std::vector<std::int64_t> trained;  // --sample-log: this step's samples
  double loss_sum = 0.0;
  std::int64_t correct = 0;
  StepSummary last{};

  // Outputs and clocks.
  std::optional<MetricsWriter> metrics;
  std::optional<TimelineWriter> timeline;
  struct FileCloser {
    void operator()(std::FILE* f) const noexcept { (void)std::fclose(f); }
  };
  std::unique_ptr<std::FILE, FileCloser> sample_log;
  std::string sample_log_path;
  std::int64_t sample_log_whole = 0;  // the bytes of its whole lines written through
  double t_constructed = now_seconds();
  double start_seconds = 0.0;  // the process's start before the Job (JobAccess)
  double t_start = 0.0, t_checkpoint = 0.0, relaunch_seconds = 0.0;
  std::int64_t committed_at_start = 0, step_at_start = 0;
  int segment = 1;  // this process's segment of the run (job/segments.hpp; rank 0 counts, every rank learns it)
  std::vector<double> recent_loss;
  std::string last_checkpoint;

  Impl(JobOptions o, MPI_Comm comm)
      : opt(std::move(o)),
        guard_owned(detail::installed_guard() != nullptr
                        ? nullptr
                        : std::make_unique<detail::Guard>(
                              comm, opt.session.step_timeout_seconds, opt.session.wait_spin_seconds,
                              opt.session.node_name.empty() ? discover_node_name() : opt.session.node_name)),
        guard_install(guard_owned ? guard_owned.get() : detail::installed_guard()),
        guard(detail::installed_guard()),
        setup(Communicator::duplicate(comm)) {}

  [[nodiscard]] bool root() const { return setup.is_root(); }
  [[nodiscard]] MPI_Comm comm() const { return session ? session->comm().get() : setup.get(); }

  // --- construction -------------------------------------------------------------------
  [[nodiscard]] RunIdentity run_identity() const {
    RunIdentity id;
    for (const auto& f : opt.identity) id.fields.push_back(f);
    id.fields.emplace_back("samples", std::to_string(opt.session.dataset_size));
    id.fields.emplace_back("data_seed", std::to_string(opt.session.seed));
    return id;
  }

  // Rank 0 makes the checkpoint directory this run's: it locks it for the life of the run,
  // refuses one that holds another run's checkpoints (unless overwrite) or, when resuming, one
  // whose recorded identity differs. The identity itself is recorded after the resume.
  void claim_checkpoint_dir() {
    const auto name = [](const char* key) { return detail::option_name(key); };
    lock.emplace(ckpt_dir);
    const auto recorded = read_run_identity(ckpt_dir);
    const auto existing = list_checkpoints(ckpt_dir);
    identity = run_identity();
    if (opt.checkpoint.overwrite) {
      remove_checkpoints(ckpt_dir);
      if (!existing.empty()) {
        ANTDT_LOG(warn) << name("checkpoint-overwrite") << ": deleted the " << existing.size() << " checkpoints in "
                        << ckpt_dir;
      }
      return;
    }
    if (existing.empty()) return;
    if (!opt.checkpoint.resume) {
      throw UsageError(name("checkpoint-dir") + " '" + ckpt_dir + "' holds " + std::to_string(existing.size()) +
                       " checkpoints of an earlier run (newest " +
                       std::filesystem::path(existing.back()).filename().string() + "); pass " + name("resume") +
                       " to continue that run, or " + name("checkpoint-overwrite") + " to delete them and start over");
    }
    if (recorded) {
      if (const std::string diff = describe_difference(*recorded, *identity); !diff.empty()) {
        throw CheckpointError(name("resume") + ": " + name("checkpoint-dir") + " '" + ckpt_dir +
                              "' belongs to another run (other data, model or seeds): " + diff +
                              "; give this run its own " + name("checkpoint-dir"));
      }
    }
  }

  // --- the checkpoint -------------------------------------------------------------------
  void write_checkpoint() {
    detail::Guard::Scope scope(guard, detail::Phase::checkpoint, session->step());
    for (const auto& p : parts)
      if (p.prepare) p.prepare();
    detail::agree(comm(), [&] {
      if (!root()) return;
      const double t0 = now_seconds();
      CheckpointWriter w(ckpt_dir, session->step());
      session->save(w);
      for (const auto& s : states) {
        switch (s.kind) {
          case State::Kind::floats:
            w.put_floats(s.name, s.floats);
            break;
          case State::Kind::doubles:
            w.put_doubles(s.name, s.doubles);
            break;
          case State::Kind::int64s:
            w.put_int64s(s.name, s.int64s);
            break;
          case State::Kind::bytes:
            w.put_bytes(s.name, s.save());
            break;
        }
      }
      for (const auto& p : parts) p.save(w);
      w.put_string("job/program", opt.program);
      w.put_string("job/job_id", launch.job_id);
      if (session->step() == opt.faults.fail_in_checkpoint) {
        // Half-way: the temporary file holds most entries (HDF5 may buffer some), not committed.
        std::fprintf(stderr, "%s: rank 0: %s %lld: killing myself mid-write\n", opt.program.c_str(),
                     detail::option_name("fail-in-checkpoint").c_str(),
                     static_cast<long long>(opt.faults.fail_in_checkpoint));
        std::fflush(stderr);
        std::raise(SIGKILL);
      }
      last_checkpoint = w.commit(opt.checkpoint.keep);
      ANTDT_LOG(debug) << "checkpoint " << last_checkpoint;
      // A restart is a checkpoint like this one plus a relaunch: both measured (docs/nd.md).
      session->set_restart_cost(now_seconds() - t0 + relaunch_seconds);
    });
    t_checkpoint = now_seconds();
  }

  // Rank 0 reads every registered state (checking it is there, at its size); every rank gets it.
  // With no reader on rank 0 (a rank rejoins after sitting out), rank 0's own state goes out.
  void restore_states(const CheckpointReader* reader) {
    for (auto& s : states) {
      switch (s.kind) {
        case State::Kind::floats:
          if (reader) {
            const auto v = reader->floats(s.name, static_cast<std::int64_t>(s.floats.size()));
            std::copy(v.begin(), v.end(), s.floats.begin());
          }
          detail::bcast_in_pieces(s.floats.data(), static_cast<std::int64_t>(s.floats.size()), MPI_FLOAT,
                                  sizeof s.floats[0], 0, comm());
          break;
        case State::Kind::doubles:
          if (reader) {
            const auto v = reader->doubles(s.name, static_cast<std::int64_t>(s.doubles.size()));
            std::copy(v.begin(), v.end(), s.doubles.begin());
          }
          detail::bcast_in_pieces(s.doubles.data(), static_cast<std::int64_t>(s.doubles.size()), MPI_DOUBLE,
                                  sizeof s.doubles[0], 0, comm());
          break;
        case State::Kind::int64s:
          if (reader) {
            const auto v = reader->int64s(s.name, static_cast<std::int64_t>(s.int64s.size()));
            std::copy(v.begin(), v.end(), s.int64s.begin());
          }
          detail::bcast_in_pieces(s.int64s.data(), static_cast<std::int64_t>(s.int64s.size()), MPI_INT64_T,
                                  sizeof s.int64s[0], 0, comm());
          break;
        case State::Kind::bytes: {
          std::vector<std::byte> bytes;
          if (reader) {
            bytes = reader->bytes(s.name);
          } else if (root()) {
            bytes = s.save();  // rank 0's own state, to a rank that rejoins
          }
          bytes = detail::broadcast_vector(session->comm(), std::move(bytes), MPI_BYTE);
          detail::agree(comm(), [&] { s.load(bytes); });
          break;
        }
      }
    }
  }

  // Whether a checkpoint holds every registered state at its size (rank 0, before restoring).
  void check_states(const CheckpointReader& r) const {
    const auto name = [](const char* key) { return detail::option_name(key); };
    for (const auto& s : states) {
      if (!r.has(s.name)) {
        throw CheckpointError("checkpoint " + r.path() + " has no state '" + s.name +
                              "': it was written by another program or another version of it; give this run its own " +
                              name("checkpoint-dir"));
      }
      std::int64_t want = -1;
      if (s.kind == State::Kind::floats) want = static_cast<std::int64_t>(s.floats.size());
      if (s.kind == State::Kind::doubles) want = static_cast<std::int64_t>(s.doubles.size());
      if (s.kind == State::Kind::int64s) want = static_cast<std::int64_t>(s.int64s.size());
      if (want < 0) continue;
      std::int64_t have = 0;
      if (s.kind == State::Kind::floats) have = static_cast<std::int64_t>(r.floats(s.name).size());
      if (s.kind == State::Kind::doubles) have = static_cast<std::int64_t>(r.doubles(s.name).size());
      if (s.kind == State::Kind::int64s) have = static_cast<std::int64_t>(r.int64s(s.name).size());
      if (have != want) {
        throw CheckpointError("checkpoint " + r.path() + " holds state '" + s.name + "' of " + std::to_string(have) +
                              " values but this run registered " + std::to_string(want) +
                              " (another model size?); resume with the same model, or give this run its own " +
                              name("checkpoint-dir"));
      }
    }
  }

  // The newest usable checkpoint, restored on every rank; false when there is none.
  bool resume() {
    detail::Guard::Scope scope(guard, detail::Phase::resume, 0);
    for (const auto& p : parts)
      if (p.prepare) p.prepare();
    std::optional<std::string> latest;
    std::optional<CheckpointReader> reader;
    detail::agree(comm(), [&] {
      if (!root()) return;
      latest = find_latest_checkpoint(ckpt_dir);
      const auto all = list_checkpoints(ckpt_dir);
      if (!latest && !all.empty()) {
        CheckpointReader(all.back()).verify();
        throw CheckpointError("none of the " + std::to_string(all.size()) + " checkpoints in " + ckpt_dir +
                              " is usable");
      }
      if (!latest) return;
      reader.emplace(*latest);
      check_states(*reader);
      for (const auto& p : parts)
        if (p.check) p.check(*reader);
    });
    int have = latest ? 1 : 0;
    detail::bcast(&have, 1, MPI_INT, 0, comm());
    if (!have) {
      if (root()) {
        ANTDT_LOG(info) << detail::option_name("resume") << ": no checkpoint in " << ckpt_dir << ", starting fresh";
      }
      return false;
    }
    const CheckpointReader* r = reader ? &*reader : nullptr;
    session->restore(r);
    restore_states(r);
    for (const auto& p : parts) p.restore(r);
    if (root()) {
      ANTDT_LOG(info) << "resumed from " << *latest << " at step " << session->step();
    }
    return true;
  }

  // --- the steps ------------------------------------------------------------------------
  void start() {
    started = true;
    if (!ckpt_dir.empty() && opt.checkpoint.resume) resumed = resume();
    detail::agree(comm(), [&] {
      if (!root() || ckpt_dir.empty()) return;
      // Recorded only now: a resume that failed its checks leaves the earlier identity.
      const auto recorded = read_run_identity(ckpt_dir);
      if (!recorded || !describe_difference(*recorded, *identity).empty()) write_run_identity(ckpt_dir, *identity);
      if (resumed) relaunch_seconds += detail::note_relaunch(ckpt_dir);
      // A resumed segment keeps the outputs an earlier one left at its paths (the same %j
      // across a requeue): they move aside before this segment writes its own.
      segment = detail::begin_segment(ckpt_dir, resumed);
      if (segment == 1) return;
      for (const auto* path : {&opt.output.summary_json, &opt.output.metrics, &opt.output.timeline}) {
        const std::string kept = detail::keep_earlier_output(expand_job_id(*path, launch.job_id), segment - 1);
        if (!kept.empty()) {
          ANTDT_LOG(info) << "segment " << segment << " of the run: kept the earlier one's " << kept;
        }
      }
      // The sample logs of ranks this segment does not have (it runs on fewer): every other rank
      // keeps its own below.
      if (!opt.output.sample_log.empty()) {
        const std::string base = expand_job_id(opt.output.sample_log, launch.job_id);
        for (int r = setup.size();; ++r) {
          if (detail::keep_earlier_output(base + "." + std::to_string(r), segment - 1).empty()) break;
        }
      }
    });
    // Every rank keeps its own earlier sample log (the same path across a requeue) as rank 0
    // kept the other outputs: rank 0 knows the segment.
    detail::bcast(&segment, 1, MPI_INT, 0, comm());
    if (!resumed && opt.probe && probe && policy_rebalances(opt.session.controller.policy)) session->probe(probe);
    open_outputs();
    relaunch_seconds += start_seconds + (now_seconds() - t_constructed);
    t_start = t_checkpoint = now_seconds();
    committed_at_start = session->samples_committed();
    step_at_start = session->step();
  }

  void open_outputs() {
    detail::agree(comm(), [&] {
      if (!opt.output.sample_log.empty()) {
        sample_log_path = expand_job_id(opt.output.sample_log, launch.job_id) + "." + std::to_string(session->rank());
        if (segment > 1) {
          const std::string kept = detail::keep_earlier_output(sample_log_path, segment - 1);
          if (!kept.empty()) {
            ANTDT_LOG(debug) << "segment " << segment << " of the run: kept the earlier one's " << kept;
          }
        }
        sample_log.reset(std::fopen(sample_log_path.c_str(), "w"));
        if (!sample_log) {
          throw WriteError("cannot write " + detail::option_name("sample-log") + " " + sample_log_path + ": " +
                           std::strerror(errno));
        }
      }
      if (!root()) return;
      if (!opt.output.metrics.empty()) {
        const auto path = expand_job_id(opt.output.metrics, launch.job_id);
        metrics.emplace(path, metrics_format_for(path));
        session->add_record_sink([this](const StepRecord& r, const Plan&) { metrics->write(r); });
      }
      if (!opt.output.timeline.empty()) {
        timeline.emplace(expand_job_id(opt.output.timeline, launch.job_id));
        session->add_record_sink([this](const StepRecord& r, const Plan& p) { timeline->write(r, p); });
      }
    });
  }

  // One line per step, written through before the step's report to rank 0: a rank killed later
  // has still written every step that a checkpoint can hold.
  void log_samples() {
    if (!sample_log) return;
    const std::vector<std::int64_t>& done = used_batches || work.pooled ? trained : work.samples;
    std::string line = std::to_string(work.step);
    for (auto i : done) line += " " + std::to_string(i);
    line += "\n";
    if (std::fputs(line.c_str(), sample_log.get()) < 0 || std::fflush(sample_log.get()) != 0) {
      const int reason = errno;
      sample_log.reset();
      // A full disk took part of the line: cut the file back to its last whole line, so that a
      // reader finds no torn one (a torn "12 3 4" would read as samples 3 and 4 of step 12).
      (void)::truncate(sample_log_path.c_str(), static_cast<off_t>(sample_log_whole));
      cli::remove_if_empty(sample_log_path);
      errno = reason;
      throw WriteError("cannot write " + detail::option_name("sample-log") + " " + sample_log_path + ": " +
                       std::strerror(errno));
    }
    sample_log_whole += static_cast<std::int64_t>(line.size());
  }

  [[nodiscard]] bool checkpoint_by_time_due() const {
    return !ckpt_dir.empty() && opt.checkpoint.every_minutes > 0 &&
           now_seconds() - t_checkpoint >= opt.checkpoint.every_minutes * 60.0;
  }

  void end_step() {
    log_samples();
    // Requests ride in this rank's report; rank 0 answers them for every rank at this step.
    if (detail::stop_signal() != 0) session->request_stop();
    if (root() && checkpoint_by_time_due()) session->request_checkpoint();
    // A checkpoint by step count is a request too: rank 0 then settles the step (docs/protocol.md),
    // so the loss checked below is this step's and the checkpoint holds its commit.
    const auto every = opt.checkpoint.every_steps;
    if (!ckpt_dir.empty() && every > 0 && (session->step() + 1) % every == 0) session->request_checkpoint();
    last = session->end_step(loss_sum, correct);
    in_step = false;
    // StepSummary::loss_sum is the same sum on every rank: so is this decision.
    if (!std::isfinite(last.loss_sum)) {
      detail::throw_shared_error(detail::ErrorKind::non_finite,
                                 "step " + std::to_string(last.totals_step) +
                                     ": the training loss is not finite (NaN or Inf); stopped before checkpointing "
                                     "this step, so the newest checkpoint holds the last good state; lower the "
                                     "learning rate, or check the data",
                                 !root());
    }
    if (last.samples > 0) recent_loss.push_back(last.loss_sum / static_cast<double>(last.samples));
    if (recent_loss.size() > 10) recent_loss.erase(recent_loss.begin());
    for (const auto& hook : step_hooks) hook(last);
    const std::int64_t done = session->step();
    const bool due = (every > 0 && done % every == 0) || last.checkpoint_requested;
    if (!ckpt_dir.empty() && due && !session->finished()) write_checkpoint();
    progress(done);
  }

  void progress(std::int64_t done) const {
    const bool show =
        root() && (opt.output.progress == "always" || (opt.output.progress == "auto" && isatty(STDERR_FILENO)));
    if (!show || (done % opt.output.progress_every != 0 && !session->finished())) return;
    const double elapsed = now_seconds() - t_start;
    const auto x = session->rank_throughput();
    const double ideal = std::accumulate(x.begin(), x.end(), 0.0);
    const auto done_here = session->samples_committed() - committed_at_start;
    const double thr = static_cast<double>(done_here) / std::max(1e-9, elapsed);
    double eta = -1;
    const auto& so = opt.session;
    if (so.max_steps > 0) {
      const auto steps_here = std::max<std::int64_t>(1, done - step_at_start);
      eta = elapsed / static_cast<double>(steps_here) * static_cast<double>(so.max_steps - done);
    }
    if (so.max_epochs > 0 && done_here > 0) {  // whichever limit comes first
      const double left = static_cast<double>(so.max_epochs * so.dataset_size - session->samples_committed());
      eta = eta < 0 ? left / thr : std::min(eta, left / thr);
    }
    std::string split;
    for (auto b : session->plan().batch) split += (split.empty() ? "" : ",") + std::to_string(b);
    const std::string& job = launch.job_id;
    std::fprintf(stderr, "%sstep %lld epoch %lld | %.0f samples/s | loss %.4f | ETA %s | split [%s] | eff %.2f%s\n",
                 job.empty() ? "" : ("[job " + job + "] ").c_str(), static_cast<long long>(done),
                 static_cast<long long>(last.completed_epochs), thr, recent_loss.empty() ? 0.0 : recent_loss.back(),
                 format_eta(eta).c_str(), split.c_str(), ideal > 0 ? thr / ideal : 0.0,
                 session->emulated() ? " | EMULATED" : "");
  }

  void begin_step() {
    const auto& f = opt.faults;
    if (f.fail_at_step >= 0 && session->step() == f.fail_at_step && session->rank() == f.fail_rank) {
      std::fprintf(stderr, "%s: rank %d: %s %lld: killing myself\n", opt.program.c_str(), f.fail_rank,
                   detail::option_name("fail-at-step").c_str(), static_cast<long long>(f.fail_at_step));
      std::fflush(stderr);
      std::raise(SIGKILL);
    }
    work = session->begin_step();
    in_step = true;
    next_batch = 0;
    batch_offset = 0;
    handed = 0;
    used_batches = false;
    trained.clear();
    loss_sum = 0.0;
    correct = 0;
  }

  // What stopped the run, as rank 0 knows it: its own signal, its own request_stop(), or
  // another rank's (which rank 0 learns only as "some rank asked").
  [[nodiscard]] std::string stop_cause() const {
    if (const int sig = detail::stop_signal(); sig != 0) return detail::signal_name(sig);
    if (stop_requested) return "request_stop()";
    return "another rank (a signal or request_stop() there)";
  }

  // The end of the run: the final checkpoint, the records a restart or a stop leaves, the report.
  void finish() {
    detail::Guard::Scope scope(guard, detail::Phase::end, session->step());
    over = true;
    const double wall = now_seconds() - t_start;
    if (!ckpt_dir.empty()) write_checkpoint();
    if (root() && session->stopped()) {
      const std::string why = stop_cause();
      if (ckpt_dir.empty()) {
        ANTDT_LOG(warn) << "stopped by " << why << " after step " << session->step() - 1 << " without a checkpoint (no "
                        << detail::option_name("checkpoint-dir") << "): this run's progress is not kept";
      } else {
        ANTDT_LOG(warn) << "stopped by " << why << " after step " << session->step() - 1 << "; checkpoint "
                        << last_checkpoint << "; continue with " << detail::option_name("resume") << " (exit code "
                        << kExitStopped << ")";
      }
    }
    detail::agree(comm(), [&] {
      if (root() && session->restart_requested()) detail::record_restart_exit(ckpt_dir, *session->restart_decision());
    });
    detail::agree(comm(), [&] {
      report(wall);
      if (metrics) metrics->close();
      if (timeline) timeline->close();
    });
  }

  void report(double wall) {
    if (!root()) return;
    RunSummary sum;
    sum.job_id = launch.job_id;
    sum.wall_seconds = wall;
    summarize_session(*session, sum);
    // Where the gradients were reduced: a bridge that knows the model's device says so in its hook.
    sum.backend = device_reduction ? "cuda" : "host";
    if (device_reduction) sum.reducer = std::string(device_reduction->reducer());
    sum.segment = segment;
    sum.segment_first_step = step_at_start;
    // Empty where another rank asked: rank 0 knows only that one did.
    if (sum.stopped && (detail::stop_signal() != 0 || stop_requested)) sum.stopped_by = stop_cause();
    sum.epochs_completed = static_cast<std::int64_t>(sum.coverage.size());
    sum.final_loss = recent_loss.empty() ? 0.0
                                         : std::accumulate(recent_loss.begin(), recent_loss.end(), 0.0) /
                                               static_cast<double>(recent_loss.size());
    for (const auto& hook : report_hooks) hook(sum);
    if (!opt.output.quiet) std::fputs(summary_text(sum).c_str(), stdout);
    if (!opt.output.summary_json.empty()) {
      cli::write_file_atomically(
          {detail::option_name("summary-json"), expand_job_id(opt.output.summary_json, launch.job_id)},
          summary_json(sum));
    }
  }

  // Rank 0's error leaving a Job call reaches the ranks that sit out (docs/nd.md): they wait to
  // rejoin and share no collective with the others, so they hear of it only from rank 0, with
  // its kind and message, and every rank exits with its code (the others share it already).
  template <class Call>
  decltype(auto) telling_sitting(Call&& call) {
    try {
      return call();
    } catch (const std::exception& e) {
      tell_sitting(detail::error_kind(e), e.what());
      throw;
    }
  }
  void tell_sitting(detail::ErrorKind kind, const std::string& why) noexcept {
    if (told_sitting || !root() || guard == nullptr || !session) return;
    told_sitting = true;
    try {
      guard->tell_stop(session->sitting_ranks(), why, kind);
    } catch (const std::exception& e) {
      ANTDT_LOG(debug) << "telling the ranks that sit out: " << e.what();
    }
  }

  [[nodiscard]] std::int64_t step_samples() const {
    return used_batches || work.pooled ? handed : static_cast<std::int64_t>(work.samples.size());
  }
};

Job::Job(JobOptions options, MPI_Comm comm) : impl_(std::make_unique<Impl>(std::move(options), comm)) {
  auto& s = *impl_;
  if (!s.opt.output.log_level.empty()) {
    detail::agree(s.setup.get(), [&] { log::set_level(log::parse_level(s.opt.output.log_level)); });
  }
  log::set_rank(s.setup.rank(), s.setup.size());
  s.launch = discover_launch(s.setup.get());
  s.ckpt_dir = expand_job_id(s.opt.checkpoint.dir, s.launch.job_id);
  if (s.opt.session.node_name.empty()) s.opt.session.node_name = s.launch.node_name;
  // Every check is decided alike on every rank, or agreed: a bad input is one line and the
  // same error everywhere, before anything is read or trained.
  detail::agree(s.setup.get(), [&] {
    detail::validate_job_options(s.opt, s.setup.size(), true);
    detail::check_paths(s.opt, s.launch.job_id, s.ckpt_dir, s.setup.rank());
  });
  if (!s.ckpt_dir.empty()) {
    detail::agree(s.setup.get(), [&] {
      if (s.root()) s.claim_checkpoint_dir();
    });
    detail::set_stall_record_dir(s.ckpt_dir);
  }
  // From here a stop signal ends the run at a step boundary, with a checkpoint.
  s.signals = std::make_unique<detail::StopSignals>(detail::parse_stop_signals(s.opt.stop_signals));
  // The Job hands its registered state to a rank that rejoins after sitting out (docs/nd.md).
  s.opt.session.can_sit_out = true;
  // The rank --fail-at-step kills must reach that step: it never sits out.
  if (s.opt.faults.fail_at_step >= 0) s.opt.session.controller.never_sit_out = {s.opt.faults.fail_rank};
  s.session = std::make_unique<Session>(s.setup.get(), s.opt.session);
  s.session->set_share_state([&s] {
    s.restore_states(nullptr);
    for (const auto& p : s.parts) p.restore(nullptr);
  });
}

Job::~Job() {
  auto& s = *impl_;
  // A rank whose program leaves before the run is over (a return or a break out of the loop, an
  // exit) says so: the others stop at once, with an error that blames no node, instead of
  // waiting out the step timeout and naming this rank's node as stalled. Not while an error
  // unwinds: the ranks then end together.
  // Rank 0 ending with an error told the ranks that sit out as the error left a Job call
  // (telling_sitting); an error of the program's own, between calls, is told here, as runtime.
  const bool unwinding = std::uncaught_exceptions() > 0;
  if (!s.over && s.guard != nullptr && !s.told_sitting && (!unwinding || s.root())) {
    try {
      if (!unwinding) {
        s.guard->leave();
      } else {
        s.tell_sitting(detail::ErrorKind::runtime,
                       "rank 0 ended the run with an error (rank 0 says which) while this rank sat out");
      }
    } catch (const std::exception& e) {
      ANTDT_LOG(debug) << "leaving the run: " << e.what();
    }
  }
  // A StallError on its way out still needs the directory (run_main records the nodes there).
  if (std::uncaught_exceptions() == 0) detail::set_stall_record_dir({});
}

void Job::add_state(const std::string& name, std::span<float> values) {
  check_state_name(name, impl_->started);
  impl_->states.push_back({State::Kind::floats, name, values, {}, {}, {}, {}});
}
void Job::add_state(const std::string& name, std::span<double> values) {
  check_state_name(name, impl_->started);
  impl_->states.push_back({State::Kind::doubles, name, {}, values, {}, {}, {}});
}
void Job::add_state(const std::string& name, std::span<std::int64_t> values) {
  check_state_name(name, impl_->started);
  impl_->states.push_back({State::Kind::int64s, name, {}, {}, values, {}, {}});
}
void Job::add_state(const std::string& name, std::function<std::vector<std::byte>()> save,
                    std::function<void(std::span<const std::byte>)> load) {
  check_state_name(name, impl_->started);
  if (!save || !load) throw UsageError("Job::add_state: '" + name + "' needs both a save and a load function");
  impl_->states.push_back({State::Kind::bytes, name, {}, {}, {}, std::move(save), std::move(load)});
}

void Job::set_probe(std::function<void(std::int64_t)> micro_step) { impl_->probe = std::move(micro_step); }
void Job::on_step_end(std::function<void(const StepSummary&)> hook) { impl_->step_hooks.push_back(std::move(hook)); }
void Job::on_report(std::function<void(RunSummary&)> hook) { impl_->report_hooks.push_back(std::move(hook)); }

bool Job::next_step() {
  auto& s = *impl_;
  return s.telling_sitting([&]() -> bool {
    if (s.over) return false;
    if (s.signals && s.signals->launcher_gone()) {
      std::fprintf(stderr, "%s: rank %d: the launcher is gone (mpirun or srun ended); stopping\n",
                   s.opt.program.c_str(), s.setup.rank());
      std::fflush(stderr);
      std::_Exit(kExitStopped);
    }
    if (!s.started) {
      s.start();
    } else if (s.in_step) {
      s.end_step();
    }
    s.session->await_turn();  // a rank that sits out (a backup worker) waits here until it rejoins
    if (s.session->finished()) {
      s.finish();
      return false;
    }
    s.begin_step();
    return true;
  });
}

std::span<const std::int64_t> Job::next_micro_batch() {
  auto& s = *impl_;
  return s.telling_sitting([&]() -> std::span<const std::int64_t> {
    if (!s.in_step) throw UsageError("Job::next_micro_batch outside a step: call it after next_step() returned true");
    s.used_batches = true;
    if (s.work.pooled) {
      s.batch = s.session->next_chunk();
      if (s.batch.empty()) {
        s.session->mark_compute_done();
      } else {
        s.handed += static_cast<std::int64_t>(s.batch.size());
        if (s.sample_log) s.trained.insert(s.trained.end(), s.batch.begin(), s.batch.end());
      }
      return s.batch;
    }
    if (s.next_batch >= s.work.micro_batches.size()) return {};
    const auto n = s.work.micro_batches[s.next_batch++];
    const std::span<const std::int64_t> out(s.work.samples.data() + s.batch_offset, static_cast<std::size_t>(n));
    s.batch_offset += n;
    s.handed += n;
    if (s.sample_log) s.trained.insert(s.trained.end(), out.begin(), out.end());
    return out;
  });
}

std::int64_t Job::reduce(std::span<float> gradient_sums) {
  auto& s = *impl_;
  return s.telling_sitting([&] {
    if (!s.in_step) throw UsageError("Job::reduce outside a step: call it after next_step() returned true");
    const std::int64_t total = s.session->reduce(gradient_sums, s.step_samples(), "Job::reduce");
    // The reduced buffer is the same on every rank: so is this decision.
    check_finite(std::all_of(gradient_sums.begin(), gradient_sums.end(), [](float v) { return std::isfinite(v); }));
    return total;
  });
}

std::int64_t Job::reduce_device(float* device_sums, std::int64_t count, int device) {
  auto& s = *impl_;
  return s.telling_sitting([&] {
    if (!s.in_step) throw UsageError("Job::reduce_device outside a step: call it after next_step() returned true");
    if (count < 0 || (count > 0 && device_sums == nullptr)) {
      throw UsageError("Job::reduce_device: " + std::to_string(count) + " floats at " +
                       (device_sums ? "a device address" : std::string("a null address")));
    }
    if (!s.device_reduction) {
      s.device_reduction = detail::make_device_reduction(s.session->comm(), device);
      s.session->keep_every_rank();  // it keeps the communicator it was made with: no rank may sit out
    }
    if (device != s.device_reduction->device()) {
      throw UsageError("Job::reduce_device: gradients on CUDA device " + std::to_string(device) +
                       ", where the job's earlier steps reduced on device " +
                       std::to_string(s.device_reduction->device()) + ": keep the model on one device");
    }
    return s.device_reduction->reduce(*s.session, device_sums, count, s.step_samples());
  });
}

void Job::check_finite(bool finite) {
  const auto& s = *impl_;
  if (finite) return;
  detail::throw_shared_error(detail::ErrorKind::non_finite,
                             "step " + std::to_string(s.work.step) +
                                 ": the reduced gradient is not finite (NaN or Inf); stopped before this step "
                                 "changed or checkpointed anything, so the newest checkpoint holds the last good "
                                 "state; lower the learning rate, or check the data",
                             !s.root());
}

void Job::broadcast(std::span<std::byte> bytes, int root) {
  auto& s = *impl_;
  return s.telling_sitting([&] {
    // First the agreement, so that a root only some ranks got wrong is named, not a hang.
    detail::agree_on_call(s.comm(), "Job::broadcast",
                          {detail::CallShape::Type::bytes, static_cast<std::int64_t>(bytes.size()), root}, rank());
    if (root < 0 || root >= size()) {
      throw UsageError("Job::broadcast: root " + std::to_string(root) + " is not a rank of this " +
                       std::to_string(size()) + "-rank job");
    }
    // While ranks sit out, the steps' communicator holds the others, in rank order.
    int at = root;
    if (s.session && !s.session->sitting_ranks().empty()) {
      const auto& sitting = s.session->sitting_ranks();
      const auto before = std::lower_bound(sitting.begin(), sitting.end(), root);
      if (before != sitting.end() && *before == root) {  // every rank that takes part sees it: rank 0 says it
        detail::throw_shared_error(detail::ErrorKind::usage,
                                   "Job::broadcast: root " + std::to_string(root) +
                                       " sits out at this step (backup workers, docs/nd.md): broadcast from rank 0, "
                                       "which never sits out, or turn sitting out off (--backup-workers 0)",
                                   !s.root());
      }
      at = root - static_cast<int>(before - sitting.begin());
    }
    detail::bcast_in_pieces(bytes.data(), static_cast<std::int64_t>(bytes.size()), MPI_BYTE, 1, at, s.comm());
  });
}

std::int64_t Job::reduce(std::span<std::int64_t> fixed_point_sums) {
  auto& s = *impl_;
  return s.telling_sitting([&] {
    if (!s.in_step) throw UsageError("Job::reduce outside a step: call it after next_step() returned true");
    return s.session->reduce(fixed_point_sums, s.step_samples(), "Job::reduce");
  });
}

void Job::add_loss(double loss_sum, std::int64_t correct) {
  impl_->loss_sum += loss_sum;
  impl_->correct += correct;
}

void Job::request_stop() noexcept {
  impl_->stop_requested = true;
  impl_->session->request_stop();
}
void Job::request_checkpoint() noexcept { impl_->session->request_checkpoint(); }

int Job::exit_code() const noexcept {
  const auto& s = *impl_;
  if (s.session->stopped()) return kExitStopped;
  return s.session->restart_requested() ? kExitRestart : 0;
}

std::int64_t Job::step() const noexcept { return impl_->session->step(); }
std::int64_t Job::epoch() const noexcept { return impl_->work.epoch; }
const StepWork& Job::work() const noexcept { return impl_->work; }
bool Job::resumed() const noexcept { return impl_->resumed; }
bool Job::stopped() const noexcept { return impl_->session->stopped(); }
int Job::rank() const noexcept { return impl_->setup.rank(); }
int Job::size() const noexcept { return impl_->setup.size(); }
MPI_Comm Job::comm() const noexcept { return impl_->comm(); }
const JobOptions& Job::options() const noexcept { return impl_->opt; }
const std::vector<std::int64_t>& Job::split() const noexcept { return impl_->session->plan().batch; }

namespace detail {

Session& JobAccess::session(Job& job) { return *job.impl_->session; }
void JobAccess::add_checkpoint_part(Job& job, CheckpointPart part) { job.impl_->parts.push_back(std::move(part)); }
void JobAccess::set_start_seconds(Job& job, double seconds) { job.impl_->start_seconds = seconds; }

}  // namespace detail

}  // namespace antdt
