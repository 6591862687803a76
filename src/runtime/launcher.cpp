#include "runtime/launcher.hpp"

#include <unistd.h>

#include <charconv>
#include <cstdlib>
#include <utility>

#include "antdt/error.hpp"
#include "transport/comm.hpp"

namespace antdt {

EnvLookup process_env() {
  return [](const std::string& name) -> std::optional<std::string> {
    const char* v = std::getenv(name.c_str());
    if (!v) return std::nullopt;
    return std::string(v);
  };
}

EnvLookup map_env(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](const std::string& name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

namespace {

std::optional<int> env_int(const EnvLookup& env, const std::string& name) {
  auto text = env(name);
  if (!text || text->empty()) return std::nullopt;
  int value = 0;
  const char* first = text->data();
  const char* last = first + text->size();
  auto [ptr, ec] = std::from_chars(first, last, value);
  if (ec != std::errc{} || ptr != last || value < 0) {
    throw UsageError("launcher variable " + name + "='" + *text + "' is not a non-negative integer");
  }
  return value;
}

// One launcher's view: (rank, size, local rank, local size) variable names.
struct LauncherVars {
  const char* source;
  const char* rank;
  const char* size;
  const char* local_rank;
  const char* local_size;
};

constexpr LauncherVars kLaunchers[] = {
    {"ompi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
     "OMPI_COMM_WORLD_LOCAL_SIZE"},
    {"pmi", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"},
    {"slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE"},
};

}  // namespace

LaunchInfo discover_launch(MPI_Comm comm, const EnvLookup& env) {
  LaunchInfo info;
  info.source = "none";
  if (comm != MPI_COMM_NULL && mpi_is_active()) {
    ANTDT_CHECK_MPI(MPI_Comm_rank(comm, &info.world_rank));
    ANTDT_CHECK_MPI(MPI_Comm_size(comm, &info.world_size));
    MPI_Comm node = MPI_COMM_NULL;
    ANTDT_CHECK_MPI(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, info.world_rank, MPI_INFO_NULL, &node));
    MPI_Comm_rank(node, &info.local_rank);
    MPI_Comm_size(node, &info.local_size);
    MPI_Comm_free(&node);
    info.source = "mpi";
  } else {
    for (const auto& l : kLaunchers) {
      auto rank = env_int(env, l.rank);
      auto size = env_int(env, l.size);
      if (!rank || !size) continue;
      if (*rank >= *size) {
        throw UsageError(std::string("launcher variables disagree: ") + l.rank + "=" + std::to_string(*rank) +
                         " >= " + l.size + "=" + std::to_string(*size));
      }
      info.world_rank = *rank;
      info.world_size = *size;
      info.local_rank = env_int(env, l.local_rank).value_or(0);
      // SLURM_NTASKS_PER_NODE may read "4(x2)"; only trust a plain number.
      try {
        info.local_size = env_int(env, l.local_size).value_or(1);
      } catch (const UsageError&) {
        info.local_size = 1;
      }
      if (info.local_size <= info.local_rank) info.local_size = info.local_rank + 1;
      info.source = l.source;
      break;
    }
  }
  if (auto job = env("SLURM_JOB_ID"); job && !job->empty()) {
    info.job_id = *job;
    if (auto task = env("SLURM_ARRAY_TASK_ID"); task && !task->empty()) info.job_id += "_" + *task;
  }
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) == 0) info.hostname = host;
  info.node_name = discover_node_name(env);
  return info;
}

std::string discover_node_name(const EnvLookup& env) {
  if (const auto node = env("SLURMD_NODENAME"); node && !node->empty()) return *node;
  char host[256] = {};
  return gethostname(host, sizeof host - 1) == 0 ? std::string(host) : std::string();
}

std::string expand_job_id(const std::string& path, const std::string& job_id) {
  std::string out;
  for (std::size_t i = 0; i < path.size(); ++i) {
    if (path[i] == '%' && i + 1 < path.size() && path[i + 1] == 'j') {
      out += job_id.empty() ? "local" : job_id;
      ++i;
    } else {
      out += path[i];
    }
  }
  return out;
}

}  // namespace antdt
