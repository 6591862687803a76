// antdt's options on a CLI11 command line (CLI11 is header-only; so is this header): a training
// code with its own CLI11 app gets every option antdt-train has for a run's life and policy,
// under the same names, environment variables and config keys.
//
//   CLI::App app{"my trainer"};
//   antdt::JobOptions opt;
//   antdt::add_job_options(app, opt);                  // --global-batch, --policy, --resume, ...
//   app.add_option("--lr", lr, "Learning rate");       // the program's own
//   if (int code = antdt::parse(app, argc, argv, opt); code >= 0) return code;
//
// Every option antdt adds is also an ANTDT_<NAME> environment variable (--global-batch:
// ANTDT_GLOBAL_BATCH) and a key of the --config file (TOML; an unknown key is an error naming
// the line). A program with another command-line parser takes the same options from the
// environment alone: job_options_from_env().
#pragma once

#include <mpi.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdio>
#include <iterator>
#include <limits>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "antdt/emulation.hpp"
#include "antdt/error.hpp"
#include "antdt/job.hpp"
#include "antdt/options.hpp"

namespace antdt {

namespace cli {

namespace detail {
template <class T>
std::string bound_text(T v) {
  if constexpr (std::is_integral_v<T>) {
    return std::to_string(v);
  } else {
    std::ostringstream os;
    os << v;
    return os.str();
  }
}
// A whole number that fits T, or a finite real: never clamped (strtoll would turn
// 99999999999999999999 into 9223372036854775807 without a word).
template <class T>
bool parse_number(const std::string& input, T& v) {
  if constexpr (std::is_integral_v<T>) {
    const auto [end, ec] = std::from_chars(input.data(), input.data() + input.size(), v);
    return ec == std::errc() && end == input.data() + input.size();
  } else {
    return CLI::detail::lexical_cast(input, v) && std::isfinite(static_cast<double>(v));
  }
}
template <class T>
CLI::Validator bounded(T low, bool low_open, T high, std::string description) {
  return CLI::Validator(
      [=](std::string& input) -> std::string {
        T v{};
        if (!parse_number(input, v)) {
          std::int64_t probe = 0;
          const bool digits = !input.empty() && std::all_of(input.begin() + (input[0] == '-' ? 1 : 0), input.end(),
                                                            [](unsigned char c) { return std::isdigit(c) != 0; });
          if (std::is_integral_v<T> && digits && !parse_number(input, probe))
            return input + " is too large: at most " + std::to_string(std::numeric_limits<T>::max());
          return "'" + input + "' is not a number";
        }
        const bool low_ok = low_open ? v > low : v >= low;
        if (!low_ok || v > high) return input + " is not " + description;
        return {};
      },
      description);
}
}  // namespace detail

// value >= low
template <class T>
CLI::Validator at_least(T low) {
  return detail::bounded<T>(low, false, std::numeric_limits<T>::max(), ">= " + detail::bound_text(low));
}
// value > 0 (for real numbers: strictly positive)
template <class T>
CLI::Validator positive() {
  return std::is_integral_v<T> ? at_least<T>(T{1})
                               : detail::bounded<T>(T{0}, true, std::numeric_limits<T>::max(), "> 0");
}
// low <= value <= high
template <class T>
CLI::Validator in_range(T low, T high) {
  return detail::bounded<T>(low, false, high, "in [" + detail::bound_text(low) + ", " + detail::bound_text(high) + "]");
}

// A --config file checked line by line before CLI11 reads it: an unknown key (a typo such as
// global-bacth), a line that is not `key = value`, or a section header (antdt's options have
// no sections, so a key under one would be ignored) is an error naming the file and the line.
// Comments (#, ;) and blank lines pass; a value may be a [list] spanning lines, which a
// one-value option takes as its comma list.
class StrictConfig : public CLI::ConfigTOML {
 public:
  explicit StrictConfig(const CLI::App& app) : app_(app) {}

  std::vector<CLI::ConfigItem> from_config(std::istream& input) const override {
    const std::string text((std::istreambuf_iterator<char>(input)), std::istreambuf_iterator<char>());
    check(text);
    std::istringstream again(text);
    std::vector<CLI::ConfigItem> parsed = CLI::ConfigTOML::from_config(again);
    // A TOML list given to a one-value option (emulate-speed = [1, 0.5]) is the comma list
    // that option takes, not several values of which the last would win.
    for (CLI::ConfigItem& item : parsed) {
      const CLI::Option* opt = app_.get_option_no_throw("--" + item.name);
      if (opt == nullptr || item.inputs.size() < 2 || opt->get_items_expected_max() != 1) continue;
      std::string joined;
      for (const auto& v : item.inputs) joined += (joined.empty() ? "" : ",") + v;
      item.inputs = {joined};
    }
    return parsed;
  }

 private:
  static std::string trim(const std::string& s) {
    const auto b = s.find_first_not_of(" \t\r");
    if (b == std::string::npos) return {};
    return s.substr(b, s.find_last_not_of(" \t\r") - b + 1);
  }

  [[nodiscard]] std::vector<std::string> keys() const {
    std::vector<std::string> out;
    for (const CLI::Option* opt : app_.get_options()) {
      for (const auto& name : opt->get_lnames()) {
        if (name != "help" && name != "help-all" && name != "version" && name != "config") out.push_back(name);
      }
    }
    return out;
  }

  // The known key nearest to `key` by edit distance, if it is near enough to be a typo.
  [[nodiscard]] std::string nearest(const std::string& key) const {
    std::string best;
    std::size_t best_distance = 3;
    for (const auto& candidate : keys()) {
      std::vector<std::size_t> row(candidate.size() + 1);
      for (std::size_t j = 0; j <= candidate.size(); ++j) row[j] = j;
      for (std::size_t i = 1; i <= key.size(); ++i) {
        std::size_t diagonal = row[0];
        row[0] = i;
        for (std::size_t j = 1; j <= candidate.size(); ++j) {
          const std::size_t up = row[j];
          row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (key[i - 1] == candidate[j - 1] ? 0U : 1U)});
          diagonal = up;
        }
      }
      if (row[candidate.size()] < best_distance) best_distance = row[candidate.size()], best = candidate;
    }
    return best;
  }

 public:
  // Where the config file set `key` ("config file 'F', line N"), or "" when it did not.
  [[nodiscard]] std::string where(const std::string& key) const {
    const auto it = lines_.find(key);
    return it == lines_.end() ? std::string() : "config file '" + file_ + "', line " + std::to_string(it->second);
  }
  // The keys the config file set.
  [[nodiscard]] std::vector<std::string> keys_set() const {
    std::vector<std::string> out;
    for (const auto& [key, line] : lines_) out.push_back(key);
    return out;
  }

 private:
  void check(const std::string& text) const {
    const CLI::Option* config = app_.get_config_ptr();
    const std::string file = config != nullptr && config->count() > 0 ? config->as<std::string>() : "--config";
    file_ = file;
    lines_.clear();
    const auto known = keys();
    std::istringstream lines(text);
    std::string raw;
    int number = 0;
    bool in_list = false;  // inside a [ ... ] value continued over lines
    while (std::getline(lines, raw)) {
      ++number;
      const std::string line = trim(raw);
      auto fail = [&](const std::string& what) {
        throw CLI::ConfigError("config file '" + file + "', line " + std::to_string(number) + ": " + what);
      };
      if (in_list) {
        in_list = line.empty() || line.back() != ']';
        continue;
      }
      if (line.empty() || line.front() == '#' || line.front() == ';') continue;
      if (line.front() == '[') {
        if (line.back() != ']') fail("'" + line + "' is a broken section header (no closing ']')");
        std::string name = line.substr(1, line.size() - 2);
        if (name.size() > 1 && name.front() == '[' && name.back() == ']') name = name.substr(1, name.size() - 2);
        std::string lower;
        for (char c : name) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        if (lower != "default") {
          fail("section [" + name + "] is not known: " + app_.get_name() +
               " has no sections, so write every key at the top of the file");
        }
        continue;
      }
      const auto eq = line.find('=');
      if (eq == std::string::npos) {
        fail("'" + line + "' is not 'key = value' (a flag is written 'quiet = true')");
      }
      std::string key = trim(line.substr(0, eq));
      if (key.size() >= 2 && (key.front() == '"' || key.front() == '\'') && key.back() == key.front()) {
        key = key.substr(1, key.size() - 2);
      }
      if (key.empty()) fail("a value without a key");
      if (std::find(known.begin(), known.end(), key) == known.end()) {
        const std::string near = nearest(key);
        fail("unknown key '" + key + "'" + (near.empty() ? "" : " (did you mean '" + near + "'?)") +
             "; the keys are the long option names of --help");
      }
      if (const auto seen = lines_.find(key); seen != lines_.end()) {
        fail("'" + key + "' is set twice (here and on line " + std::to_string(seen->second) + "); keep one");
      }
      lines_[key] = number;
      const std::string value = trim(line.substr(eq + 1));
      in_list = !value.empty() && value.front() == '[' && value.back() != ']';
    }
  }

  const CLI::App& app_;
  mutable std::string file_;
  mutable std::map<std::string, int> lines_;  // key -> the line that set it
};

// An option that antdt no longer has: hidden from --help, and any command line, config key or
// environment variable that still sets it fails with one line that says it is gone and why.
inline void gone_option(CLI::App& app, const std::string& key, const std::string& why) {
  app.add_option_function<std::string>(
         "--" + key,
         [key, why](const std::string&) {
           throw CLI::ValidationError("--" + key + " is gone: " + why + "; leave it out");
         },
         "Gone: " + why)
      ->group("");
}

// Installs StrictConfig as the --config reader, and returns it. Call after every option is added.
inline std::shared_ptr<StrictConfig> strict_config(CLI::App& app) {
  auto reader = std::make_shared<StrictConfig>(app);
  app.config_formatter(reader);
  return reader;
}

// A bad value that came from the config file: where it was set, to add to CLI11's message
// (which names the option only). "" when no key the file set is named in `message`.
inline std::string config_place(const StrictConfig& reader, const std::string& message) {
  for (const auto& key : reader.keys_set()) {
    if (message.find("--" + key + ":") != std::string::npos || message.find("--" + key + " ") != std::string::npos ||
        message.find(" " + key + ":") != std::string::npos) {
      return reader.where(key);
    }
  }
  return {};
}

// Gives every long option without an environment variable one: --global-batch ->
// ANTDT_GLOBAL_BATCH. Call after all options are added.
inline void add_env_names(CLI::App& app) {
  for (CLI::Option* opt : app.get_options()) {
    const auto& names = opt->get_lnames();
    if (names.empty() || !opt->get_envname().empty()) continue;
    const std::string& name = names.front();
    if (name == "help" || name == "help-all" || name == "config" || name == "version") continue;
    std::string env = "ANTDT_";
    for (char c : name) env += c == '-' ? '_' : static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    opt->envname(env);
  }
}

// This process's rank in MPI_COMM_WORLD (0 before MPI_Init), for printing once.
inline int world_rank() {
  int initialized = 0, finalized = 0, rank = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized != 0 && finalized == 0) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

}  // namespace cli

// Registers every option of a Job on `app`, each writing into `o` (defaults: o's values), in
// groups Schedule, Policy, Straggler emulation, Checkpoints, Outputs, Failures and Testing, with
// --config and the ANTDT_* environment variables. Messages from antdt then name options by
// these flags (set_option_names(OptionNames::flags)). Call it once, before parse().
inline void add_job_options(CLI::App& app, JobOptions& o) {
  using cli::at_least;
  using cli::in_range;
  using cli::positive;
  set_option_names(OptionNames::flags);
  if (app.get_config_ptr() == nullptr) {
    app.set_config("--config", "", "Read options from a TOML/INI file (keys are the long option names)");
  }
  SessionOptions& s = o.session;
  // A later --x wins; every option is also ANTDT_<NAME> in the environment.
  const auto last = [](CLI::Option* opt) {
    std::string env = "ANTDT_";
    for (char c : opt->get_lnames().front())
      env += c == '-' ? '_' : static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    return opt->multi_option_policy(CLI::MultiOptionPolicy::TakeLast)->envname(env);
  };

  const char* sched = "Schedule";
  last(app.add_option("--global-batch", s.global_batch, "Samples per step across all ranks (B)"))
      ->group(sched)
      ->check(positive<std::int64_t>())
      ->capture_default_str();
  last(app.add_option("--steps", s.max_steps, "Stop after this many steps (0: no step limit)"))
      ->group(sched)
      ->check(at_least<std::int64_t>(0))
      ->capture_default_str();
  last(app.add_option("--epochs", s.max_epochs,
                      "Stop after this many epochs (0: no epoch limit); one of --steps/--epochs is needed"))
      ->group(sched)
      ->check(at_least<std::int64_t>(0))
      ->capture_default_str();
  last(app.add_option("--micro-batch-cap", s.micro_batch_cap,
                      "Most samples per micro-step on this rank (0: the program's own, or no cap)"))
      ->group(sched)
      ->check(at_least<std::int64_t>(0))
      ->capture_default_str();
  last(app.add_option("--shard-size", s.shard_size,
                      "DDS shard length in samples. 0: the whole data set, each epoch a full shuffle (with "
                      "--no-shuffle-within-shard: 10 global batches); N: shard-local order, reads near each other"))
      ->group(sched)
      ->check(at_least<std::int64_t>(0))
      ->capture_default_str();
  last(app.add_option("--data-seed", s.seed, "Seed of each epoch's sample order"))->group(sched)->capture_default_str();
  last(app.add_flag("--shuffle-within-shard,!--no-shuffle-within-shard", s.shuffle_within_shard,
                    "Also shuffle the order of the samples inside each shard (off: contiguous reads within a shard, "
                    "and shards of 10 global batches by default)"))
      ->group(sched)
      ->capture_default_str();
  cli::gone_option(app, "prefetch-steps", "it has had no effect since batches became positional");
  last(app.add_option("--reply-lag", s.reply_lag,
                      "Steps a rank runs ahead of rank 0's decision: 1 (rank 0 decides a step while the ranks "
                      "compute the next; plans apply a step later) or 0 (every rank waits for each decision)"))
      ->group(sched)
      ->check(in_range<int>(0, 1))
      ->capture_default_str();

  const char* pol = "Policy";
  const std::vector<std::string> policies = policy_names();
  const bool have_auto = std::find(policies.begin(), policies.end(), "auto") != policies.end();
  last(app.add_option("--policy", s.controller.policy,
                      "static (equal batches), dd (dedicated: speed-proportional batches), nd (non-dedicated: every "
                      "rank claims micro-chunks of the step until B samples are done, whoever did them; docs/nd.md)" +
                          std::string(have_auto ? ", auto (the Controller picks the mitigation from what it sees; "
                                                  "docs/controller.md)"
                                                : "")))
      ->group(pol)
      ->check(CLI::IsMember(policies))
      ->capture_default_str();
  last(app.add_option("--backup-workers", s.backup_workers,
                      "dd, nd, auto: ranks that may sit out at once. A rank the steps wait for beyond its compute "
                      "(another process holds its core), or whose samples bring less than its share of the "
                      "reduction costs, gets no samples and leaves the reduction; it rejoins for a trial after 1 s, "
                      "then 2, 4, 8 s while it still does not pay (docs/nd.md, \"Sitting out\"). 0 turns it off "
                      "(0 to ranks-1; default 1, or 0 on a single rank)"))
      ->group(pol)
      ->check(in_range<int>(-1, 1 << 20));
  last(app.add_option("--nd-chunks", s.chunks_per_share,
                      "nd: a rank's micro-chunk is about its share / this (at most --micro-batch-cap); smaller "
                      "chunks end a step closer to B samples done, each costs one claim on rank 0"))
      ->group(pol)
      ->check(in_range<int>(1, 1024))
      ->capture_default_str();
  last(app.add_option("--nd-first-chunk", s.first_chunk,
                      "nd: a step's first chunk is at least this part of a rank's share, the rest claimed in "
                      "--nd-chunks chunks as usual (0: off; 0 to 0.99)"))
      ->group(pol)
      ->check(in_range<double>(0.0, 0.99))
      ->capture_default_str();
  last(app.add_option_function<std::string>(
           "--nd-pool",
           [&s](const std::string& v) {
             s.pool_mechanism = v == "counter"    ? PoolMechanism::counter
                                : v == "deadline" ? PoolMechanism::deadline
                                                  : PoolMechanism::automatic;
           },
           "nd: how ranks learn a step's B samples are done: counter (one counter on rank 0: exactly B), "
           "deadline (a predicted compute time; each rank stops there), auto (counter on one node, deadline "
           "across nodes; docs/nd.md)"))
      ->group(pol)
      ->check(CLI::IsMember({"auto", "counter", "deadline"}))
      ->default_str("auto");
  last(app.add_option("--max-restarts", s.controller.restart.max_restarts,
                      "nd: kill-restarts the Controller may decide over the whole run (a restart ends the job with "
                      "exit code 75 and the nodes to leave out in the checkpoint directory; 0: never)"))
      ->group(pol)
      ->check(in_range<int>(0, 1000))
      ->capture_default_str();
  last(app.add_option("--restart-cooldown", s.controller.restart.cooldown_steps,
                      "nd: steps after a restart before the next one may be decided (0: the Monitor window)"))
      ->group(pol)
      ->check(at_least<std::int64_t>(0))
      ->capture_default_str();
  last(app.add_flag("--probe,!--no-probe", o.probe,
                    "Time a few micro-steps per rank at start so the planner begins from the best split"))
      ->group(pol)
      ->capture_default_str();
  last(app.add_option_function<std::string>(
           "--fixed-split",
           [&s](const std::string& text) {
             s.fixed_split.clear();
             std::stringstream in(text);
             for (std::string item; std::getline(in, item, ',');) {
               std::int64_t b = -1;
               if (!cli::detail::parse_number(item, b) || b < 0) {
                 throw UsageError("--fixed-split '" + text + "': give non-negative batches separated by commas");
               }
               s.fixed_split.push_back(b);
             }
           },
           "Policy static: these per-rank batches b_0,b_1,... (summing to --global-batch) instead of equal ones, "
           "e.g. the best fixed split found offline"))
      ->group(pol);
  last(app.add_option("--min-gain", s.controller.min_gain,
                      "Re-plan only when the predicted step time improves by this fraction"))
      ->group(pol)
      ->check(in_range<double>(0.0, 1.0))
      ->capture_default_str();
  if (have_auto) {
    last(app.add_option("--min-pool-gain", s.controller.min_pool_gain,
                        "auto: switch between pooled and plain steps only when the predicted mean step improves by "
                        "more than this fraction (besides the model's measured error)"))
        ->group(pol)
        ->check(in_range<double>(0.0, 0.99))
        ->capture_default_str();
  }
  last(app.add_option("--min-interval", s.controller.min_interval, "Steps between plan changes, at least"))
      ->group(pol)
      ->check(at_least<std::int64_t>(0))
      ->capture_default_str();
  last(app.add_option("--window", s.controller.window, "Monitor window in steps"))
      ->group(pol)
      ->check(in_range<int>(2, 10000))
      ->capture_default_str();
  last(app.add_option("--persistence", s.controller.persistence,
                      "Steps a rank must stay slow before it counts as a persistent straggler"))
      ->group(pol)
      ->check(in_range<int>(1, 10000))
      ->capture_default_str();
  last(app.add_option("--rejoin-after", s.controller.rejoin_after,
                      "Backup workers: seconds of steps before a rank that sits out rejoins for a trial; each "
                      "failed trial doubles it, up to 8x"))
      ->group(pol)
      ->check(in_range<double>(0.001, 1e6))
      ->capture_default_str();

  const char* emu = "Straggler emulation (reports say EMULATED)";
  auto& e = s.emulation;
  last(app.add_option_function<std::string>(
           "--emulate-speed", [&e](const std::string& v) { e.speeds = parse_speeds(v); },
           "Per-rank relative speeds, e.g. 1,1,1,0.33: compute is stretched to compute/speed"))
      ->group(emu);
  last(app.add_option_function<std::string>(
           "--emulate-transient", [&e](const std::string& v) { parse_transient(v, e); },
           "P,FACTOR,STEPS[,FROM[,UNTIL]]: each step (from step FROM, until step UNTIL) a rank starts a FACTORx "
           "slowdown for STEPS steps with probability P"))
      ->group(emu);
  last(app.add_option_function<std::string>(
           "--emulate-schedule", [&e](const std::string& v) { e.schedule = parse_schedule(v); },
           "RANK:STEP:SPEED or @NODE:STEP:SPEED, ...: from STEP on, that rank (or every rank on that node, by "
           "Slurm node name or host name) runs at SPEED; replays the same after a resume"))
      ->group(emu);
  last(app.add_option("--virtual-device", e.virtual_seconds_per_sample,
                      "Seconds per sample at speed 1: compute of b samples takes b*c/speed (virtual-device "
                      "benchmark mode)"))
      ->group(emu)
      ->check(at_least<double>(0.0))
      ->capture_default_str();
  last(app.add_option("--emulate-seed", e.seed, "Seed of the transient slowdowns"))->group(emu)->capture_default_str();

  const char* ck = "Checkpoints";
  auto& c = o.checkpoint;
  last(app.add_option("--checkpoint-dir", c.dir, "Directory for HDF5 checkpoints (%j = Slurm job id)"))->group(ck);
  last(
      app.add_option("--checkpoint-every", c.every_steps, "Checkpoint every K steps (0: by --checkpoint-minutes only)"))
      ->group(ck)
      ->check(at_least<std::int64_t>(0))
      ->capture_default_str();
  last(app.add_option("--checkpoint-minutes", c.every_minutes,
                      "Also checkpoint when this many minutes have passed since the last checkpoint (rank 0's clock; "
                      "0: off). The run always checkpoints at its end and when it stops on a signal"))
      ->group(ck)
      ->check(in_range<double>(0.0, 1e6))
      ->capture_default_str();
  last(app.add_option("--checkpoint-keep", c.keep, "Keep the newest K checkpoints"))
      ->group(ck)
      ->check(in_range<int>(1, 1000))
      ->capture_default_str();
  last(app.add_flag("--resume", c.resume,
                    "Resume from the newest complete checkpoint in --checkpoint-dir (any world size; none: start "
                    "fresh); refused when the directory belongs to another run"))
      ->group(ck);
  last(app.add_flag("--checkpoint-overwrite", c.overwrite,
                    "Start a fresh run in a --checkpoint-dir that holds another run's checkpoints, deleting them; "
                    "without it that is refused"))
      ->group(ck);

  const char* out = "Outputs";
  auto& w = o.output;
  last(app.add_option("--summary-json", w.summary_json, "Write the end-of-run summary as JSON here (%j = job id)"))
      ->group(out);
  last(app.add_option("--timeline", w.timeline, "Write a Chrome-trace timeline (Perfetto) here"))->group(out);
  last(app.add_option("--metrics", w.metrics, "Write per-step, per-rank metrics here (.csv, otherwise JSONL)"))
      ->group(out);
  last(app.add_option("--progress", w.progress, "Progress line on rank 0: auto (only on a terminal), always, never"))
      ->group(out)
      ->check(CLI::IsMember({"auto", "always", "never"}))
      ->capture_default_str();
  last(app.add_option("--progress-every", w.progress_every, "Steps between progress lines"))
      ->group(out)
      ->check(positive<std::int64_t>())
      ->capture_default_str();
  last(app.add_option("--log-level", w.log_level,
                      "error, warn, info, debug or trace (default: ANTDT_LOG_LEVEL or info)"))
      ->group(out);
  last(app.add_flag("--quiet", w.quiet, "Do not print the end-of-run report"))->group(out);

  const char* fail = "Failures";
  last(app.add_option("--step-timeout", s.step_timeout_seconds,
                      "Seconds rank 0 waits at a step's reduction for the other ranks; then it names the ones that "
                      "did not arrive and every rank exits with code 5 (0: wait forever). Waiting ranks poll for "
                      "--wait-spin seconds, then sleep between polls"))
      ->group(fail)
      ->check(in_range<double>(0.0, 1e9))
      ->capture_default_str();
  last(app.add_option("--wait-spin", s.wait_spin_seconds,
                      "Seconds a waiting rank polls before it sleeps between polls (0 to 1). Polling answers "
                      "fastest; a rank under a CPU quota (a cgroup's, a container's CPU limit) does not poll, "
                      "whatever this says: it would spend the quota (docs/controller.md)"))
      ->group(fail)
      ->check(in_range<double>(0.0, 1.0))
      ->capture_default_str();
  last(app.add_option("--stop-signals", o.stop_signals,
                      "Signals that stop the run after the step under way, with a checkpoint and exit code 76 (a "
                      "second one ends it at once): a list of TERM, INT, USR1, USR2, HUP, QUIT, XCPU, ALRM, URG, or "
                      "none"))
      ->group(fail)
      ->capture_default_str();

  const char* test = "Testing";
  last(app.add_option("--sample-log", w.sample_log,
                      "Each rank writes the sample indices it trains on, one line 'STEP i i ...' per step, to "
                      "PATH.RANK (an audit of every sample once per epoch, independent of antdt's own counters)"))
      ->group(test);
  last(app.add_option("--fail-in-checkpoint", o.faults.fail_in_checkpoint,
                      "Kill rank 0 with SIGKILL half-way through writing the checkpoint of this step (failure tests)"))
      ->group(test)
      ->capture_default_str();
  last(
      app.add_option("--fail-at-step", o.faults.fail_at_step,
                     "Kill --fail-rank with SIGKILL when it begins this step (failure tests); that rank never sits out "
                     "(--backup-workers), so that it reaches the step"))
      ->group(test)
      ->capture_default_str();
  last(app.add_option("--fail-rank", o.faults.fail_rank, "Rank killed by --fail-at-step"))
      ->group(test)
      ->check(at_least<int>(0))
      ->capture_default_str();
}

// Parses `app` (its --config, if it has one, is read strictly: cli::strict_config). --help, --help-all and --version
// print on rank 0 and return 0; a bad option or value prints one line on rank 0 ("<app>: error: ...") and returns
// kExitUsage; otherwise returns -1: go on.
inline int parse(CLI::App& app, int argc, char** argv) {
  const int rank = cli::world_rank();
  set_option_names(OptionNames::flags);  // messages name options by the flags the user typed
  std::shared_ptr<cli::StrictConfig> reader;
  if (app.get_config_ptr() != nullptr) reader = cli::strict_config(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    if (rank == 0) std::fputs(app.help().c_str(), stdout);
    return 0;
  } catch (const CLI::CallForAllHelp&) {
    if (rank == 0) std::fputs(app.help("", CLI::AppFormatMode::All).c_str(), stdout);
    return 0;
  } catch (const CLI::CallForVersion& e) {
    if (rank == 0) std::puts(e.what());
    return 0;
  } catch (const CLI::ParseError& e) {
    const std::string place = reader ? cli::config_place(*reader, e.what()) : std::string();
    if (rank == 0) {
      std::fprintf(stderr, "%s: error: %s%s (see --help)\n", app.get_name().c_str(),
                   place.empty() ? "" : (place + ": ").c_str(), e.what());
    }
    return kExitUsage;
  } catch (const Error& e) {
    if (rank == 0) std::fprintf(stderr, "%s: error: %s\n", app.get_name().c_str(), e.what());
    return kExitUsage;
  }
  return -1;
}

// The same for a program on a Job, with its options from add_job_options. --help, --help-all and --version print on
// rank 0 and return 0; a bad option or value prints one line on rank 0 ("<app>: error: ...") and returns kExitUsage;
// otherwise returns -1: go on. The --config file, if any, is recorded in `o` (an input no output may be).
inline int parse(CLI::App& app, int argc, char** argv, JobOptions& o) {
  if (const int code = parse(app, argc, argv); code >= 0) return code;
  const CLI::Option* config = app.get_config_ptr();
  if (config != nullptr && config->count() > 0) o.config_file = config->as<std::string>();
  o.program = app.get_name().empty() ? o.program : app.get_name();
  return -1;
}

// The Job's options from the ANTDT_* environment variables alone (ANTDT_GLOBAL_BATCH=512,
// ANTDT_POLICY=dd, ANTDT_CHECKPOINT_DIR=..., ANTDT_RESUME=1), over the defaults in `o`; for a
// program that parses its own command line some other way. UsageError, one line, on a bad value.
inline JobOptions job_options_from_env(JobOptions o = {}) {
  CLI::App app{"antdt"};
  add_job_options(app, o);
  try {
    app.parse(std::vector<std::string>{});
  } catch (const CLI::ParseError& e) {
    throw UsageError(std::string("environment: ") + e.what());
  }
  return o;
}

}  // namespace antdt
