// Shared by the antdt apps: every option is also an ANTDT_* environment variable and a key
// in the --config file; errors are one line with exit code 2 for bad usage or input.
#pragma once

#include <mpi.h>
#include <CLI/CLI.hpp>

#include <cctype>
#include <cstdio>
#include <exception>
#include <functional>
#include <string>

#include "antdt/error.hpp"

namespace antdt::cli {

inline constexpr int kExitUsage = 2;    // bad usage or bad input (options, data, checkpoint)
inline constexpr int kExitRuntime = 1;  // anything else
// The run stopped for a kill-restart (docs/nd.md): a checkpoint is written and the checkpoint
// directory names the nodes to leave out; resubmit without them and --resume.
inline constexpr int kExitRestart = 75;

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

// All ranks learn whether any rank failed a local step (opening a file, say); the failing
// ranks print their own message. Keeps every rank out of a collective that would hang.
inline void agree(MPI_Comm comm, const std::function<void()>& local, const char* app = "antdt-train") {
  int bad = 0;
  std::string what;
  int code = 0;
  try {
    local();
  } catch (const UsageError& e) {
    bad = 1, code = kExitUsage, what = e.what();
  } catch (const FileError& e) {
    bad = 1, code = kExitUsage, what = e.what();
  } catch (const std::exception& e) {
    bad = 1, code = kExitRuntime, what = e.what();
  }
  int codes[2] = {bad, code};
  int worst[2] = {0, 0};
  MPI_Allreduce(codes, worst, 2, MPI_INT, MPI_MAX, comm);
  if (worst[0]) {
    int rank = 0;
    MPI_Comm_rank(comm, &rank);
    if (bad) std::fprintf(stderr, "%s: error (rank %d): %s\n", app, rank, what.c_str());
    throw AgreedFailure{worst[1]};
  }
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

// Runs `body`; turns antdt errors into one line and an exit code. When the failure may
// leave other ranks waiting in a collective (`collective` true), the job is aborted so it
// never hangs.
inline int guarded(const char* app_name, int rank, int world, const std::function<int()>& body) {
  int code = 0;
  std::string what;
  try {
    return body();
  } catch (const UsageError& e) {
    code = kExitUsage;
    what = e.what();
  } catch (const FileError& e) {
    code = kExitUsage;
    what = e.what();
  } catch (const std::exception& e) {
    code = kExitRuntime;
    what = e.what();
  }
  std::fprintf(stderr, "%s: error (rank %d): %s\n", app_name, rank, what.c_str());
  std::fflush(stderr);
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (world > 1 && !finalized) MPI_Abort(MPI_COMM_WORLD, code);
  return code;
}

}  // namespace antdt::cli
