// antdt-train: data-parallel training of an MLP classifier with antdt's dynamic sharding,
// straggler-aware batch planning and exact weighted gradient reduction.
//
//   mpirun -np 4 antdt-train --data train.h5 --hidden 64 --global-batch 256
//          --epochs 2 --policy dd --emulate-speed 1,1,1,0.33 --summary-json run.json
//
// Every option is also an ANTDT_* environment variable and a --config file key
// (train/options.cpp, antdt/cli.hpp). antdt-train is one program on antdt::Job among others:
// the Job owns the run's life (checks, checkpoints, resume, signals, exit codes, outputs); this
// file opens the data (and scans it for NaN/Inf), sizes and builds the MLP, and runs its steps
// (train/trainer.cpp). Everything before the steps is checked on every rank and agreed
// (detail::agree), so a bad input is one line and no training lost.
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

#include <sys/sysinfo.h>

#include "antdt/antdt.hpp"
#include "antdt/cli.hpp"
#include "controller/planner.hpp"
#include "core/error_kind.hpp"
#include "core/log.hpp"
#include "job/agree.hpp"
#include "job/job_access.hpp"
#include "runtime/launcher.hpp"
#include "train/options.hpp"
#include "train/trainer.hpp"
#include "transport/guard.hpp"

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
  detail::agree(MPI_COMM_WORLD, [&] { mine = data::find_non_finite(set, n * rank / world, n * (rank + 1) / world); });
  int count = static_cast<int>(mine.size());
  std::vector<int> counts(static_cast<std::size_t>(world)), offsets(static_cast<std::size_t>(world), 0);
  detail::allgather(&count, 1, MPI_INT, counts.data(), MPI_COMM_WORLD);
  for (int r = 1; r < world; ++r) offsets[r] = offsets[r - 1] + counts[r - 1];
  std::vector<std::int64_t> all(static_cast<std::size_t>(offsets.back() + counts.back()));
  MPI_Request q = MPI_REQUEST_NULL;
  ANTDT_CHECK_MPI(MPI_Iallgatherv(mine.data(), count, MPI_INT64_T, all.data(), counts.data(), offsets.data(),
                                  MPI_INT64_T, MPI_COMM_WORLD, &q));
  detail::wait_requests(std::span<MPI_Request>(&q, 1));
  return all;  // slices are in rank order, each ascending
}

// Drops (--skip-non-finite) or refuses the samples of `set` with a NaN or Inf feature. The
// decision is the same on every rank (the same joined list), so it is taken with no message.
std::int64_t handle_non_finite(const TrainOptions& o, std::unique_ptr<data::Dataset>& set, const std::string& path,
                               const char* option, int rank) {
  const std::vector<std::int64_t> bad = find_non_finite_everywhere(*set);
  if (bad.empty()) return 0;
  if (!o.skip_non_finite) {
    detail::throw_shared_error(detail::ErrorKind::file,
                               "data file '" + path + "' (" + option + "): sample " + std::to_string(bad[0]) +
                                   " has a NaN or infinite feature (" + std::to_string(bad.size()) + " of " +
                                   std::to_string(set->size()) +
                                   " samples do); fix the data, or pass --skip-non-finite to train without them",
                               rank != 0);
  }
  const auto total = set->size();
  if (static_cast<std::int64_t>(bad.size()) == total) {
    detail::throw_shared_error(detail::ErrorKind::file,
                               "data file '" + path + "' (" + option + "): every one of its " + std::to_string(total) +
                                   " samples has a NaN or infinite feature",
                               rank != 0);
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
  detail::agree(MPI_COMM_WORLD, [&] {
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
  detail::agree(MPI_COMM_WORLD, [&] {
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
    if (o.job.session.global_batch > n) {
      throw UsageError("--global-batch " + std::to_string(o.job.session.global_batch) + " is larger than the " +
                       std::to_string(n) + " samples of " + train_name + kept +
                       ": a step would use samples twice; give at most " + std::to_string(n));
    }
    if (o.job.session.global_batch < world) {
      throw UsageError("--global-batch " + std::to_string(o.job.session.global_batch) + " is smaller than the " +
                       std::to_string(world) + " ranks: " + std::to_string(world - o.job.session.global_batch) +
                       " would get no sample in any step; give at least " + std::to_string(world) +
                       " or run on fewer ranks");
    }
  });
  return d;
}

// Host memory the model needs, before it is allocated: parameters, gradients and the
// optimizer's moments (one for SGD with momentum, two for Adam), and a micro-batch's
// activations at the widest layer.
std::uint64_t model_bytes(const TrainOptions& o, const std::vector<std::int64_t>& layers) {
  std::uint64_t params = 0, widest = 0;
  for (std::size_t i = 0; i + 1 < layers.size(); ++i) {
    params += static_cast<std::uint64_t>(layers[i] + 1) * static_cast<std::uint64_t>(layers[i + 1]);
    widest = std::max<std::uint64_t>(widest, static_cast<std::uint64_t>(layers[i + 1]));
  }
  const std::uint64_t copies = 2 + (o.optimizer == "adam" ? 2 : 1);
  return sizeof(float) * (params * copies + widest * 4 * 256);
}

// The model must fit this node's free memory (MemAvailable, and a cgroup limit where there is
// one): otherwise the kernel's OOM killer ends the job, maybe someone else's process, with no
// line from antdt.
void check_memory(const TrainOptions& o, const std::vector<std::int64_t>& layers, const DeviceInfo& device) {
  if (device.backend != Backend::host) return;  // the CUDA backend sizes itself from the device's free memory
  std::uint64_t available = 0;
  if (std::FILE* f = std::fopen("/proc/meminfo", "r")) {
    char key[64];
    unsigned long long kb = 0;
    while (std::fscanf(f, "%63s %llu kB", key, &kb) == 2) {
      if (std::string(key) == "MemAvailable:") available = static_cast<std::uint64_t>(kb) * 1024;
    }
    std::fclose(f);
  }
  for (const char* limit : {"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}) {
    if (std::FILE* f = std::fopen(limit, "r")) {
      unsigned long long bytes = 0;
      if (std::fscanf(f, "%llu", &bytes) == 1 && bytes > 0 && (available == 0 || bytes < available)) available = bytes;
      std::fclose(f);
    }
  }
  const std::uint64_t need = model_bytes(o, layers);
  if (available > 0 && need > available) {
    const auto gib = [](std::uint64_t b) { return std::to_string(static_cast<double>(b) / (1 << 30)).substr(0, 6); };
    std::string shape;
    for (const auto width : layers) shape += (shape.empty() ? "" : ",") + std::to_string(width);
    // The input and output widths come from the data: a huge one is more likely a damaged
    // label or feature count than a model someone meant.
    const auto widest_but = [&](std::size_t skip) {
      std::int64_t w = 0;
      for (std::size_t i = 0; i < layers.size(); ++i) w = i == skip ? w : std::max(w, layers[i]);
      return w;
    };
    std::string why = "give smaller layers";
    if (layers.size() >= 2 && layers.back() > widest_but(layers.size() - 1)) {
      why = "its output layer has " + std::to_string(layers.back()) +
            " classes, 1 + the largest label of --data (or its labels' num_classes attribute): check the labels";
    } else if (layers.size() >= 2 && layers.front() > widest_but(0)) {
      why = "its input layer has the " + std::to_string(layers.front()) + " features of a sample of --data";
    }
    throw UsageError("the model " + shape + " " + std::string(o.layers.empty() ? "(--hidden)" : "(--layers)") +
                     " needs about " + gib(need) + " GiB of memory (parameters, gradients, optimizer state) but this " +
                     "node has " + gib(available) + " GiB available; " + why);
  }
}

std::unique_ptr<Model> build_model(const TrainOptions& o, const std::vector<std::int64_t>& layers,
                                   const DeviceInfo& device) {
  check_memory(o, layers, device);
  MlpConfig mc;
  mc.layers = layers;
  mc.optimizer = parse_optimizer(o.optimizer);
  mc.learning_rate = o.lr;
  mc.momentum = o.momentum;
  mc.weight_decay = o.weight_decay;
  mc.seed = o.model_seed;
  return make_mlp(mc, device);
}

Reduction make_reduction(const TrainOptions& o, Session& session, Model& model, const DeviceInfo& device) {
  Reduction r;
  r.reducer = make_reducer(session.comm(), device);
  // The MPI reducer follows the ranks that take part (Session::comm()); NCCL keeps its own.
  if (r.reducer->name() != "mpi") session.keep_every_rank();
  r.buckets = model.gradient_buckets();
  // auto leaves emulated stragglers alone: their stretch is a wait after compute, which an
  // overlapped reduction would hide more fully than a really slower device's backward could.
  // Pooled steps have no known last micro-batch to overlap.
  r.overlap = !policy_pools(o.job.session.controller.policy) &&
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
// seeds (the Job adds the data set's size and the data seed). Not the world size (restarts
// are elastic), the schedule limits or the policy.
std::vector<std::pair<std::string, std::string>> run_identity(const TrainOptions& o, const Data& d,
                                                              const std::vector<std::int64_t>& layers) {
  std::vector<std::pair<std::string, std::string>> id;
  std::error_code ec;
  id.emplace_back("data",
                  o.data.empty() ? std::string("synthetic") : std::filesystem::weakly_canonical(o.data, ec).string());
  id.emplace_back("features", std::to_string(d.train->dim()));
  id.emplace_back("classes", std::to_string(d.train->num_classes()));
  id.emplace_back("model_shape", widths_text(layers));
  id.emplace_back("optimizer", o.optimizer);
  id.emplace_back("model_seed", std::to_string(o.model_seed));
  if (o.data.empty()) id.emplace_back("synthetic_seed", std::to_string(o.synthetic_seed));
  return id;
}

// `started`: when the process started, for the measured part of a restart's cost.
int run(TrainOptions& o, std::chrono::steady_clock::time_point started) {
  // Every wait from here is guarded, the reading of the data included: a rank that stalls in
  // any phase is named and every rank stops (exit 5) within the step timeout and a grace.
  const double timeout = o.job.session.step_timeout_seconds;
  detail::Guard guard(MPI_COMM_WORLD, timeout >= 0.0 && timeout <= 1e9 ? timeout : 0.0, o.job.session.wait_spin_seconds,
                      discover_node_name());
  detail::GuardInstall install(&guard);
  const LaunchInfo launch = discover_launch(MPI_COMM_WORLD);
  int world = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  detail::agree(MPI_COMM_WORLD, [&] {
    validate(o, world);
    // The level before anything logs: the device line comes before the Job that sets it too.
    if (!o.job.output.log_level.empty()) log::set_level(log::parse_level(o.job.output.log_level));
  });
  // Every output is checked before anything is read or trained: a run must not end by failing
  // to write what it was run for.
  o.job.inputs = {{"--data", o.data}, {"--eval-data", o.eval_data}};
  detail::check_job_outputs(o.job, MPI_COMM_WORLD);
  const DeviceInfo device = select_device(launch.local_rank, parse_device_preference(o.device));
  std::vector<std::int64_t> layers;
  Data data = open_data(o, layers, world);
  std::unique_ptr<Model> model;
  detail::agree(MPI_COMM_WORLD, [&] { model = build_model(o, layers, device); });
  const std::int64_t cap =
      o.job.session.micro_batch_cap > 0 ? o.job.session.micro_batch_cap : micro_batch_cap(*model, device);
  SessionOptions& so = o.job.session;
  so.dataset_size = data.train->size();
  so.micro_batch_cap = cap;
  so.gradient_bytes = model->gradient_count() * static_cast<std::int64_t>(sizeof(float));
  if (device.backend == Backend::cuda)
    so.device_prior = gpu_relative_throughput(device.compute_capability, device.name);
  o.job.identity = run_identity(o, data, layers);
  Job job(o.job);
  detail::JobAccess::set_start_seconds(
      job, std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
  Session& session = detail::JobAccess::session(job);
  Reduction reduction = make_reduction(o, session, *model, device);
  Trainer t{o, job, session, *model, data, reduction, device, layers, cap};
  t.reserve_batch();
  if (t.root()) {
    std::string caps;
    for (auto v : session.micro_batch_caps()) caps += (caps.empty() ? "" : ",") + std::to_string(v);
    ANTDT_LOG(info) << "model: " << widths_text(layers) << " (" << model->parameter_count() << " parameters) on "
                    << backend_name(device.backend) << "; micro-batch caps m_i [" << caps << "]; reduction via "
                    << reduction.reducer->name()
                    << (detail::is_page_locked(t.batch.features.data()) ? "; batches in page-locked host memory" : "");
  }
  t.attach();
  while (job.next_step()) t.step();
  return job.exit_code();
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
  if (const int code = antdt::parse(app, argc, argv, o.job); code >= 0) return code;
  return antdt::run_main("antdt-train", [&] { return antdt::train::run(o, started); });
}
