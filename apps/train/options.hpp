// antdt-train's options: its data and its model; the run's life, schedule and policy are a
// Job's (antdt/cli.hpp). Every one is a flag, an ANTDT_* environment variable and a --config
// key. add_options registers them; validate checks what CLI11 cannot.
#pragma once

#include <CLI/CLI.hpp>

#include "antdt/job.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace antdt::train {

struct TrainOptions {
  // The run's life, schedule and policy: every option a program on antdt::Job has (antdt/cli.hpp).
  JobOptions job = defaults();
  // data
  std::string data;
  std::string eval_data;
  std::string features_name = "features";
  std::string labels_name = "labels";
  std::int64_t synthetic_samples = 8192;
  std::int64_t synthetic_dim = 32;
  std::int32_t synthetic_classes = 10;
  std::uint64_t synthetic_seed = 7;
  bool skip_non_finite = false;
  std::int64_t eval_every = 0;
  std::string read_mode = "independent";
  std::string read_ahead = "auto";
  std::string reduce_overlap = "auto";
  // model
  std::string layers;  // explicit input,hidden...,classes; empty: from the data and --hidden
  std::string hidden;  // hidden widths between the data's features and classes; empty: kDefaultHidden
  std::string optimizer = "sgd";
  float lr = 0.05f;
  float momentum = 0.9f;
  float weight_decay = 0.0f;
  std::uint64_t model_seed = 1;
  std::string device = "auto";
  bool pin_memory = true;

  // antdt-train's defaults where they differ from a Job's: a global batch of 256.
  static JobOptions defaults() {
    JobOptions o;
    o.program = "antdt-train";
    o.session.global_batch = 256;
    return o;
  }
};

// The hidden layers of a model sized by its data when neither --layers nor --hidden is given.
inline constexpr const char* kDefaultHidden = "64";

void add_options(CLI::App& app, TrainOptions& o);
// Checks the combinations CLI11 cannot; throws UsageError with one line.
void validate(const TrainOptions& o, int world);

// The model's widths: --layers as given, or the data's feature count, the hidden widths of
// --hidden (default kDefaultHidden; "none" for none) and the data's class count. --layers is
// checked against the data: UsageError naming `data_name` when the input width differs or the
// data has more classes than the model.
[[nodiscard]] std::vector<std::int64_t> model_layers(const TrainOptions& o, std::int64_t dim, std::int32_t classes,
                                                     const std::string& data_name);

}  // namespace antdt::train
