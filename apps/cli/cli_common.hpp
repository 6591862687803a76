// Shared by the antdt apps: every option is also an ANTDT_* environment variable and a key
// in the --config file (checked strictly); errors are one line, printed once, with the exit
// codes of docs/errors.md.
#pragma once

#include <mpi.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <exception>
#include <functional>
#include <iterator>
#include <limits>
#include <sstream>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "antdt/error.hpp"

namespace antdt::cli {

// Exit codes (docs/errors.md has the table; codes not listed there are free for later use).
inline constexpr int kExitRuntime = 1;    // an MPI, CUDA or device failure, or a bug
inline constexpr int kExitUsage = 2;      // bad usage or bad input (options, data, checkpoint, output paths)
inline constexpr int kExitWrite = 3;      // a write under way failed (an output or a checkpoint)
inline constexpr int kExitNonFinite = 4;  // training produced a NaN or Inf (stopped before checkpointing it)
inline constexpr int kExitStalled = 5;    // a rank stalled past --step-timeout (every live rank stopped)
// The run stopped for a kill-restart (docs/nd.md): a checkpoint is written and the checkpoint
// directory names the nodes to leave out; resubmit without them and --resume.
inline constexpr int kExitRestart = 75;
// The run stopped on a signal (SIGTERM, SIGINT, SIGUSR1: a time limit, preemption, Ctrl-C)
// after a checkpoint of its last step: requeue or rerun with --resume.
inline constexpr int kExitStopped = 76;

// The exit code of an exception, by the table above.
inline int exit_code_for(const std::exception& e) {
  if (dynamic_cast<const WriteError*>(&e)) return kExitWrite;
  if (dynamic_cast<const NonFiniteError*>(&e)) return kExitNonFinite;
  if (dynamic_cast<const StallError*>(&e)) return kExitStalled;
  if (dynamic_cast<const UsageError*>(&e) || dynamic_cast<const FileError*>(&e)) return kExitUsage;
  return kExitRuntime;
}

// A message as one line: a library's multi-line text (HDF5's, MPI's) never splits it.
inline std::string one_line(std::string text) {
  std::string out;
  for (char c : text) {
    if (c == '\r') continue;
    if (c == '\n') {
      out += "; ";
    } else {
      out += c;
    }
  }
  while (!out.empty() && (out.back() == ' ' || out.back() == ';')) out.pop_back();
  return out;
}

// "antdt-train: error: ..." from rank 0, "antdt-train: error (rank 3): ..." from another.
inline void print_error(const char* app, int rank, const std::string& what) {
  if (rank == 0) {
    std::fprintf(stderr, "%s: error: %s\n", app, one_line(what).c_str());
  } else {
    std::fprintf(stderr, "%s: error (rank %d): %s\n", app, rank, one_line(what).c_str());
  }
  std::fflush(stderr);
}

// Option checks that print the real bounds. CLI11's PositiveNumber, NonNegativeNumber and
// Range print a double's whole range for an integer option ("Value 0 not in range 0.000000 to
// 1797693134862315708145...", 300 digits).
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
template <class T>
CLI::Validator bounded(T low, bool low_open, T high, std::string description) {
  return CLI::Validator(
      [=](std::string& input) -> std::string {
        T v{};
        if (!CLI::detail::lexical_cast(input, v)) return "'" + input + "' is not a number";
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

  void check(const std::string& text) const {
    const CLI::Option* config = app_.get_config_ptr();
    const std::string file = config != nullptr && config->count() > 0 ? config->as<std::string>() : "--config";
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
      const std::string value = trim(line.substr(eq + 1));
      in_list = !value.empty() && value.front() == '[' && value.back() != ']';
    }
  }

  const CLI::App& app_;
};

// Installs StrictConfig as the --config reader. Call after every option is added.
inline void strict_config(CLI::App& app) { app.config_formatter(std::make_shared<StrictConfig>(app)); }

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

// Thrown (deliberately not a std::exception) when every rank has agreed that the run must
// stop, each failing rank having printed its own message: no MPI_Abort is needed.
struct AgreedFailure {
  int code;
};

// All ranks learn whether any rank failed a local step (opening a file, say). One line is
// printed, by the lowest rank that failed (rank 0 when every rank failed alike, as on a bad
// option), and every rank throws AgreedFailure with that rank's exit code, so the job ends
// without MPI_Abort and its banner. Keeps every rank out of a collective that would hang.
inline void agree(MPI_Comm comm, const std::function<void()>& local, const char* app = "antdt-train") {
  std::string what;
  int code = 0;
  try {
    local();
  } catch (const std::exception& e) {
    code = exit_code_for(e);
    what = e.what();
  }
  int rank = 0, world = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &world);
  // Rank and code in one int whose maximum is the lowest failing rank's (codes are < 16).
  int mine = code != 0 ? (world - rank) * 16 + code : 0;
  int worst = 0;
  MPI_Allreduce(&mine, &worst, 1, MPI_INT, MPI_MAX, comm);
  if (worst != 0) {
    if (rank == world - worst / 16) print_error(app, rank, what);
    throw AgreedFailure{worst % 16};
  }
}

// For a failure every rank has found alike (from the same reduced values): rank 0 prints it
// and every rank throws AgreedFailure, with no message exchanged.
[[noreturn]] inline void fail_together(int rank, const std::exception& e, const char* app = "antdt-train") {
  if (rank == 0) print_error(app, 0, e.what());
  throw AgreedFailure{exit_code_for(e)};
}

// Parses; on --help prints it (rank 0) and returns 0; on a bad option prints one line
// (rank 0) and returns kExitUsage; otherwise returns -1 (go on).
inline int parse(CLI::App& app, int argc, char** argv, int rank) {
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
    if (rank == 0) std::fprintf(stderr, "%s: error: %s (see --help)\n", app.get_name().c_str(), e.what());
    return kExitUsage;
  }
  return -1;
}

// Runs `body`; turns antdt errors into one line and an exit code. A failure that reaches
// here was not agreed (agree() and fail_together() throw AgreedFailure, which passes through):
// other ranks may be waiting in a collective, so a job of several ranks is aborted, and
// never hangs. Open MPI then prints its MPI_ABORT banner (docs/errors.md).
inline int guarded(const char* app_name, int rank, int world, const std::function<int()>& body) {
  int code = 0;
  std::string what;
  bool say = true;
  try {
    return body();
  } catch (const StallError& e) {
    // Rank 0 names the stalled ranks; the others only heard of it and stay quiet.
    code = exit_code_for(e);
    what = e.what();
    say = e.first_hand();
  } catch (const std::exception& e) {
    code = exit_code_for(e);
    what = e.what();
  }
  if (!say) {
    // Rank 0 sent the stop word before it unwinds to its own line and MPI_Abort: aborting at
    // once here could end the job before that line is out. Rank 0's abort normally ends this
    // process during the wait.
    std::this_thread::sleep_for(std::chrono::seconds(2));
  } else if (world > 1) {
    std::fprintf(stderr, "%s: error (rank %d): %s\n", app_name, rank, one_line(what).c_str());
    std::fflush(stderr);
  } else {
    print_error(app_name, rank, what);
  }
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (world > 1 && !finalized) MPI_Abort(MPI_COMM_WORLD, code);
  return code;
}

}  // namespace antdt::cli
