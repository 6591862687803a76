// antdt-train: data-parallel training of an MLP classifier with antdt's dynamic sharding,
// straggler-aware batch planning and exact weighted gradient reduction.
//
//   mpirun -np 4 antdt-train --data train.h5 --layers 32,64,10 --global-batch 256
//          --epochs 2 --policy dd --emulate-speed 1,1,1,0.33 --summary-json run.json
//
// Every option is also an ANTDT_* environment variable and a --config file key
// (train/options.cpp). The run, top to bottom: open the data, build the model, the session
// options, resume or probe, the steps, the report.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "antdt/antdt.hpp"
#include "cli/cli_common.hpp"
#include "train/options.hpp"
#include "train/restart.hpp"
#include "train/trainer.hpp"

namespace antdt::train {

namespace {

// Every rank opens the training set itself and reads only the samples it is given.
Data open_data(const TrainOptions& o, const std::vector<std::int64_t>& layers) {
  Data d;
  cli::agree(MPI_COMM_WORLD, [&] {
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
  so.backup_workers = o.backup_workers;
  so.controller.restart.max_restarts = o.max_restarts;
  so.controller.restart.cooldown_steps = o.restart_cooldown;
  so.chunks_per_share = o.nd_chunks;
  so.pool_mechanism = o.nd_pool == "counter"    ? PoolMechanism::counter
                      : o.nd_pool == "deadline" ? PoolMechanism::deadline
                                                : PoolMechanism::automatic;
  if (!o.emulate_speed.empty()) so.emulation.speeds = parse_speeds(o.emulate_speed);
  if (!o.emulate_transient.empty()) parse_transient(o.emulate_transient, so.emulation);
  if (!o.emulate_schedule.empty()) so.emulation.schedule = parse_schedule(o.emulate_schedule);
  so.emulation.virtual_seconds_per_sample = o.virtual_device;
  so.emulation.seed = o.emulate_seed;
  so.gradient_bytes = model.gradient_count() * static_cast<std::int64_t>(sizeof(float));
  if (device.backend == Backend::cuda)
    so.device_prior = gpu_relative_throughput(device.compute_capability, device.name);
  return so;
}

Reduction make_reduction(const TrainOptions& o, const Session& session, Model& model, const DeviceInfo& device) {
  Reduction r;
  r.reducer = make_reducer(session.comm(), device);
  r.buckets = model.gradient_buckets();
  // auto leaves emulated stragglers alone: their stretch is a wait after compute, which an
  // overlapped reduction would hide more fully than a really slower device's backward could.
  // Pooled steps have no known last micro-batch to overlap.
  r.overlap = !policy_pools(o.policy) &&
              (o.reduce_overlap == "on" ||
               (o.reduce_overlap == "auto" && device.backend == Backend::cuda && !session.emulated()));
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
  cli::agree(session.comm().get(), [&] {
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

// `started`: when the process started, for the measured part of a restart's cost.
int run(const TrainOptions& o, std::chrono::steady_clock::time_point started) {
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
  if (!resumed && o.probe && policy_rebalances(o.policy)) probe(session, *model, *data.train, t.batch, cap, o);
  std::optional<Outputs> outputs;
  cli::agree(session.comm().get(), [&] { outputs.emplace(o, session, launch.job_id); });
  // What a restart would cost besides its checkpoint: this job's own start, measured, and the
  // queue wait and launch of earlier restarts of this run, measured by their resumed jobs.
  t.relaunch_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  if (t.root() && resumed) t.relaunch_seconds += note_relaunch(t.ckpt_dir);
  const double wall = t.run();
  t.report(wall);
  outputs->close();
  return session.restart_requested() ? cli::kExitRestart : 0;
}

}  // namespace

}  // namespace antdt::train

int main(int argc, char** argv) {
  const auto started = std::chrono::steady_clock::now();  // MPI's start included
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
    return antdt::cli::guarded("antdt-train", env.world_rank(), env.world_size(),
                               [&] { return antdt::train::run(o, started); });
  } catch (const antdt::cli::AgreedFailure& f) {
    return f.code;  // every rank agreed; the failing ranks printed why
  }
}
