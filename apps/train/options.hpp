// antdt-train's options: every one is a flag, an ANTDT_* environment variable and a --config
// key (cli/cli_common.hpp). add_options registers them; validate checks what CLI11 cannot.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace antdt::train {

struct TrainOptions {
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
  int backup_workers = -1;  // nd only; -1: 1, or 0 on a single rank
  int nd_chunks = 8;
  double nd_first_chunk = 0.0;
  std::string nd_pool = "auto";
  int max_restarts = 3;
  std::int64_t restart_cooldown = 0;
  bool probe = true;
  double min_gain = 0.05;
  std::string fixed_split;  // policy static: b_0,b_1,... instead of equal batches
  std::int64_t min_interval = 10;
  int window = 20;
  int persistence = 5;
  // emulation
  std::string emulate_speed;
  std::string emulate_transient;
  std::string emulate_schedule;
  double virtual_device = 0.0;
  std::uint64_t emulate_seed = 0;
  // checkpoints
  std::string checkpoint_dir;
  std::int64_t checkpoint_every = 0;
  double checkpoint_minutes = 10.0;
  int checkpoint_keep = 3;
  bool resume = false;
  bool checkpoint_overwrite = false;
  // outputs
  std::string summary_json;
  std::string timeline;
  std::string metrics;
  std::string progress = "auto";
  std::int64_t progress_every = 10;
  std::string log_level;
  bool quiet = false;
  // failures
  double step_timeout = 600.0;
  std::string stop_signals = "TERM,INT,USR1";
  // testing
  std::string sample_log;
  std::int64_t fail_in_checkpoint = -1;
  std::int64_t fail_at_step = -1;
  int fail_rank = 0;
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
