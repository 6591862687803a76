// antdt-train: data-parallel training of an MLP classifier with antdt's dynamic sharding,
// straggler-aware batch planning and exact weighted gradient reduction.
//
//   mpirun -np 4 antdt-train --data train.h5 --layers 32,64,10 --global-batch 256
//          --epochs 2 --policy dd --emulate-speed 1,1,1,0.33 --summary-json run.json
//
// Every option is also an ANTDT_* environment variable and a --config file key
// (train/options.cpp). The run, top to bottom: open the data, build the model, the session
// options, resume or probe, the steps, the report.
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <memory>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "antdt/antdt.hpp"
#include "antdt/checkpoint.hpp"
#include "antdt/data.hpp"
#include "antdt/model.hpp"
#include "antdt/planner.hpp"
#include "antdt/read_ahead.hpp"
#include "antdt/reduce.hpp"
#include "antdt/report.hpp"
#include "antdt/session.hpp"
#include "cli/cli_common.hpp"
#include "train/options.hpp"

namespace antdt::train {

namespace {

// All ranks learn whether any rank failed a local step (opening a file, say); the failing
// ranks print their own message. Keeps every rank out of a collective that would hang.
void agree(MPI_Comm comm, const std::function<void()>& local) {
  int bad = 0;
  std::string what;
  int code = 0;
  try {
    local();
  } catch (const UsageError& e) {
    bad = 1, code = cli::kExitUsage, what = e.what();
  } catch (const FileError& e) {
    bad = 1, code = cli::kExitUsage, what = e.what();
  } catch (const std::exception& e) {
    bad = 1, code = cli::kExitRuntime, what = e.what();
  }
  int codes[2] = {bad, code};
  int worst[2] = {0, 0};
  MPI_Allreduce(codes, worst, 2, MPI_INT, MPI_MAX, comm);
  if (worst[0]) {
    int rank = 0;
    MPI_Comm_rank(comm, &rank);
    if (bad) std::fprintf(stderr, "antdt-train: error (rank %d): %s\n", rank, what.c_str());
    throw cli::AgreedFailure{worst[1]};
  }
}

struct Data {
  std::unique_ptr<data::Dataset> train;
  std::unique_ptr<data::Dataset> eval;  // null without --eval-data
};

// Every rank opens the training set itself and reads only the samples it is given.
Data open_data(const TrainOptions& o, const std::vector<std::int64_t>& layers) {
  Data d;
  agree(MPI_COMM_WORLD, [&] {
    data::Hdf5Names names{o.features_name, o.labels_name};
    const auto mode = o.read_mode == "collective" ? data::ReadMode::collective : data::ReadMode::independent;
    if (!o.data.empty()) {
      d.train = std::make_unique<data::Hdf5Dataset>(o.data, names, mode, MPI_COMM_WORLD);
    } else {
      d.train = std::make_unique<data::InMemoryDataset>(data::make_synthetic(
          {o.synthetic_samples, layers.front(), static_cast<std::int32_t>(layers.back()), o.synthetic_seed}));
    }
    if (!o.eval_data.empty()) d.eval = std::make_unique<data::Hdf5Dataset>(o.eval_data, names, mode, MPI_COMM_WORLD);
    if (d.train->dim() != layers.front()) {
      throw UsageError("--layers starts with " + std::to_string(layers.front()) + " inputs but " +
                       (o.data.empty() ? std::string("the data") : o.data) + " has " + std::to_string(d.train->dim()) +
                       " features per sample");
    }
    if (d.train->num_classes() > layers.back()) {
      throw UsageError("--layers ends with " + std::to_string(layers.back()) +
                       " classes but the data has labels up to " + std::to_string(d.train->num_classes() - 1));
    }
    if (d.eval && d.eval->dim() != d.train->dim())
      throw UsageError("--eval-data has a different feature count than --data");
  });
  return d;
}

std::unique_ptr<Model> build_model(const TrainOptions& o, const std::vector<std::int64_t>& layers,
                                   const DeviceInfo& device) {
  MlpConfig mc;
  mc.layers = layers;
  mc.optimizer = parse_optimizer(o.optimizer);
  mc.learning_rate = o.lr;
  mc.momentum = o.momentum;
  mc.weight_decay = o.weight_decay;
  mc.seed = o.model_seed;
  return make_mlp(mc, device);
}

SessionOptions session_options(const TrainOptions& o, const data::Dataset& train, const Model& model, std::int64_t cap,
                               const DeviceInfo& device) {
  SessionOptions so;
  so.dataset_size = train.size();
  so.global_batch = o.global_batch;
  so.micro_batch_cap = cap;
  so.shard_size = o.shard_size;
  so.seed = o.data_seed;
  so.shuffle_within_shard = o.shuffle_within_shard;
  so.max_epochs = o.epochs;
  so.max_steps = o.steps;
  so.prefetch_steps = o.prefetch_steps;
  so.controller.policy = o.policy;
  so.controller.min_gain = o.min_gain;
  so.controller.min_interval = o.min_interval;
  so.controller.window = o.window;
  so.controller.persistence = o.persistence;
  if (!o.emulate_speed.empty()) so.emulation.speeds = parse_speeds(o.emulate_speed);
  if (!o.emulate_transient.empty()) parse_transient(o.emulate_transient, so.emulation);
  so.emulation.virtual_seconds_per_sample = o.virtual_device;
  so.emulation.seed = o.emulate_seed;
  so.gradient_bytes = model.gradient_count() * static_cast<std::int64_t>(sizeof(float));
  if (device.backend == Backend::cuda)
    so.device_prior = gpu_relative_throughput(device.compute_capability, device.name);
  return so;
}

// Each step's gradient reduction, and whether it overlaps the backward pass (docs/compute.md
// has the measurements behind auto). Every rank decides alike: same flags, same reducer.
struct Reduction {
  std::unique_ptr<GradientReducer> reducer;
  std::vector<GradientBucket> buckets;
  bool overlap = false;
};

Reduction make_reduction(const TrainOptions& o, const Session& session, Model& model, const DeviceInfo& device) {
  Reduction r;
  r.reducer = make_reducer(session.comm(), device);
  r.buckets = model.gradient_buckets();
  // auto leaves emulated stragglers alone: their stretch is a wait after compute, which an
  // overlapped reduction would hide more fully than a really slower device's backward could.
  r.overlap = o.reduce_overlap == "on" ||
              (o.reduce_overlap == "auto" && device.backend == Backend::cuda && !session.emulated());
  if (r.overlap && !r.reducer->begin_overlapped(model.gradient_buffer(), model.gradient_count(), r.buckets)) {
    if (session.rank() == 0 && o.reduce_overlap == "on") {
      ANTDT_LOG(warn) << "--reduce-overlap on: the " << r.reducer->name()
                      << " reduction does not overlap in this version; reducing after backward instead";
    }
    r.overlap = false;
  }
  return r;
}

// --resume: rank 0 finds the newest usable checkpoint; every rank restores from it. False when
// there is none (a fresh start). A directory whose checkpoints are all unusable is an error:
// starting fresh would silently discard the run.
bool resume(const TrainOptions& o, Session& session, Model& model, const std::string& dir,
            const std::vector<std::int64_t>& layers) {
  const bool root = session.rank() == 0;
  std::optional<std::string> latest;
  std::optional<CheckpointReader> reader;
  agree(session.comm().get(), [&] {
    if (!root) return;
    latest = find_latest_checkpoint(dir);
    const auto all = list_checkpoints(dir);
    if (!latest && !all.empty()) {
      CheckpointReader(all.back()).verify();
      throw CheckpointError("none of the " + std::to_string(all.size()) + " checkpoints in " + dir + " is usable");
    }
    if (!latest) return;
    reader.emplace(*latest);
    if (const auto saved = reader->int64s("model/layers"); saved != layers) {
      throw CheckpointError("checkpoint " + *latest + " holds a model of shape " + std::to_string(saved.size()) +
                            " layers that differs from --layers " + o.layers);
    }
  });
  int have = latest ? 1 : 0;
  ANTDT_CHECK_MPI(MPI_Bcast(&have, 1, MPI_INT, 0, session.comm().get()));
  if (!have) {
    if (root) {
      ANTDT_LOG(info) << "--resume: no checkpoint in " << dir << ", starting fresh";
    }
    return false;
  }
  session.restore(reader ? &*reader : nullptr);
  restore_model_state(reader ? &*reader : nullptr, model, session.comm());
  if (root) {
    ANTDT_LOG(info) << "resumed from " << *latest << " at step " << session.step();
  }
  return true;
}

// A few micro-steps on this rank's first samples time its speed for the planner.
void probe(Session& session, Model& model, data::Dataset& train, data::Batch& batch, std::int64_t cap,
           const TrainOptions& o) {
  const std::int64_t n =
      std::min<std::int64_t>({cap, train.size(), std::max<std::int64_t>(1, o.global_batch / session.size())});
  std::vector<std::int64_t> idx(static_cast<std::size_t>(n));
  std::iota(idx.begin(), idx.end(), 0);
  batch.features.resize(static_cast<std::size_t>(n * train.dim()));
  batch.labels.resize(static_cast<std::size_t>(n));
  train.read(idx, batch.features.data(), batch.labels.data());
  session.probe([&](std::int64_t m) {
    model.zero_gradients();
    (void)model.accumulate(batch.features.data(), batch.labels.data(), std::min(m, n));
    model.synchronize();
  });
  model.zero_gradients();
}

// Evaluates on every rank's contiguous slice of `eval`, then sums over ranks. `b` is scratch
// (the training batch's buffers, so that no second pinned buffer is allocated).
std::pair<double, double> evaluate(Model& model, data::Dataset& eval, MPI_Comm comm, std::int64_t chunk,
                                   data::Batch& b) {
  int rank = 0, world = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &world);
  const std::int64_t n = eval.size();
  const std::int64_t lo = n * rank / world, hi = n * (rank + 1) / world;
  double sums[3] = {0, 0, 0};  // loss, correct, count
  std::vector<std::int64_t> idx;
  for (std::int64_t start = lo; start < hi; start += chunk) {
    const std::int64_t m = std::min(chunk, hi - start);
    idx.resize(static_cast<std::size_t>(m));
    std::iota(idx.begin(), idx.end(), start);
    b.features.resize(static_cast<std::size_t>(m * eval.dim()));
    b.labels.resize(static_cast<std::size_t>(m));
    eval.read(idx, b.features.data(), b.labels.data());
    const auto r = model.evaluate(b.features.data(), b.labels.data(), m);
    sums[0] += r.loss_sum;
    sums[1] += static_cast<double>(r.correct);
    sums[2] += static_cast<double>(m);
  }
  ANTDT_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, sums, 3, MPI_DOUBLE, MPI_SUM, comm));
  return {sums[2] > 0 ? sums[0] / sums[2] : 0.0, sums[2] > 0 ? sums[1] / sums[2] : 0.0};
}

std::string format_eta(double seconds) {
  if (!(seconds >= 0) || seconds > 99 * 3600) return "--:--:--";
  const auto s = static_cast<long>(seconds);
  char buf[32];
  std::snprintf(buf, sizeof buf, "%02ld:%02ld:%02ld", s / 3600, (s / 60) % 60, s % 60);
  return buf;
}

// The metrics and timeline files, opened before the first step and fed as each step ends.
struct Outputs {
  std::optional<MetricsWriter> metrics;
  std::optional<TimelineWriter> timeline;

  Outputs(const TrainOptions& o, Session& session, const std::string& job) {
    if (session.rank() != 0) return;
    if (!o.metrics.empty()) {
      const auto path = expand_job_id(o.metrics, job);
      metrics.emplace(path, metrics_format_for(path));
      session.add_record_sink([this](const StepRecord& r, const Plan&) { metrics->write(r); });
    }
    if (!o.timeline.empty()) {
      timeline.emplace(expand_job_id(o.timeline, job));
      session.add_record_sink([this](const StepRecord& r, const Plan& p) { timeline->write(r, p); });
    }
  }
  void close() {
    if (metrics) metrics->close();
    if (timeline) timeline->close();
  }
};

// The step loop and everything that happens between steps.
struct Trainer {
  const TrainOptions& o;
  Session& session;
  Model& model;
  Data& data;
  Reduction& reduction;
  const DeviceInfo& device;
  const std::vector<std::int64_t>& layers;
  std::int64_t cap;
  std::string job, ckpt_dir;
  // Batch buffers, page-locked on a GPU. Reserved for an even share now; they grow (rarely,
  // geometrically) when the Controller gives this rank more.
  data::Batch batch{o.pin_memory && device.backend == Backend::cuda};
  // Reads each step's samples; with --read-ahead also the next step's while this one computes
  // (docs/data.md). It is gone (its read waited for) before the data sets close.
  data::ReadAhead ahead{*data.train, o.pin_memory&& device.backend == Backend::cuda};
  bool read_ahead = o.read_ahead == "on" ||
                    (o.read_ahead == "auto" && device.backend == Backend::cuda && o.read_mode == "independent");
  double t_start = 0;
  std::int64_t committed_at_start = 0, step_at_start = 0;  // > 0 after a resume
  std::vector<double> recent_loss{};
  std::optional<std::pair<double, double>> eval_result{};

  bool root() const { return session.rank() == 0; }

  void reserve_batch() {
    const auto share = static_cast<std::size_t>((o.global_batch + session.size() - 1) / session.size());
    batch.features.reserve(share * static_cast<std::size_t>(data.train->dim()));
    batch.labels.reserve(share);
  }

  void save_checkpoint() {
    if (!root()) return;
    CheckpointWriter w(ckpt_dir, session.step());
    session.save(w);
    save_model_state(w, model);
    w.put_int64s("model/layers", layers);
    w.put_string("model/optimizer", o.optimizer);
    w.put_uint64s("rng/seeds", std::vector<std::uint64_t>{o.model_seed, o.data_seed, o.emulate_seed, o.synthetic_seed});
    w.put_string("run/job_id", job);
    const std::string path = w.commit(o.checkpoint_keep);
    ANTDT_LOG(debug) << "checkpoint " << path;
  }

  // One training step: read, compute in micro-batches, reduce, update, end the step.
  StepSummary step() {
    if (o.fail_at_step >= 0 && session.step() == o.fail_at_step && session.rank() == o.fail_rank) {
      std::fprintf(stderr, "antdt-train: rank %d: --fail-at-step %lld: killing myself\n", o.fail_rank,
                   static_cast<long long>(o.fail_at_step));
      std::fflush(stderr);
      std::raise(SIGKILL);
    }
    const StepWork work = session.begin_step();
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
    model.apply_update();
    return session.end_step(total.loss_sum, total.correct);
  }

  void between_steps(const StepSummary& s) {
    if (s.samples > 0) recent_loss.push_back(s.loss_sum / static_cast<double>(s.samples));
    if (recent_loss.size() > 10) recent_loss.erase(recent_loss.begin());
    const std::int64_t done = session.step();
    const bool eval_due = data.eval && o.eval_every > 0 && done % o.eval_every == 0;
    const bool checkpoint_due = o.checkpoint_every > 0 && done % o.checkpoint_every == 0 && !session.finished();
    if (eval_due || checkpoint_due) ahead.wait();  // HDF5 is not thread-safe
    if (eval_due) {
      eval_result = evaluate(model, *data.eval, session.comm().get(), cap, batch);
      if (root()) {
        ANTDT_LOG(info) << "step " << done << ": eval loss " << eval_result->first << ", accuracy "
                        << eval_result->second;
      }
    }
    if (checkpoint_due) save_checkpoint();
    const bool show = root() && (o.progress == "always" || (o.progress == "auto" && isatty(STDERR_FILENO)));
    if (show && (done % o.progress_every == 0 || session.finished())) progress(s, done);
  }

  void progress(const StepSummary& s, std::int64_t done) const {
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

  // Runs every step; returns the wall time of the loop.
  double run() {
    t_start = MPI_Wtime();
    committed_at_start = session.samples_committed();
    step_at_start = session.step();
    while (!session.finished()) between_steps(step());
    const double wall = MPI_Wtime() - t_start;
    ahead.wait();
    if (data.eval) eval_result = evaluate(model, *data.eval, session.comm().get(), cap, batch);
    if (!ckpt_dir.empty()) save_checkpoint();
    return wall;
  }

  // Rank 0's report: the text, --summary-json.
  void report(double wall) {
    // Rows trained from the read-ahead, and read while waiting, over all ranks.
    std::int64_t rows[2] = {ahead.rows_ahead(), ahead.rows_now()};
    ANTDT_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, rows, 2, MPI_INT64_T, MPI_SUM, session.comm().get()));
    if (!root()) return;
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
    sum.wall_seconds = wall;
    summarize_session(session, sum);
    sum.epochs_completed = static_cast<std::int64_t>(sum.coverage.size());
    sum.final_loss = recent_loss.empty() ? 0.0
                                         : std::accumulate(recent_loss.begin(), recent_loss.end(), 0.0) /
                                               static_cast<double>(recent_loss.size());
    if (eval_result) {
      sum.eval_loss = eval_result->first;
      sum.eval_accuracy = eval_result->second;
    }
    const auto params = model.parameters();
    sum.parameter_checksum = fnv1a_hex(params.data(), params.size() * sizeof(float));
    if (!o.quiet) std::fputs(summary_text(sum).c_str(), stdout);
    if (!o.summary_json.empty()) {
      const auto path = expand_job_id(o.summary_json, job);
      std::FILE* f = std::fopen(path.c_str(), "w");
      if (!f) throw FileError("cannot write --summary-json " + path);
      const auto text = summary_json(sum);
      std::fwrite(text.data(), 1, text.size(), f);
      std::fclose(f);
    }
  }
};

int run(const TrainOptions& o) {
  if (!o.log_level.empty()) log::set_level(log::parse_level(o.log_level));
  const LaunchInfo launch = discover_launch(MPI_COMM_WORLD);
  const DeviceInfo device = select_device(launch.local_rank, parse_device_preference(o.device));
  const auto layers = parse_layers(o.layers);
  Data data = open_data(o, layers);
  auto model = build_model(o, layers, device);
  const std::int64_t cap = o.micro_batch_cap > 0 ? o.micro_batch_cap : micro_batch_cap(*model, device);
  Session session(MPI_COMM_WORLD, session_options(o, *data.train, *model, cap, device));
  Reduction reduction = make_reduction(o, session, *model, device);
  Trainer t{o,      session, *model, data,          reduction,
            device, layers,  cap,    launch.job_id, expand_job_id(o.checkpoint_dir, launch.job_id)};
  t.reserve_batch();
  if (t.root()) {
    std::string caps;
    for (auto v : session.micro_batch_caps()) caps += (caps.empty() ? "" : ",") + std::to_string(v);
    ANTDT_LOG(info) << "model: " << model->parameter_count() << " parameters on " << backend_name(device.backend)
                    << "; micro-batch caps m_i [" << caps << "]; reduction via " << reduction.reducer->name()
                    << (detail::is_page_locked(t.batch.features.data()) ? "; batches in page-locked host memory" : "");
  }
  const bool resumed = o.resume && resume(o, session, *model, t.ckpt_dir, layers);
  if (!resumed && o.probe && o.policy != "static") probe(session, *model, *data.train, t.batch, cap, o);
  std::optional<Outputs> outputs;
  agree(session.comm().get(), [&] { outputs.emplace(o, session, launch.job_id); });
  const double wall = t.run();
  t.report(wall);
  outputs->close();
  return 0;
}

}  // namespace

}  // namespace antdt::train

int main(int argc, char** argv) {
  antdt::Environment env(argc, argv);
  CLI::App app{
      "antdt-train: data-parallel MLP training that balances ranks of different speeds "
      "(dynamic sharding, exact weighted gradients).",
      "antdt-train"};
  app.set_version_flag("--version", std::string("antdt ") + ANTDT_VERSION_STRING);
  app.get_formatter()->column_width(44);
  antdt::train::TrainOptions o;
  antdt::train::add_options(app, o);
  const int parsed = antdt::cli::parse(app, argc, argv, env.world_rank());
  if (parsed >= 0) return parsed;
  try {
    antdt::train::validate(o, env.world_size());
  } catch (const antdt::Error& e) {
    if (env.world_rank() == 0) std::fprintf(stderr, "antdt-train: error: %s\n", e.what());
    return antdt::cli::kExitUsage;
  }
  try {
    return antdt::cli::guarded("antdt-train", env.world_rank(), env.world_size(), [&] { return antdt::train::run(o); });
  } catch (const antdt::cli::AgreedFailure& f) {
    return f.code;  // every rank agreed; the failing ranks printed why
  }
}
