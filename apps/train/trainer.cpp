#include "train/trainer.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <numeric>

#include "antdt/checkpoint.hpp"
#include "antdt/error.hpp"
#include "antdt/log.hpp"
#include "cli/cli_common.hpp"
#include "cli/paths.hpp"
#include "train/restart.hpp"
#include "train/stop.hpp"

namespace antdt::train {

namespace {

std::string format_eta(double seconds) {
  if (!(seconds >= 0) || seconds > 99 * 3600) return "--:--:--";
  const auto s = static_cast<long>(seconds);
  char buf[32];
  std::snprintf(buf, sizeof buf, "%02ld:%02ld:%02ld", s / 3600, (s / 60) % 60, s % 60);
  return buf;
}

}  // namespace

void Trainer::reserve_batch() {
  const auto share = static_cast<std::size_t>((o.global_batch + session.size() - 1) / session.size());
  batch.features.reserve(share * static_cast<std::size_t>(data.train->dim()));
  batch.labels.reserve(share);
}

void Trainer::save_checkpoint() {
  cli::agree(session.comm().get(), [&] {
    if (!root()) return;
    const double t0 = MPI_Wtime();
    CheckpointWriter w(ckpt_dir, session.step());
    session.save(w);
    save_model_state(w, model);
    w.put_int64s("model/layers", layers);
    w.put_string("model/optimizer", o.optimizer);
    w.put_uint64s("rng/seeds", std::vector<std::uint64_t>{o.model_seed, o.data_seed, o.emulate_seed, o.synthetic_seed});
    w.put_string("run/job_id", job);
    if (session.step() == o.fail_in_checkpoint) {
      // Half-way: the temporary file holds most entries (HDF5 may buffer some), not committed.
      std::fprintf(stderr, "antdt-train: rank 0: --fail-in-checkpoint %lld: killing myself mid-write\n",
                   static_cast<long long>(o.fail_in_checkpoint));
      std::fflush(stderr);
      std::raise(SIGKILL);
    }
    const std::string path = w.commit(o.checkpoint_keep);
    ANTDT_LOG(debug) << "checkpoint " << path;
    // A restart is a checkpoint like this one plus a relaunch: both measured now (docs/nd.md).
    session.set_restart_cost(MPI_Wtime() - t0 + relaunch_seconds);
    last_checkpoint = path;
  });
  t_checkpoint = MPI_Wtime();
}

void Trainer::stop_non_finite(const std::string& what, double loss, bool updated) {
  const int world = session.size();
  std::vector<int> bad(static_cast<std::size_t>(world), 0);
  bad[static_cast<std::size_t>(session.rank())] = std::isfinite(loss) ? 0 : 1;
  ANTDT_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, bad.data(), world, MPI_INT, MPI_MAX, session.comm().get()));
  std::string ranks;
  int count = 0;
  for (int r = 0; r < world; ++r) {
    if (bad[static_cast<std::size_t>(r)] == 0) continue;
    if (++count <= 8) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
  }
  if (count > 8) ranks += " and " + std::to_string(count - 8) + " more";
  const std::string where = count > 0
                                ? "the local loss was not finite on rank" + std::string(count > 1 ? "s " : " ") + ranks
                                : "every rank's local loss was finite (the gradient overflowed or met a NaN itself)";
  const std::string newest =
      ckpt_dir.empty() ? std::string("no checkpoint directory") : "the newest checkpoint in " + ckpt_dir;
  cli::fail_together(session.rank(),
                     NonFiniteError("step " + std::to_string(session.step()) + ": " + what + " (NaN or Inf); " + where +
                                    (updated ? ". Stopped before checkpointing this step, so "
                                             : ". Stopped before this step changed or checkpointed anything, so ") +
                                    newest + " holds the last good state; lower --lr, or check the data"));
}

StepSummary Trainer::step() {
  if (o.fail_at_step >= 0 && session.step() == o.fail_at_step && session.rank() == o.fail_rank) {
    std::fprintf(stderr, "antdt-train: rank %d: --fail-at-step %lld: killing myself\n", o.fail_rank,
                 static_cast<long long>(o.fail_at_step));
    std::fflush(stderr);
    std::raise(SIGKILL);
  }
  const StepWork work = session.begin_step();
  trained.clear();
  if (work.pooled) {
    model.zero_gradients();
    const BatchResult total = pooled_compute();
    session.reduce_sums(model.gradient_buffer(), model.gradient_count(), *reduction.reducer);
    return finish_step(total);
  }
  if (sample_log) trained = work.samples;
  (void)ahead.fill(work.samples, batch);  // without a read-ahead started, a plain read
  session.mark_data_ready();
  if (read_ahead && !(o.steps > 0 && session.step() + 1 >= o.steps)) ahead.start(session.next_samples());
  model.zero_gradients();
  // Overlapped: the step's last micro-batch reports each layer as backward finishes it, and
  // its all-reduce starts then (a rank with no samples starts them all in reduce_sums).
  std::unique_ptr<OverlappedReduction> overlap =
      reduction.overlap
          ? reduction.reducer->begin_overlapped(model.gradient_buffer(), model.gradient_count(), reduction.buckets)
          : nullptr;
  const BatchResult total =
      accumulate_micro_batches(model, batch.features.data(), batch.labels.data(), work.micro_batches, overlap.get());
  model.synchronize();
  session.mark_compute_done(device.backend == Backend::cuda ? total.device_seconds : -1.0);
  if (overlap) {
    session.reduce_sums(*overlap);
  } else {
    session.reduce_sums(model.gradient_buffer(), model.gradient_count(), *reduction.reducer);
  }
  return finish_step(total);
}

StepSummary Trainer::finish_step(const BatchResult& total) {
  local_loss = total.loss_sum;
  // The reduced buffer is the same on every rank: so is this decision.
  if (!model.gradients_finite()) stop_non_finite("the reduced gradient is not finite", local_loss, false);
  model.apply_update();
  // Requests ride in this rank's report; rank 0 answers them for every rank at this step.
  if (stop_signal() != 0) session.request_stop();
  if (root() && checkpoint_by_time_due()) session.request_checkpoint();
  // Logged before this rank's report: rank 0 commits the step (and may checkpoint it) only once
  // every rank has reported, so a rank killed after its report has logged the step. (Logged
  // after end_step, a kill between the two lost the line of a step the checkpoint held: the
  // kill trials once counted 10 samples once in 2 epochs.)
  if (sample_log) log_samples(session.step());
  return session.end_step(total.loss_sum, total.correct);
}

bool Trainer::checkpoint_by_time_due() const {
  return !ckpt_dir.empty() && o.checkpoint_minutes > 0 && MPI_Wtime() - t_checkpoint >= o.checkpoint_minutes * 60.0;
}

// One line per step, written through before the step's report to rank 0: a rank killed later
// has still written every step that a checkpoint can hold. A step logged but not committed
// (the rank died before rank 0 heard from it) lies past the checkpoint the run resumes from.
void Trainer::log_samples(std::int64_t step) {
  std::string line = std::to_string(step);
  for (auto i : trained) line += " " + std::to_string(i);
  line += "\n";
  if (std::fputs(line.c_str(), sample_log.get()) < 0 || std::fflush(sample_log.get()) != 0)
    throw WriteError("cannot write --sample-log " + sample_log_path + ": " + std::strerror(errno));
}

void Trainer::open_sample_log() {
  if (o.sample_log.empty()) return;
  sample_log_path = o.sample_log + "." + std::to_string(session.rank());
  sample_log.reset(std::fopen(sample_log_path.c_str(), "w"));
  if (!sample_log) throw WriteError("cannot write --sample-log " + sample_log_path + ": " + std::strerror(errno));
}

BatchResult Trainer::pooled_compute() {
  BatchResult total;
  for (auto chunk = session.next_chunk(); !chunk.empty(); chunk = session.next_chunk()) {
    (void)ahead.fill(chunk, batch);
    if (sample_log) trained.insert(trained.end(), chunk.begin(), chunk.end());
    const double t0 = MPI_Wtime();
    const BatchResult r =
        model.accumulate(batch.features.data(), batch.labels.data(), static_cast<std::int64_t>(chunk.size()));
    model.synchronize();
    session.chunk_done(device.backend == Backend::cuda ? r.device_seconds : MPI_Wtime() - t0);
    total.loss_sum += r.loss_sum;
    total.correct += r.correct;
    total.samples += r.samples;
    total.device_seconds += r.device_seconds;
  }
  session.mark_compute_done();
  return total;
}

void Trainer::between_steps(const StepSummary& s) {
  // StepSummary::loss_sum is the same sum on every rank.
  if (!std::isfinite(s.loss_sum)) stop_non_finite("the training loss is not finite", local_loss, true);
  if (s.samples > 0) recent_loss.push_back(s.loss_sum / static_cast<double>(s.samples));
  if (recent_loss.size() > 10) recent_loss.erase(recent_loss.begin());
  const std::int64_t done = session.step();
  const bool eval_due = data.eval && o.eval_every > 0 && done % o.eval_every == 0;
  const bool checkpoint_due =
      ((o.checkpoint_every > 0 && done % o.checkpoint_every == 0) || s.checkpoint_requested) && !session.finished();
  if (eval_due || checkpoint_due) ahead.wait();  // HDF5 is not thread-safe
  if (eval_due) {
    eval_result = evaluate(model, *data.eval, session.comm(), cap, batch);
    if (root()) {
      ANTDT_LOG(info) << "step " << done << ": eval loss " << eval_result->loss << ", accuracy "
                      << eval_result->accuracy;
    }
  }
  if (checkpoint_due) save_checkpoint();
  const bool show = root() && (o.progress == "always" || (o.progress == "auto" && isatty(STDERR_FILENO)));
  if (show && (done % o.progress_every == 0 || session.finished())) progress(s, done);
}

void Trainer::progress(const StepSummary& s, std::int64_t done) const {
  const double elapsed = MPI_Wtime() - t_start;
  const auto x = session.rank_throughput();
  const double ideal = std::accumulate(x.begin(), x.end(), 0.0);
  const auto done_here = session.samples_committed() - committed_at_start;
  const double thr = static_cast<double>(done_here) / std::max(1e-9, elapsed);
  double eta = -1;
  if (o.steps > 0) {
    const auto steps_here = std::max<std::int64_t>(1, done - step_at_start);
    eta = elapsed / static_cast<double>(steps_here) * static_cast<double>(o.steps - done);
  }
  if (o.epochs > 0 && done_here > 0) {  // whichever limit comes first
    const double left = static_cast<double>(o.epochs * data.train->size() - session.samples_committed());
    eta = eta < 0 ? left / thr : std::min(eta, left / thr);
  }
  std::string split;
  for (auto b : session.plan().batch) split += (split.empty() ? "" : ",") + std::to_string(b);
  std::fprintf(stderr, "%sstep %lld epoch %lld | %.0f samples/s | loss %.4f | ETA %s | split [%s] | eff %.2f%s\n",
               job.empty() ? "" : ("[job " + job + "] ").c_str(), static_cast<long long>(done),
               static_cast<long long>(s.completed_epochs), thr, recent_loss.empty() ? 0.0 : recent_loss.back(),
               format_eta(eta).c_str(), split.c_str(), ideal > 0 ? thr / ideal : 0.0,
               session.emulated() ? " | EMULATED" : "");
}

double Trainer::run() {
  t_start = MPI_Wtime();
  committed_at_start = session.samples_committed();
  step_at_start = session.step();
  t_checkpoint = t_start;
  open_sample_log();
  while (!session.finished()) between_steps(step());
  const double wall = MPI_Wtime() - t_start;
  ahead.wait();
  // A stopped run is short of time (a time limit, a preemption): the checkpoint comes first,
  // and the evaluation waits for the run's real end.
  if (data.eval && !session.stopped()) eval_result = evaluate(model, *data.eval, session.comm(), cap, batch);
  if (!ckpt_dir.empty()) save_checkpoint();
  if (root() && session.stopped()) {
    const int sig = stop_signal();
    const std::string why = sig != 0 ? signal_name(sig) : std::string("a signal to another rank");
    if (ckpt_dir.empty()) {
      ANTDT_LOG(warn) << "stopped by " << why << " after step " << session.step() - 1
                      << " without a checkpoint (no --checkpoint-dir): this run's progress is not kept";
    } else {
      ANTDT_LOG(warn) << "stopped by " << why << " after step " << session.step() - 1 << "; checkpoint "
                      << last_checkpoint << "; continue with --resume (exit code " << cli::kExitStopped << ")";
    }
  }
  if (root() && session.restart_requested()) record_restart_exit(ckpt_dir, *session.restart_decision());
  return wall;
}

ReadAheadCounts Trainer::read_ahead_counts() {
  std::int64_t rows[2] = {ahead.rows_ahead(), ahead.rows_now()};
  ANTDT_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, rows, 2, MPI_INT64_T, MPI_SUM, session.comm().get()));
  return {rows[0], rows[1]};
}

void Trainer::report(double wall, const ReadAheadCounts& counts) {
  if (!root()) return;
  const std::int64_t rows[2] = {counts.ahead, counts.now};
  RunSummary sum;
  sum.backend = std::string(backend_name(device.backend));
  sum.device = device.name;
  sum.reducer = std::string(reduction.reducer->name());
  sum.pinned_batches = detail::is_page_locked(batch.features.data());
  sum.read_ahead = read_ahead;
  sum.reduce_overlap = reduction.overlap;
  sum.read_ahead_fraction =
      rows[0] + rows[1] > 0 ? static_cast<double>(rows[0]) / static_cast<double>(rows[0] + rows[1]) : 0.0;
  sum.job_id = job;
  sum.model_layers = layers;
  sum.non_finite_dropped = data.dropped;
  sum.eval_non_finite_dropped = data.eval_dropped;
  sum.wall_seconds = wall;
  summarize_session(session, sum);
  if (sum.stopped && stop_signal() != 0) sum.stopped_by = signal_name(stop_signal());
  sum.epochs_completed = static_cast<std::int64_t>(sum.coverage.size());
  sum.final_loss = recent_loss.empty() ? 0.0
                                       : std::accumulate(recent_loss.begin(), recent_loss.end(), 0.0) /
                                             static_cast<double>(recent_loss.size());
  if (eval_result) {
    sum.eval_loss = eval_result->loss;
    sum.eval_accuracy = eval_result->accuracy;
  }
  const auto params = model.parameters();
  sum.parameter_checksum = fnv1a_hex(params.data(), params.size() * sizeof(float));
  if (!o.quiet) std::fputs(summary_text(sum).c_str(), stdout);
  if (!o.summary_json.empty()) {
    cli::write_file_atomically({"--summary-json", expand_job_id(o.summary_json, job)}, summary_json(sum));
  }
}

}  // namespace antdt::train
