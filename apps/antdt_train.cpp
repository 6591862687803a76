// antdt-train: data-parallel training of an MLP classifier with antdt's dynamic sharding,
// straggler-aware batch planning and exact weighted gradient reduction.
//
//   mpirun -np 4 antdt-train --data train.h5 --layers 32,64,10 --global-batch 256
//          --epochs 2 --policy dd --emulate-speed 1,1,1,0.33 --summary-json run.json
//
// Every option is also an ANTDT_* environment variable and a --config file key.
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "antdt/antdt.hpp"
#include "antdt/checkpoint.hpp"
#include "antdt/controller.hpp"
#include "antdt/data.hpp"
#include "antdt/emulation.hpp"
#include "antdt/model.hpp"
#include "antdt/planner.hpp"
#include "antdt/reduce.hpp"
#include "antdt/report.hpp"
#include "antdt/session.hpp"
#include "cli/cli_common.hpp"

namespace {

struct TrainOptions {
  // data
  std::string data;
  std::string eval_data;
  std::string features_name = "features";
  std::string labels_name = "labels";
  std::int64_t synthetic_samples = 8192;
  std::uint64_t synthetic_seed = 7;
  std::int64_t eval_every = 0;
  std::string read_mode = "independent";
  std::string read_ahead = "auto";
  std::string reduce_overlap = "auto";
  // model
  std::string layers = "32,64,10";
  std::string optimizer = "sgd";
  float lr = 0.05f;
  float momentum = 0.9f;
  float weight_decay = 0.0f;
  std::uint64_t model_seed = 1;
  std::string device = "auto";
  bool pin_memory = true;
  // schedule
  std::int64_t global_batch = 256;
  std::int64_t steps = 0;
  std::int64_t epochs = 0;
  std::int64_t micro_batch_cap = 0;
  std::int64_t shard_size = 0;
  std::uint64_t data_seed = 0;
  bool shuffle_within_shard = false;
  int prefetch_steps = 2;
  // policy
  std::string policy = "dd";
  int backup_workers = 0;
  bool probe = true;
  double min_gain = 0.05;
  std::int64_t min_interval = 10;
  int window = 20;
  int persistence = 5;
  // emulation
  std::string emulate_speed;
  std::string emulate_transient;
  double virtual_device = 0.0;
  std::uint64_t emulate_seed = 0;
  // checkpoints
  std::string checkpoint_dir;
  std::int64_t checkpoint_every = 0;
  int checkpoint_keep = 3;
  bool resume = false;
  // outputs
  std::string summary_json;
  std::string timeline;
  std::string metrics;
  std::string progress = "auto";
  std::int64_t progress_every = 10;
  std::string log_level;
  bool quiet = false;
  // testing
  std::int64_t fail_at_step = -1;
  int fail_rank = 0;
};

void add_options(CLI::App& app, TrainOptions& o) {
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);  // a later --x wins
  app.set_config("--config", "", "Read options from a TOML/INI file (keys are the long option names)");
  const char* data = "Data";
  app.add_option("--data", o.data,
                 "Training set: HDF5 file with features (N x D float32) and labels (N int32); "
                 "without it, a synthetic set is generated in memory")
      ->group(data);
  app.add_option("--eval-data", o.eval_data, "Held-out evaluation set (HDF5, same layout)")->group(data);
  app.add_option("--features-name", o.features_name, "Name of the features data set")
      ->group(data)
      ->capture_default_str();
  app.add_option("--labels-name", o.labels_name, "Name of the labels data set")->group(data)->capture_default_str();
  app.add_option("--synthetic-samples", o.synthetic_samples, "Samples of the in-memory synthetic set (no --data)")
      ->group(data)
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--synthetic-seed", o.synthetic_seed, "Seed of the in-memory synthetic set")
      ->group(data)
      ->capture_default_str();
  app.add_option("--read-mode", o.read_mode,
                 "HDF5 reads: independent (each rank opens the file itself) or collective "
                 "(MPI-IO driver on all ranks; docs/data.md has the measurement)")
      ->group(data)
      ->check(CLI::IsMember({"independent", "collective"}))
      ->capture_default_str();
  app.add_option("--read-ahead", o.read_ahead,
                 "Read the next step's samples on a background thread while this step computes: auto (on with a "
                 "CUDA device, whose host cores are free meanwhile; off on the host backend, whose cores run BLAS), "
                 "on or off. Not with --read-mode collective, whose reads are MPI calls")
      ->group(data)
      ->check(CLI::IsMember({"auto", "on", "off"}))
      ->capture_default_str();
  app.add_option("--eval-every", o.eval_every, "Evaluate on --eval-data every K steps (0: only at the end)")
      ->group(data)
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();

  const char* model = "Model";
  app.add_option("--layers", o.layers, "MLP widths: input,hidden...,classes (input must match the data)")
      ->group(model)
      ->capture_default_str();
  app.add_option("--optimizer", o.optimizer, "sgd (with momentum) or adam")
      ->group(model)
      ->check(CLI::IsMember({"sgd", "adam"}))
      ->capture_default_str();
  app.add_option("--lr", o.lr, "Learning rate")->group(model)->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--momentum", o.momentum, "SGD momentum")
      ->group(model)
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  app.add_option("--weight-decay", o.weight_decay, "L2 weight decay")
      ->group(model)
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--model-seed", o.model_seed, "Parameter initialisation seed")->group(model)->capture_default_str();
  app.add_option("--device", o.device, "auto (GPU when present), host or cuda")
      ->group(model)
      ->check(CLI::IsMember({"auto", "host", "cuda"}))
      ->capture_default_str();
  app.add_flag("--pin-memory,!--no-pin-memory", o.pin_memory,
               "On a GPU, read batches into page-locked host memory so their copy to the device goes by DMA; "
               "falls back to pageable memory (with a warning) if the system refuses to pin (default: on)")
      ->group(model)
      ->capture_default_str();
  app.add_option("--reduce-overlap", o.reduce_overlap,
                 "Start each layer's gradient all-reduce as soon as backward finishes it, while the earlier layers "
                 "still compute: auto (on with a CUDA device reduced through MPI, whose host thread is idle during "
                 "backward; off on the host backend, where it measured no gain, and with emulated speeds, whose "
                 "stretch would hide the reduction), on or off. NCCL does not overlap in this version (on: a "
                 "warning, then the reduction after backward)")
      ->group(model)
      ->check(CLI::IsMember({"auto", "on", "off"}))
      ->capture_default_str();

  const char* sched = "Schedule";
  app.add_option("--global-batch", o.global_batch, "Samples per step across all ranks (B)")
      ->group(sched)
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--steps", o.steps, "Stop after this many steps (0: no step limit)")
      ->group(sched)
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--epochs", o.epochs,
                 "Stop after this many epochs (0: no epoch limit); one of --steps/--epochs is needed")
      ->group(sched)
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--micro-batch-cap", o.micro_batch_cap,
                 "Most samples per micro-step on this rank (0: from free memory)")
      ->group(sched)
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--shard-size", o.shard_size, "DDS shard length in samples (0: about 10 micro-batches)")
      ->group(sched)
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--data-seed", o.data_seed, "Seed of the per-epoch shard order")->group(sched)->capture_default_str();
  app.add_flag("--shuffle-within-shard", o.shuffle_within_shard, "Also shuffle sample order inside each shard")
      ->group(sched);
  app.add_option("--prefetch-steps", o.prefetch_steps, "Grant shards this many steps ahead")
      ->group(sched)
      ->check(CLI::Range(1, 64))
      ->capture_default_str();

  const char* pol = "Policy";
  app.add_option("--policy", o.policy,
                 "static (equal batches), dd (dedicated: speed-proportional batches), nd (non-dedicated)")
      ->group(pol)
      ->check(CLI::IsMember({"static", "dd", "nd"}))
      ->capture_default_str();
  app.add_option("--backup-workers", o.backup_workers, "Backup ranks per step (nd policy only)")
      ->group(pol)
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_flag("--probe,!--no-probe", o.probe,
               "Time a few micro-steps per rank at start so the planner begins from the best split (default: on)")
      ->group(pol)
      ->capture_default_str();
  app.add_option("--min-gain", o.min_gain, "Re-plan only when the predicted step time improves by this fraction")
      ->group(pol)
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  app.add_option("--min-interval", o.min_interval, "Steps between plan changes, at least")
      ->group(pol)
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--window", o.window, "Monitor window in steps")
      ->group(pol)
      ->check(CLI::Range(2, 10000))
      ->capture_default_str();
  app.add_option("--persistence", o.persistence,
                 "Windows a rank must stay slow before it counts as a persistent straggler")
      ->group(pol)
      ->check(CLI::Range(1, 10000))
      ->capture_default_str();

  const char* emu = "Straggler emulation (reports say EMULATED)";
  app.add_option("--emulate-speed", o.emulate_speed,
                 "Per-rank relative speeds, e.g. 1,1,1,0.33: compute is stretched to compute/speed")
      ->group(emu);
  app.add_option("--emulate-transient", o.emulate_transient,
                 "P,FACTOR,STEPS: each step a rank starts a FACTORx slowdown for STEPS steps with probability P")
      ->group(emu);
  app.add_option("--virtual-device", o.virtual_device,
                 "Seconds per sample at speed 1: compute of b samples takes b*c/speed (virtual-device benchmark mode)")
      ->group(emu)
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--emulate-seed", o.emulate_seed, "Seed of the transient slowdowns")
      ->group(emu)
      ->capture_default_str();

  const char* ck = "Checkpoints";
  app.add_option("--checkpoint-dir", o.checkpoint_dir, "Directory for HDF5 checkpoints (%j = Slurm job id)")->group(ck);
  app.add_option("--checkpoint-every", o.checkpoint_every, "Checkpoint every K steps (0: only at the end)")
      ->group(ck)
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--checkpoint-keep", o.checkpoint_keep, "Keep the newest K checkpoints")
      ->group(ck)
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  app.add_flag("--resume", o.resume, "Resume from the newest complete checkpoint in --checkpoint-dir (any world size)")
      ->group(ck);

  const char* out = "Outputs";
  app.add_option("--summary-json", o.summary_json, "Write the end-of-run summary as JSON here (%j = job id)")
      ->group(out);
  app.add_option("--timeline", o.timeline, "Write a Chrome-trace timeline (Perfetto) here")->group(out);
  app.add_option("--metrics", o.metrics, "Write per-step, per-rank metrics here (.csv, otherwise JSONL)")->group(out);
  app.add_option("--progress", o.progress, "Progress line on rank 0: auto (only on a terminal), always, never")
      ->group(out)
      ->check(CLI::IsMember({"auto", "always", "never"}))
      ->capture_default_str();
  app.add_option("--progress-every", o.progress_every, "Steps between progress lines")
      ->group(out)
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--log-level", o.log_level, "error, warn, info, debug or trace (default: ANTDT_LOG_LEVEL or info)")
      ->group(out);
  app.add_flag("--quiet", o.quiet, "Do not print the end-of-run report")->group(out);

  const char* test = "Testing";
  app.add_option("--fail-at-step", o.fail_at_step,
                 "Kill --fail-rank with SIGKILL when it begins this step (failure tests)")
      ->group(test)
      ->capture_default_str();
  app.add_option("--fail-rank", o.fail_rank, "Rank killed by --fail-at-step")
      ->group(test)
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  antdt::cli::add_env_names(app);
}

// Checks the combinations CLI11 cannot; throws UsageError with one line.
void validate(const TrainOptions& o, int world) {
  using antdt::UsageError;
  if (o.steps == 0 && o.epochs == 0) throw UsageError("give --steps or --epochs (or both)");
  if (o.policy == "nd") {
    throw UsageError(
        "--policy nd (non-dedicated mode: backup workers, kill-restart) is not available in this version; "
        "use static or dd");
  }
  if (o.backup_workers > 0) throw UsageError("--backup-workers needs --policy nd");
  if (o.resume && o.checkpoint_dir.empty()) throw UsageError("--resume needs --checkpoint-dir");
  if (o.checkpoint_every > 0 && o.checkpoint_dir.empty()) throw UsageError("--checkpoint-every needs --checkpoint-dir");
  if (o.eval_every > 0 && o.eval_data.empty()) throw UsageError("--eval-every needs --eval-data");
  if (o.read_ahead == "on" && o.read_mode == "collective") {
    throw UsageError(
        "--read-ahead on needs --read-mode independent: collective reads are MPI calls, which antdt "
        "makes from the main thread only");
  }
  if (o.fail_at_step >= 0 && o.fail_rank >= world) {
    throw UsageError("--fail-rank " + std::to_string(o.fail_rank) + " is not a rank of this " + std::to_string(world) +
                     "-rank job");
  }
  (void)antdt::parse_layers(o.layers);
  if (!o.emulate_speed.empty()) (void)antdt::parse_speeds(o.emulate_speed);
  if (!o.emulate_transient.empty()) {
    antdt::EmulationOptions e;
    antdt::parse_transient(o.emulate_transient, e);
  }
  if (!o.log_level.empty()) (void)antdt::log::parse_level(o.log_level);
}

// All ranks learn whether any rank failed a local step (opening a file, say); the failing
// ranks print their own message. Keeps every rank out of a collective that would hang.
void agree(MPI_Comm comm, const std::function<void()>& local) {
  int bad = 0;
  std::string what;
  int code = 0;
  try {
    local();
  } catch (const antdt::UsageError& e) {
    bad = 1, code = antdt::cli::kExitUsage, what = e.what();
  } catch (const antdt::FileError& e) {
    bad = 1, code = antdt::cli::kExitUsage, what = e.what();
  } catch (const std::exception& e) {
    bad = 1, code = antdt::cli::kExitRuntime, what = e.what();
  }
  int codes[2] = {bad, code};
  int worst[2] = {0, 0};
  MPI_Allreduce(codes, worst, 2, MPI_INT, MPI_MAX, comm);
  if (worst[0]) {
    int rank = 0;
    MPI_Comm_rank(comm, &rank);
    if (bad) std::fprintf(stderr, "antdt-train: error (rank %d): %s\n", rank, what.c_str());
    throw antdt::cli::AgreedFailure{worst[1]};
  }
}

// One rank's batch in host memory, page-locked on a GPU (--pin-memory).
using Batch = antdt::data::Batch;

// Evaluates on every rank's contiguous slice of `eval`, then sums over ranks. `b` is scratch
// (the training batch's buffers, so that no second pinned buffer is allocated).
std::pair<double, double> evaluate(antdt::Model& model, antdt::data::Dataset& eval, MPI_Comm comm, std::int64_t chunk,
                                   Batch& b) {
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

void broadcast_floats(std::vector<float>& v, MPI_Comm comm) {
  std::uint64_t n = v.size();
  ANTDT_CHECK_MPI(MPI_Bcast(&n, 1, MPI_UINT64_T, 0, comm));
  v.resize(n);
  ANTDT_CHECK_MPI(MPI_Bcast(v.data(), static_cast<int>(n), MPI_FLOAT, 0, comm));
}

int run(const TrainOptions& o, int world_size) {
  using namespace antdt;
  if (!o.log_level.empty()) log::set_level(log::parse_level(o.log_level));
  const LaunchInfo launch = discover_launch(MPI_COMM_WORLD);
  const std::string job = launch.job_id;
  const DeviceInfo device = select_device(launch.local_rank, parse_device_preference(o.device));

  // Data: every rank opens the training set itself and reads only the samples it is given.
  std::unique_ptr<data::Dataset> train;
  std::unique_ptr<data::Dataset> eval;
  const auto layers = parse_layers(o.layers);
  agree(MPI_COMM_WORLD, [&] {
    data::Hdf5Names names{o.features_name, o.labels_name};
    const auto mode = o.read_mode == "collective" ? data::ReadMode::collective : data::ReadMode::independent;
    if (!o.data.empty()) {
      train = std::make_unique<data::Hdf5Dataset>(o.data, names, mode, MPI_COMM_WORLD);
    } else {
      train = std::make_unique<data::InMemoryDataset>(data::make_synthetic(
          {o.synthetic_samples, layers.front(), static_cast<std::int32_t>(layers.back()), o.synthetic_seed}));
    }
    if (!o.eval_data.empty()) eval = std::make_unique<data::Hdf5Dataset>(o.eval_data, names, mode, MPI_COMM_WORLD);
    if (train->dim() != layers.front()) {
      throw UsageError("--layers starts with " + std::to_string(layers.front()) + " inputs but " +
                       (o.data.empty() ? std::string("the data") : o.data) + " has " + std::to_string(train->dim()) +
                       " features per sample");
    }
    if (train->num_classes() > layers.back()) {
      throw UsageError("--layers ends with " + std::to_string(layers.back()) +
                       " classes but the data has labels up to " + std::to_string(train->num_classes() - 1));
    }
    if (eval && eval->dim() != train->dim()) throw UsageError("--eval-data has a different feature count than --data");
  });

  MlpConfig mc;
  mc.layers = layers;
  mc.optimizer = parse_optimizer(o.optimizer);
  mc.learning_rate = o.lr;
  mc.momentum = o.momentum;
  mc.weight_decay = o.weight_decay;
  mc.seed = o.model_seed;
  auto model = make_mlp(mc, device);
  const std::int64_t cap = o.micro_batch_cap > 0 ? o.micro_batch_cap : micro_batch_cap(*model, device);

  SessionOptions so;
  so.dataset_size = train->size();
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
  so.gradient_bytes = model->gradient_count() * static_cast<std::int64_t>(sizeof(float));
  if (device.backend == Backend::cuda)
    so.device_prior = gpu_relative_throughput(device.compute_capability, device.name);

  Session session(MPI_COMM_WORLD, so);
  const MPI_Comm comm = session.comm().get();
  const bool root = session.rank() == 0;
  auto reducer = make_reducer(session.comm(), device);
  // Whether each step's reduction overlaps the backward pass (docs/compute.md has the
  // measurements behind auto). Every rank decides alike: same flags, same reducer.
  const std::vector<GradientBucket> buckets = model->gradient_buckets();
  // auto leaves emulated stragglers alone: their stretch is a wait after compute, which an
  // overlapped reduction would hide more fully than a really slower device's backward could.
  bool reduce_overlap = o.reduce_overlap == "on" ||
                        (o.reduce_overlap == "auto" && device.backend == Backend::cuda && !session.emulated());
  if (reduce_overlap && !reducer->begin_overlapped(model->gradient_buffer(), model->gradient_count(), buckets)) {
    if (root && o.reduce_overlap == "on") {
      ANTDT_LOG(warn) << "--reduce-overlap on: the " << reducer->name()
                      << " reduction does not overlap in this version; reducing after backward instead";
    }
    reduce_overlap = false;
  }
  // Batch buffers, page-locked on a GPU. Reserved for an even share now; they grow (rarely,
  // geometrically) when the Controller gives this rank more.
  const bool page_locked = o.pin_memory && device.backend == Backend::cuda;
  Batch batch(page_locked);
  // Reads each step's samples; with --read-ahead it also reads the next step's while this one
  // computes (docs/data.md). Declared after the data sets, so it is gone (its read waited
  // for) before they close.
  data::ReadAhead ahead(*train, page_locked);
  const bool read_ahead = o.read_ahead == "on" ||
                          (o.read_ahead == "auto" && device.backend == Backend::cuda && o.read_mode == "independent");
  {
    const auto share = static_cast<std::size_t>((o.global_batch + world_size - 1) / world_size);
    batch.features.reserve(share * static_cast<std::size_t>(train->dim()));
    batch.labels.reserve(share);
  }
  {
    std::vector<std::int64_t> caps(static_cast<std::size_t>(world_size));
    ANTDT_CHECK_MPI(MPI_Gather(&cap, 1, MPI_INT64_T, caps.data(), 1, MPI_INT64_T, 0, comm));
    if (root) {
      std::string c;
      for (auto v : caps) c += (c.empty() ? "" : ",") + std::to_string(v);
      ANTDT_LOG(info) << "model: " << model->parameter_count() << " parameters on " << backend_name(device.backend)
                      << "; micro-batch caps m_i [" << c << "]; reduction via " << reducer->name()
                      << (detail::is_page_locked(batch.features.data()) ? "; batches in page-locked host memory" : "");
    }
  }

  const std::string ckpt_dir = expand_job_id(o.checkpoint_dir, job);
  bool resumed = false;
  if (o.resume) {
    std::optional<std::string> latest;
    std::optional<CheckpointReader> reader;
    agree(comm, [&] {
      if (root) {
        latest = find_latest_checkpoint(ckpt_dir);
        const auto all = list_checkpoints(ckpt_dir);
        if (!latest && !all.empty()) {
          // Checkpoints exist but none is usable: starting fresh would silently discard the
          // run. Report why the newest one fails instead.
          CheckpointReader(all.back()).verify();
          throw CheckpointError("none of the " + std::to_string(all.size()) + " checkpoints in " + ckpt_dir +
                                " is usable");
        }
        if (latest) {
          reader.emplace(*latest);
          const auto saved_layers = reader->int64s("model/layers");
          if (saved_layers != layers) {
            throw CheckpointError("checkpoint " + *latest + " holds a model of shape " +
                                  std::to_string(saved_layers.size()) + " layers that differs from --layers " +
                                  o.layers);
          }
        }
      }
    });
    int have = latest ? 1 : 0;
    ANTDT_CHECK_MPI(MPI_Bcast(&have, 1, MPI_INT, 0, comm));
    if (have) {
      session.restore(reader ? &*reader : nullptr);
      std::vector<float> params, opt_state;
      std::int64_t opt_steps = 0;
      if (root) {
        params = reader->floats("model/parameters", model->parameter_count());
        opt_state = reader->floats("model/optimizer_state");
        opt_steps = reader->int64("model/optimizer_steps");
      }
      broadcast_floats(params, comm);
      broadcast_floats(opt_state, comm);
      ANTDT_CHECK_MPI(MPI_Bcast(&opt_steps, 1, MPI_INT64_T, 0, comm));
      model->set_parameters(params);
      model->set_optimizer_state(opt_state);
      model->set_optimizer_steps(opt_steps);
      resumed = true;
      if (root) {
        ANTDT_LOG(info) << "resumed from " << *latest << " at step " << session.step();
      }
    } else if (root) {
      ANTDT_LOG(info) << "--resume: no checkpoint in " << ckpt_dir << ", starting fresh";
    }
  }

  if (!resumed && o.probe && o.policy != "static") {
    // A few micro-steps on this rank's first samples time its speed for the planner.
    const std::int64_t n =
        std::min<std::int64_t>({cap, train->size(), std::max<std::int64_t>(1, o.global_batch / world_size)});
    std::vector<std::int64_t> idx(static_cast<std::size_t>(n));
    std::iota(idx.begin(), idx.end(), 0);
    batch.features.resize(static_cast<std::size_t>(n * train->dim()));
    batch.labels.resize(static_cast<std::size_t>(n));
    train->read(idx, batch.features.data(), batch.labels.data());
    session.probe([&](std::int64_t m) {
      model->zero_gradients();
      (void)model->accumulate(batch.features.data(), batch.labels.data(), std::min(m, n));
      model->synchronize();
    });
    model->zero_gradients();
  }

  auto save_checkpoint = [&] {
    if (!root) return;
    CheckpointWriter w(ckpt_dir, session.step());
    session.save(w);
    w.put_floats("model/parameters", model->parameters());
    w.put_floats("model/optimizer_state", model->optimizer_state());
    w.put_int64("model/optimizer_steps", model->optimizer_steps());
    w.put_int64s("model/layers", layers);
    w.put_string("model/optimizer", o.optimizer);
    w.put_uint64s("rng/seeds", std::vector<std::uint64_t>{o.model_seed, o.data_seed, o.emulate_seed, o.synthetic_seed});
    w.put_string("run/job_id", job);
    const auto path = w.commit(o.checkpoint_keep);
    ANTDT_LOG(debug) << "checkpoint " << path;
  };

  const bool show_progress = root && (o.progress == "always" || (o.progress == "auto" && isatty(STDERR_FILENO)));
  const double t_start = MPI_Wtime();
  const std::int64_t committed_at_start = session.samples_committed();  // > 0 after a resume
  const std::int64_t step_at_start = session.step();
  std::vector<double> recent_loss;
  std::optional<std::pair<double, double>> eval_result;
  const std::int64_t dim = train->dim();

  while (!session.finished()) {
    if (o.fail_at_step >= 0 && session.step() == o.fail_at_step && session.rank() == o.fail_rank) {
      std::fprintf(stderr, "antdt-train: rank %d: --fail-at-step %lld: killing myself\n", o.fail_rank,
                   static_cast<long long>(o.fail_at_step));
      std::fflush(stderr);
      std::raise(SIGKILL);
    }
    StepWork work = session.begin_step();
    (void)ahead.fill(work.samples, batch);  // without a read-ahead started, a plain read
    session.mark_data_ready();
    if (read_ahead && !(o.steps > 0 && session.step() + 1 >= o.steps)) ahead.start(session.next_samples());

    model->zero_gradients();
    // Overlapped: the step's last micro-batch reports each layer as backward finishes it, and
    // its all-reduce starts then (a rank with no samples starts them all in reduce_sums).
    std::unique_ptr<OverlappedReduction> overlap =
        reduce_overlap ? reducer->begin_overlapped(model->gradient_buffer(), model->gradient_count(), buckets)
                       : nullptr;
    BatchResult total;
    std::int64_t offset = 0;
    for (std::size_t i = 0; i < work.micro_batches.size(); ++i) {
      const std::int64_t m = work.micro_batches[i];
      const float* x = batch.features.data() + offset * dim;
      const std::int32_t* y = batch.labels.data() + offset;
      const auto r = overlap && i + 1 == work.micro_batches.size() ? model->accumulate_overlapped(x, y, m, *overlap)
                                                                   : model->accumulate(x, y, m);
      total.loss_sum += r.loss_sum;
      total.correct += r.correct;
      total.device_seconds += r.device_seconds;
      offset += m;
    }
    model->synchronize();
    session.mark_compute_done(device.backend == Backend::cuda ? total.device_seconds : -1.0);
    if (overlap) {
      session.reduce_sums(*overlap);
    } else {
      session.reduce_sums(model->gradient_buffer(), model->gradient_count(), *reducer);
    }
    model->apply_update();
    const StepSummary s = session.end_step(total.loss_sum, total.correct);

    if (s.samples > 0) recent_loss.push_back(s.loss_sum / static_cast<double>(s.samples));
    if (recent_loss.size() > 10) recent_loss.erase(recent_loss.begin());
    const std::int64_t done_steps = session.step();
    const bool eval_due = eval && o.eval_every > 0 && done_steps % o.eval_every == 0;
    const bool checkpoint_due = o.checkpoint_every > 0 && done_steps % o.checkpoint_every == 0 && !session.finished();
    if (eval_due || checkpoint_due) ahead.wait();  // HDF5 is not thread-safe
    if (eval_due) {
      eval_result = evaluate(*model, *eval, comm, cap, batch);
      if (root) {
        ANTDT_LOG(info) << "step " << done_steps << ": eval loss " << eval_result->first << ", accuracy "
                        << eval_result->second;
      }
    }
    if (checkpoint_due) save_checkpoint();
    if (show_progress && (done_steps % o.progress_every == 0 || session.finished())) {
      const double elapsed = MPI_Wtime() - t_start;
      const auto x = session.rank_throughput();
      const double ideal = std::accumulate(x.begin(), x.end(), 0.0);
      const auto done_here = session.samples_committed() - committed_at_start;
      const double thr = static_cast<double>(done_here) / std::max(1e-9, elapsed);
      double eta = -1;
      if (o.steps > 0) {
        const auto steps_here = std::max<std::int64_t>(1, done_steps - step_at_start);
        eta = elapsed / static_cast<double>(steps_here) * static_cast<double>(o.steps - done_steps);
      }
      if (o.epochs > 0 && done_here > 0) {  // whichever limit comes first
        const double left = static_cast<double>(o.epochs * train->size() - session.samples_committed());
        const double by_epochs = left / thr;
        eta = eta < 0 ? by_epochs : std::min(eta, by_epochs);
      }
      std::string split;
      for (auto b : session.plan().batch) split += (split.empty() ? "" : ",") + std::to_string(b);
      std::fprintf(stderr, "%sstep %lld epoch %lld | %.0f samples/s | loss %.4f | ETA %s | split [%s] | eff %.2f%s\n",
                   job.empty() ? "" : ("[job " + job + "] ").c_str(), static_cast<long long>(done_steps),
                   static_cast<long long>(s.completed_epochs), thr, recent_loss.empty() ? 0.0 : recent_loss.back(),
                   format_eta(eta).c_str(), split.c_str(), ideal > 0 ? thr / ideal : 0.0,
                   session.emulated() ? " | EMULATED" : "");
    }
  }
  const double wall = MPI_Wtime() - t_start;
  ahead.wait();
  // Rows trained from the read-ahead, and read while waiting, over all ranks.
  std::int64_t rows[2] = {ahead.rows_ahead(), ahead.rows_now()};
  ANTDT_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, rows, 2, MPI_INT64_T, MPI_SUM, comm));
  if (eval) eval_result = evaluate(*model, *eval, comm, cap, batch);
  if (!ckpt_dir.empty()) save_checkpoint();

  if (root) {
    RunSummary sum;
    sum.backend = std::string(backend_name(device.backend));
    sum.device = device.name;
    sum.reducer = std::string(reducer->name());
    sum.pinned_batches = detail::is_page_locked(batch.features.data());
    sum.read_ahead = read_ahead;
    sum.reduce_overlap = reduce_overlap;
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
    const auto params = model->parameters();
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
    if (!o.metrics.empty()) {
      const auto path = expand_job_id(o.metrics, job);
      write_metrics(path, session.records(), metrics_format_for(path));
    }
    if (!o.timeline.empty()) write_timeline(expand_job_id(o.timeline, job), session.records(), session.plan_history());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  antdt::Environment env(argc, argv);
  CLI::App app{
      "antdt-train: data-parallel MLP training that balances ranks of different speeds "
      "(dynamic sharding, exact weighted gradients).",
      "antdt-train"};
  app.set_version_flag("--version", std::string("antdt ") + ANTDT_VERSION_STRING);
  app.get_formatter()->column_width(44);
  TrainOptions o;
  add_options(app, o);
  const int parsed = antdt::cli::parse(app, argc, argv, env.world_rank());
  if (parsed >= 0) return parsed;
  try {
    validate(o, env.world_size());
  } catch (const antdt::Error& e) {
    if (env.world_rank() == 0) std::fprintf(stderr, "antdt-train: error: %s\n", e.what());
    return antdt::cli::kExitUsage;
  }
  try {
    return antdt::cli::guarded("antdt-train", env.world_rank(), env.world_size(),
                               [&] { return run(o, env.world_size()); });
  } catch (const antdt::cli::AgreedFailure& f) {
    return f.code;  // every rank agreed; the failing ranks printed why
  }
}
