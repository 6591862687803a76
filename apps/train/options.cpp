#include "train/options.hpp"

#include "antdt/cli.hpp"
#include "antdt/emulation.hpp"
#include "antdt/error.hpp"
#include "core/log.hpp"
#include "job/job_access.hpp"
#include "model/model.hpp"

namespace antdt::train {

void add_options(CLI::App& app, TrainOptions& o) {
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);  // a later --x wins
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
      ->check(cli::positive<std::int64_t>())
      ->capture_default_str();
  app.add_option("--synthetic-dim", o.synthetic_dim, "Features per sample of the synthetic set (no --data)")
      ->group(data)
      ->check(cli::positive<std::int64_t>())
      ->capture_default_str();
  app.add_option("--synthetic-classes", o.synthetic_classes, "Classes of the synthetic set (no --data)")
      ->group(data)
      ->check(cli::in_range<std::int32_t>(2, 1 << 20))
      ->capture_default_str();
  app.add_option("--synthetic-seed", o.synthetic_seed, "Seed of the in-memory synthetic set")
      ->group(data)
      ->capture_default_str();
  app.add_flag("--skip-non-finite", o.skip_non_finite,
               "Drop the samples whose features hold a NaN or an infinity, and train on the rest (the summary "
               "counts them); without it such a sample is an error naming the file and the sample")
      ->group(data);
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
      ->check(cli::at_least<std::int64_t>(0))
      ->capture_default_str();

  const char* model = "Model";
  app.add_option("--hidden", o.hidden,
                 std::string("Hidden layer widths, e.g. 256,256 (none: no hidden layer); the input width and the "
                             "class count come from the data (default: ") +
                     kDefaultHidden + ")")
      ->group(model);
  app.add_option("--layers", o.layers,
                 "All MLP widths, input,hidden...,classes, instead of --hidden (the input must match the data, and "
                 "the classes cover its labels)")
      ->group(model);
  app.add_option("--optimizer", o.optimizer, "sgd (with momentum) or adam")
      ->group(model)
      ->check(CLI::IsMember({"sgd", "adam"}))
      ->capture_default_str();
  app.add_option("--lr", o.lr, "Learning rate")->group(model)->check(cli::positive<float>())->capture_default_str();
  app.add_option("--momentum", o.momentum, "SGD momentum")
      ->group(model)
      ->check(cli::in_range<float>(0.0f, 1.0f))
      ->capture_default_str();
  app.add_option("--weight-decay", o.weight_decay, "L2 weight decay")
      ->group(model)
      ->check(cli::at_least<float>(0.0f))
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

  antdt::add_job_options(app, o.job);
  antdt::cli::add_env_names(app);  // antdt-train's own options too: --hidden is ANTDT_HIDDEN
}

namespace {

// --hidden: positive widths separated by commas, or "none".
std::vector<std::int64_t> parse_hidden(const std::string& text) {
  if (text == "none") return {};
  try {
    const auto widths = antdt::parse_layers("1," + text + ",1");
    return {widths.begin() + 1, widths.end() - 1};
  } catch (const antdt::UsageError&) {
    throw antdt::UsageError("--hidden '" + text +
                            "': give positive widths separated by commas, e.g. 256,256 (or none for no hidden layer)");
  }
}

}  // namespace

void validate(const TrainOptions& o, int world) {
  using antdt::UsageError;
  // The Job's own checks, before anything is read (the data set's size is not known yet).
  antdt::detail::validate_job_options(o.job, world, false);
  if (!o.layers.empty() && !o.hidden.empty()) {
    throw UsageError(
        "give --layers (every width) or --hidden (the hidden widths; the rest comes from the data), not both");
  }
  if (!o.hidden.empty()) (void)parse_hidden(o.hidden);
  if (o.data.empty() && o.skip_non_finite)
    throw UsageError("--skip-non-finite needs --data (synthetic data is finite)");
  if (o.eval_every > 0 && o.eval_data.empty()) throw UsageError("--eval-every needs --eval-data");
  if (o.read_ahead == "on" && o.read_mode == "collective") {
    throw UsageError(
        "--read-ahead on needs --read-mode independent: collective reads are MPI calls, which antdt "
        "makes from the main thread only");
  }
  if (!o.layers.empty()) (void)antdt::parse_layers(o.layers);
}

std::vector<std::int64_t> model_layers(const TrainOptions& o, std::int64_t dim, std::int32_t classes,
                                       const std::string& data_name) {
  using antdt::UsageError;
  if (o.layers.empty()) {
    const auto widths = parse_hidden(o.hidden.empty() ? kDefaultHidden : o.hidden);
    std::vector<std::int64_t> layers{dim};
    layers.insert(layers.end(), widths.begin(), widths.end());
    layers.push_back(classes);
    return layers;
  }
  const auto layers = antdt::parse_layers(o.layers);
  if (layers.front() != dim) {
    throw UsageError("--layers " + o.layers + " starts with " + std::to_string(layers.front()) + " inputs but " +
                     data_name + " has " + std::to_string(dim) +
                     " features per sample; drop --layers (the widths then come from the data) or start it with " +
                     std::to_string(dim));
  }
  if (classes > layers.back()) {
    throw UsageError("--layers " + o.layers + " ends with " + std::to_string(layers.back()) + " classes but " +
                     data_name + " has " + std::to_string(classes) + " (labels up to " + std::to_string(classes - 1) +
                     "); drop --layers or end it with " + std::to_string(classes));
  }
  return layers;
}

}  // namespace antdt::train
