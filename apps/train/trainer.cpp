#include "train/trainer.hpp"

#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "antdt/error.hpp"
#include "antdt/report.hpp"
#include "checkpoint/checkpoint.hpp"
#include "core/error_kind.hpp"
#include "core/log.hpp"
#include "job/job_access.hpp"
#include "transport/guard.hpp"

namespace antdt::train {

void Trainer::reserve_batch() {
  const auto share = static_cast<std::size_t>((o.job.session.global_batch + session.size() - 1) / session.size());
  batch.features.reserve(share * static_cast<std::size_t>(data.train->dim()));
  batch.labels.reserve(share);
}

void Trainer::attach() {
  // The model's checkpoint entries (model/parameters, model/optimizer_state, ...) as they were
  // before the Job, so that its checkpoints read the same. HDF5 is not thread-safe: the
  // read-ahead is waited for before any checkpoint is written or read.
  detail::CheckpointPart part;
  part.prepare = [this] { ahead.wait(); };
  part.save = [this](CheckpointWriter& w) {
    save_model_state(w, model);
    w.put_int64s("model/layers", layers);
    w.put_string("model/optimizer", o.optimizer);
    const auto& s = o.job.session;
    w.put_uint64s("rng/seeds", std::vector<std::uint64_t>{o.model_seed, s.seed, s.emulation.seed, o.synthetic_seed});
  };
  part.check = [this](const CheckpointReader& r) {
    if (const auto saved = r.int64s("model/layers"); saved != layers) {
      std::string have, want;
      for (auto w : saved) have += (have.empty() ? "" : ",") + std::to_string(w);
      for (auto w : layers) want += (want.empty() ? "" : ",") + std::to_string(w);
      throw CheckpointError("checkpoint " + r.path() + " holds a model of shape " + have + " but this run's model is " +
                            want + " (" + (o.layers.empty() ? "from the data and --hidden" : "--layers") +
                            "); give the same widths to resume it");
    }
  };
  part.restore = [this](const CheckpointReader* r) { restore_model_state(r, model, session.comm()); };
  detail::JobAccess::add_checkpoint_part(job, std::move(part));

  // A few micro-steps on this rank's first samples time its speed for the planner.
  const std::int64_t n = std::min<std::int64_t>(
      {cap, data.train->size(), std::max<std::int64_t>(1, o.job.session.global_batch / session.size())});
  job.set_probe([this, n](std::int64_t m) {
    if (batch.labels.size() < static_cast<std::size_t>(n)) {
      std::vector<std::int64_t> idx(static_cast<std::size_t>(n));
      std::iota(idx.begin(), idx.end(), 0);
      batch.features.resize(static_cast<std::size_t>(n * data.train->dim()));
      batch.labels.resize(static_cast<std::size_t>(n));
      data.train->read(idx, batch.features.data(), batch.labels.data());
    }
    model.zero_gradients();
    (void)model.accumulate(batch.features.data(), batch.labels.data(), std::min(m, n));
    model.synchronize();
  });

  // Evaluation every --eval-every steps and at the end (not after a stop: a run short of time
  // checkpoints first, and evaluates at its real end); the read-ahead's rows at the end.
  job.on_step_end([this](const StepSummary& s) {
    const std::int64_t done = s.step + 1;
    const bool periodic = data.eval && o.eval_every > 0 && done % o.eval_every == 0 && !s.finished;
    const bool final = data.eval && s.finished && !s.stopped;
    if (periodic || final || s.finished) ahead.wait();
    if (periodic || final) {
      detail::Guard::Scope scope(detail::installed_guard(), detail::Phase::evaluation, s.step);
      eval_result = evaluate(model, *data.eval, session.comm(), cap, batch);
      if (root() && periodic) {
        ANTDT_LOG(info) << "step " << done << ": eval loss " << eval_result->loss << ", accuracy "
                        << eval_result->accuracy;
      }
    }
    if (s.finished) {
      std::int64_t rows[2] = {ahead.rows_ahead(), ahead.rows_now()};
      detail::allreduce(MPI_IN_PLACE, rows, 2, MPI_INT64_T, MPI_SUM, session.comm().get());
      rows_ahead = rows[0];
      rows_now = rows[1];
    }
  });
  job.on_report([this](RunSummary& sum) { report(sum); });
}

void Trainer::stop_non_finite(double loss) {
  const int world = session.size();
  std::vector<int> bad(static_cast<std::size_t>(world), 0);
  bad[static_cast<std::size_t>(session.rank())] = std::isfinite(loss) ? 0 : 1;
  detail::allreduce(MPI_IN_PLACE, bad.data(), world, MPI_INT, MPI_MAX, session.comm().get());
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
  const std::string& dir = o.job.checkpoint.dir;
  const std::string newest = dir.empty() ? std::string("no checkpoint directory") : "the newest checkpoint in " + dir;
  detail::throw_shared_error(detail::ErrorKind::non_finite,
                             "step " + std::to_string(session.step()) +
                                 ": the reduced gradient is not finite (NaN or Inf); " + where +
                                 ". Stopped before this step changed or checkpointed anything, so " + newest +
                                 " holds the last good state; lower --lr, or check the data",
                             session.rank() != 0);
}

void Trainer::step() {
  const StepWork& work = job.work();
  BatchResult total;
  if (work.pooled) {
    model.zero_gradients();
    total = pooled_compute();
    session.reduce_sums(model.gradient_buffer(), model.gradient_count(), *reduction.reducer);
  } else {
    (void)ahead.fill(work.samples, batch);  // without a read-ahead started, a plain read
    session.mark_data_ready();
    const auto steps = o.job.session.max_steps;
    if (read_ahead && !(steps > 0 && session.step() + 1 >= steps)) ahead.start(session.next_samples());
    model.zero_gradients();
    // Overlapped: the step's last micro-batch reports each layer as backward finishes it, and
    // its all-reduce starts then (a rank with no samples starts them all in reduce_sums).
    std::unique_ptr<OverlappedReduction> overlap =
        reduction.overlap
            ? reduction.reducer->begin_overlapped(model.gradient_buffer(), model.gradient_count(), reduction.buckets)
            : nullptr;
    total =
        accumulate_micro_batches(model, batch.features.data(), batch.labels.data(), work.micro_batches, overlap.get());
    model.synchronize();
    session.mark_compute_done(device.backend == Backend::cuda ? total.device_seconds : -1.0);
    if (overlap) {
      session.reduce_sums(*overlap);
    } else {
      session.reduce_sums(model.gradient_buffer(), model.gradient_count(), *reduction.reducer);
    }
  }
  // The reduced buffer is the same on every rank: so is this decision.
  if (!model.gradients_finite()) stop_non_finite(total.loss_sum);
  model.apply_update();
  job.add_loss(total.loss_sum, total.correct);
}

BatchResult Trainer::pooled_compute() {
  BatchResult total;
  for (auto chunk = job.next_micro_batch(); !chunk.empty(); chunk = job.next_micro_batch()) {
    (void)ahead.fill(chunk, batch);
    const BatchResult r =
        model.accumulate(batch.features.data(), batch.labels.data(), static_cast<std::int64_t>(chunk.size()));
    model.synchronize();
    total.loss_sum += r.loss_sum;
    total.correct += r.correct;
    total.samples += r.samples;
    total.device_seconds += r.device_seconds;
  }
  return total;
}

void Trainer::report(RunSummary& sum) const {
  sum.backend = std::string(backend_name(device.backend));
  sum.device = device.name;
  sum.reducer = std::string(reduction.reducer->name());
  sum.pinned_batches = detail::is_page_locked(batch.features.data());
  sum.read_ahead = read_ahead;
  sum.reduce_overlap = reduction.overlap;
  sum.read_ahead_fraction =
      rows_ahead + rows_now > 0 ? static_cast<double>(rows_ahead) / static_cast<double>(rows_ahead + rows_now) : 0.0;
  sum.model_layers = layers;
  sum.non_finite_dropped = data.dropped;
  sum.eval_non_finite_dropped = data.eval_dropped;
  if (eval_result) {
    sum.eval_loss = eval_result->loss;
    sum.eval_accuracy = eval_result->accuracy;
  }
  const auto params = model.parameters();
  sum.parameter_checksum = fnv1a_hex(params.data(), params.size() * sizeof(float));
}

}  // namespace antdt::train
