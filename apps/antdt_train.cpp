// antdt-train: data-parallel training of an MLP classifier with antdt's dynamic sharding,
// straggler-aware batch planning and exact weighted gradient reduction.
//
//   mpirun -np 4 antdt-train --data train.h5 --hidden 64 --global-batch 256
//          --epochs 2 --policy dd --emulate-speed 1,1,1,0.33 --summary-json run.json
//
// Every option is also an ANTDT_* environment variable and a --config file key
// (train/options.cpp). The run, top to bottom: check the output paths, open the data (and
// scan it for NaN/Inf), size and build the model, the session options, claim the checkpoint
// directory, resume or probe, the steps, the report. Everything before the steps is checked
// on every rank and agreed (cli::agree), so a bad input is one line and no training lost.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <memory>
#include <numeric>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "antdt/antdt.hpp"
#include "cli/cli_common.hpp"
#include "cli/paths.hpp"
#include "session/session_setup.hpp"
#include "train/options.hpp"
#include "train/restart.hpp"
#include "train/stop.hpp"
#include "train/trainer.hpp"

namespace antdt::train {

namespace {

std::string data_name(const std::string& path, const char* option) {
  return path.empty() ? std::string("the synthetic data") : std::string(option) + " '" + path + "'";
}

// Finds the samples of `set` with a non-finite feature: every rank scans a slice, and the
// slices are joined, so every rank ends with the same ascending list.
std::vector<std::int64_t> find_non_finite_everywhere(data::Dataset& set) {
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  const std::int64_t n = set.size();
  std::vector<std::int64_t> mine;
  cli::agree(MPI_COMM_WORLD, [&] { mine = data::find_non_finite(set, n * rank / world, n * (rank + 1) / world); });
  int count = static_cast<int>(mine.size());
  std::vector<int> counts(static_cast<std::size_t>(world)), offsets(static_cast<std::size_t>(world), 0);
  ANTDT_CHECK_MPI(MPI_Allgather(&count, 1, MPI_INT, counts.data(), 1, MPI_INT, MPI_COMM_WORLD));
  for (int r = 1; r < world; ++r) offsets[r] = offsets[r - 1] + counts[r - 1];
  std::vector<std::int64_t> all(static_cast<std::size_t>(offsets.back() + counts.back()));
  ANTDT_CHECK_MPI(MPI_Allgatherv(mine.data(), count, MPI_INT64_T, all.data(), counts.data(), offsets.data(),
                                 MPI_INT64_T, MPI_COMM_WORLD));
  return all;  // slices are in rank order, each ascending
}

// Drops (--skip-non-finite) or refuses the samples of `set` with a NaN or Inf feature. The
// decision is the same on every rank (the same joined list), so it is taken with no message.
std::int64_t handle_non_finite(const TrainOptions& o, std::unique_ptr<data::Dataset>& set, const std::string& path,
                               const char* option, int rank) {
  const std::vector<std::int64_t> bad = find_non_finite_everywhere(*set);
  if (bad.empty()) return 0;
  if (!o.skip_non_finite) {
    cli::fail_together(rank, FileError("data file '" + path + "' (" + option + "): sample " + std::to_string(bad[0]) +
                                       " has a NaN or infinite feature (" + std::to_string(bad.size()) + " of " +
                                       std::to_string(set->size()) +
                                       " samples do); fix the data, or pass --skip-non-finite to train without them"));
  }
  const auto total = set->size();
  if (static_cast<std::int64_t>(bad.size()) == total) {
    cli::fail_together(rank, FileError("data file '" + path + "' (" + option + "): every one of its " +
                                       std::to_string(total) + " samples has a NaN or infinite feature"));
  }
  set = std::make_unique<data::SubsetDataset>(std::move(set), bad);
  if (rank == 0) {
    ANTDT_LOG(warn) << option << " '" << path << "': dropped " << bad.size() << " of " << total
                    << " samples with a NaN or infinite feature (--skip-non-finite), first sample " << bad[0];
  }
  return static_cast<std::int64_t>(bad.size());
}

// Every rank opens the training set itself and reads only the samples it is given. The model's
// widths come from the data unless --layers gives them, and the schedule is checked against
// the data: every check here is decided alike on every rank, and printed once.
Data open_data(const TrainOptions& o, std::vector<std::int64_t>& layers, int world) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  Data d;
  const std::string train_name = data_name(o.data, "--data");
  cli::agree(MPI_COMM_WORLD, [&] {
    data::Hdf5Names names{o.features_name, o.labels_name};
    const auto mode = o.read_mode == "collective" ? data::ReadMode::collective : data::ReadMode::independent;
    if (!o.data.empty()) {
      d.train = std::make_unique<data::Hdf5Dataset>(o.data, names, mode, MPI_COMM_WORLD);
    } else {
      // --layers without --data sizes the synthetic set, as before --hidden existed.
      const auto explicit_layers = o.layers.empty() ? std::vector<std::int64_t>{} : parse_layers(o.layers);
      const std::int64_t dim = explicit_layers.empty() ? o.synthetic_dim : explicit_layers.front();
      const auto classes =
          explicit_layers.empty() ? o.synthetic_classes : static_cast<std::int32_t>(explicit_layers.back());
      d.train = std::make_unique<data::InMemoryDataset>(
          data::make_synthetic({o.synthetic_samples, dim, classes, o.synthetic_seed}));
    }
    if (!o.eval_data.empty()) d.eval = std::make_unique<data::Hdf5Dataset>(o.eval_data, names, mode, MPI_COMM_WORLD);
  });
  // Synthetic data is finite by construction; files are scanned once, in slices.
  if (!o.data.empty()) d.dropped = handle_non_finite(o, d.train, o.data, "--data", rank);
  if (d.eval) d.eval_dropped = handle_non_finite(o, d.eval, o.eval_data, "--eval-data", rank);
  cli::agree(MPI_COMM_WORLD, [&] {
    layers = model_layers(o, d.train->dim(), d.train->num_classes(), train_name);
    if (d.eval && d.eval->dim() != d.train->dim()) {
      throw UsageError("--eval-data '" + o.eval_data + "' has " + std::to_string(d.eval->dim()) +
                       " features per sample but " + train_name + " has " + std::to_string(d.train->dim()));
    }
    if (d.eval && d.eval->num_classes() > layers.back()) {
      throw UsageError("--eval-data '" + o.eval_data + "' has " + std::to_string(d.eval->num_classes()) +
                       " classes (labels up to " + std::to_string(d.eval->num_classes() - 1) + ") but the model has " +
                       std::to_string(layers.back()) + (o.layers.empty() ? ", the classes of " + train_name : "") +
                       "; evaluate on data of the same classes" +
                       (o.layers.empty() ? ", or give --layers ending with " + std::to_string(d.eval->num_classes())
                                         : std::string()));
    }
    const std::int64_t n = d.train->size();
    const std::string kept = d.dropped > 0 ? " (after dropping " + std::to_string(d.dropped) + " non-finite)" : "";
    if (o.global_batch > n) {
      throw UsageError("--global-batch " + std::to_string(o.global_batch) + " is larger than the " + std::to_string(n) +
                       " samples of " + train_name + kept + ": a step would use samples twice; give at most " +
                       std::to_string(n));
    }
    if (o.global_batch < world) {
      throw UsageError("--global-batch " + std::to_string(o.global_batch) + " is smaller than the " +
                       std::to_string(world) + " ranks: " + std::to_string(world - o.global_batch) +
                       " would get no sample in any step; give at least " + std::to_string(world) +
                       " or run on fewer ranks");
    }
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
  if (!o.fixed_split.empty()) {
    std::stringstream in(o.fixed_split);
    for (std::string item; std::getline(in, item, ',');) {
      std::size_t used = 0;
      long long b = -1;
      try {
        b = std::stoll(item, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used != item.size() || b < 0)
        throw UsageError("--fixed-split '" + o.fixed_split + "': give non-negative batches separated by commas");
      so.fixed_split.push_back(b);
    }
  }
  so.controller.min_interval = o.min_interval;
  so.controller.window = o.window;
  so.controller.persistence = o.persistence;
  so.backup_workers = o.backup_workers;
  so.controller.restart.max_restarts = o.max_restarts;
  so.controller.restart.cooldown_steps = o.restart_cooldown;
  so.chunks_per_share = o.nd_chunks;
  so.first_chunk = o.nd_first_chunk;
  so.pool_mechanism = o.nd_pool == "counter"    ? PoolMechanism::counter
                      : o.nd_pool == "deadline" ? PoolMechanism::deadline
                                                : PoolMechanism::automatic;
  if (!o.emulate_speed.empty()) so.emulation.speeds = parse_speeds(o.emulate_speed);
  if (!o.emulate_transient.empty()) parse_transient(o.emulate_transient, so.emulation);
  if (!o.emulate_schedule.empty()) so.emulation.schedule = parse_schedule(o.emulate_schedule);
  so.emulation.virtual_seconds_per_sample = o.virtual_device;
  so.emulation.seed = o.emulate_seed;
  so.step_timeout_seconds = o.step_timeout;
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

std::string widths_text(const std::vector<std::int64_t>& widths) {
  std::string out;
  for (auto w : widths) out += (out.empty() ? "" : ",") + std::to_string(w);
  return out;
}

// What makes this run's checkpoints its own (docs/checkpoint.md): the data, the model and the
// seeds. Not the world size (restarts are elastic), the schedule limits or the policy.
RunIdentity run_identity(const TrainOptions& o, const Data& d, const std::vector<std::int64_t>& layers) {
  RunIdentity id;
  auto add = [&](const char* key, std::string value) { id.fields.emplace_back(key, std::move(value)); };
  std::error_code ec;
  add("data", o.data.empty() ? std::string("synthetic") : std::filesystem::weakly_canonical(o.data, ec).string());
  add("samples", std::to_string(d.train->size()));
  add("features", std::to_string(d.train->dim()));
  add("classes", std::to_string(d.train->num_classes()));
  add("model_shape", widths_text(layers));
  add("optimizer", o.optimizer);
  add("model_seed", std::to_string(o.model_seed));
  add("data_seed", std::to_string(o.data_seed));
  if (o.data.empty()) add("synthetic_seed", std::to_string(o.synthetic_seed));
  return id;
}

// Rank 0 makes --checkpoint-dir this run's: it locks the directory for the life of the run,
// refuses one that holds another run's checkpoints (unless --checkpoint-overwrite) or, with
// --resume, one whose recorded identity differs from this run's, then records this run's.
CheckpointDirectoryLock claim_checkpoint_dir(const TrainOptions& o, const std::string& dir, const RunIdentity& mine) {
  CheckpointDirectoryLock lock(dir);
  const auto recorded = read_run_identity(dir);
  const auto existing = list_checkpoints(dir);
  if (o.checkpoint_overwrite) {
    remove_checkpoints(dir);
    if (!existing.empty()) {
      ANTDT_LOG(warn) << "--checkpoint-overwrite: deleted the " << existing.size() << " checkpoints in " << dir;
    }
  } else if (!existing.empty()) {
    if (!o.resume) {
      throw UsageError(
          "--checkpoint-dir '" + dir + "' holds " + std::to_string(existing.size()) +
          " checkpoints of an earlier run (newest " + std::filesystem::path(existing.back()).filename().string() +
          "); pass --resume to continue that run, or --checkpoint-overwrite to delete them and start over");
    }
    if (recorded) {
      if (const std::string diff = describe_difference(*recorded, mine); !diff.empty()) {
        throw CheckpointError("--resume: --checkpoint-dir '" + dir +
                              "' belongs to another run (other data, model shape or seeds): " + diff +
                              "; give this run its own --checkpoint-dir");
      }
    }
  }
  if (!recorded || !describe_difference(*recorded, mine).empty()) write_run_identity(dir, mine);
  return lock;
}

// The output and input files of the run, for check_outputs (rank 0, before anything is read).
void check_paths(const TrainOptions& o, const std::string& job, const std::string& ckpt_dir,
                 const std::string& config_file) {
  cli::check_outputs({{"--summary-json", expand_job_id(o.summary_json, job)},
                      {"--metrics", expand_job_id(o.metrics, job)},
                      {"--timeline", expand_job_id(o.timeline, job)},
                      {"--sample-log", o.sample_log.empty() ? "" : o.sample_log + ".0"}},
                     {{"--data", o.data}, {"--eval-data", o.eval_data}, {"--config", config_file}}, ckpt_dir);
  for (const auto& [option, path] :
       std::vector<std::pair<const char*, std::string>>{{"--data", o.data}, {"--eval-data", o.eval_data}}) {
    std::error_code ec;
    if (!ckpt_dir.empty() && !path.empty() && std::filesystem::equivalent(path, ckpt_dir, ec)) {
      throw UsageError(std::string("--checkpoint-dir '") + ckpt_dir + "' is " + option + "; give it a directory");
    }
  }
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
      throw CheckpointError("checkpoint " + *latest + " holds a model of shape " + widths_text(saved) +
                            " but this run's model is " + widths_text(layers) + " (" +
                            (o.layers.empty() ? "from the data and --hidden" : "--layers") +
                            "); give the same widths to resume it");
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
int run(const TrainOptions& o, const std::string& config_file, std::chrono::steady_clock::time_point started) {
  if (!o.log_level.empty()) log::set_level(log::parse_level(o.log_level));
  const LaunchInfo launch = discover_launch(MPI_COMM_WORLD);
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  const std::string ckpt_dir = expand_job_id(o.checkpoint_dir, launch.job_id);
  // Every output is checked before anything is read or trained: a run must not end by
  // failing to write what it was run for.
  cli::agree(MPI_COMM_WORLD, [&] {
    if (rank == 0) check_paths(o, launch.job_id, ckpt_dir, config_file);
  });
  const DeviceInfo device = select_device(launch.local_rank, parse_device_preference(o.device));
  std::vector<std::int64_t> layers;
  Data data = open_data(o, layers, world);
  auto model = build_model(o, layers, device);
  const std::int64_t cap = o.micro_batch_cap > 0 ? o.micro_batch_cap : micro_batch_cap(*model, device);
  const SessionOptions so = session_options(o, *data.train, *model, cap, device);
  // The Session validates the same options on every rank; checked here, a bad combination is
  // one line from rank 0 rather than one per rank and an MPI_Abort.
  cli::agree(MPI_COMM_WORLD, [&] { detail::validate_session_options(so, world); });
  // From here a stop signal ends the run at a step boundary, with a checkpoint (train/stop.hpp).
  install_stop_handlers(parse_stop_signals(o.stop_signals));
  Session session(MPI_COMM_WORLD, so);
  std::optional<CheckpointDirectoryLock> lock;
  if (!ckpt_dir.empty()) {
    cli::agree(session.comm().get(), [&] {
      if (session.rank() == 0) lock.emplace(claim_checkpoint_dir(o, ckpt_dir, run_identity(o, data, layers)));
    });
  }
  Reduction reduction = make_reduction(o, session, *model, device);
  Trainer t{o, session, *model, data, reduction, device, layers, cap, launch.job_id, ckpt_dir};
  t.reserve_batch();
  if (t.root()) {
    std::string caps;
    for (auto v : session.micro_batch_caps()) caps += (caps.empty() ? "" : ",") + std::to_string(v);
    ANTDT_LOG(info) << "model: " << widths_text(layers) << " (" << model->parameter_count() << " parameters) on "
                    << backend_name(device.backend) << "; micro-batch caps m_i [" << caps << "]; reduction via "
                    << reduction.reducer->name()
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
  const ReadAheadCounts counts = t.read_ahead_counts();
  // The summary and the streamed files are written and closed by rank 0; every rank learns
  // whether that worked, so a failed write is exit 3 on all of them, with no MPI_Abort.
  cli::agree(session.comm().get(), [&] {
    t.report(wall, counts);
    outputs->close();
  });
  if (session.stopped()) return cli::kExitStopped;
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
  const CLI::Option* config = app.get_config_ptr();
  const std::string config_file = config != nullptr && config->count() > 0 ? config->as<std::string>() : "";
  try {
    return antdt::cli::guarded("antdt-train", env.world_rank(), env.world_size(),
                               [&] { return antdt::train::run(o, config_file, started); });
  } catch (const antdt::cli::AgreedFailure& f) {
    return f.code;  // every rank agreed; the failing ranks printed why
  }
}
