#include "runtime/launcher.hpp"

#include <unistd.h>

#include <charconv>
#include <cstdlib>
#include <exception>
#include <string>
#include <utility>
#include <vector>

#include "antdt/error.hpp"
#include "core/text.hpp"
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

namespace {

// "1-3,07" within brackets: each number with the low bound's width (zero-padded).
std::vector<std::string> expand_ranges(const std::string& ranges, const std::string& list) {
  std::vector<std::string> out;
  for (const auto part_view : detail::split_commas(ranges)) {
    const std::string part(part_view);
    const std::size_t dash = part.find('-');
    const std::string lo = part.substr(0, dash), hi = dash == std::string::npos ? lo : part.substr(dash + 1);
    const auto digits = [](const std::string& t) {
      return !t.empty() && t.size() <= 9 && t.find_first_not_of("0123456789") == std::string::npos;
    };
    if (!digits(lo) || !digits(hi) || std::stol(hi) < std::stol(lo) || std::stol(hi) - std::stol(lo) > 100000)
      throw UsageError("malformed Slurm host list '" + list + "'");
    for (long v = std::stol(lo); v <= std::stol(hi); ++v) {
      std::string n = std::to_string(v);
      if (n.size() < lo.size()) n.insert(0, lo.size() - n.size(), '0');
      out.push_back(std::move(n));
    }
  }
  return out;
}

// One item of a host list ("rack[1-2]-n[1-3]"), its first bracket expanded, then the rest.
void expand_item(const std::string& item, const std::string& list, std::vector<std::string>& out) {
  const std::size_t open = item.find('[');
  if (open == std::string::npos) {
    if (item.find(']') != std::string::npos) throw UsageError("malformed Slurm host list '" + list + "'");
    out.push_back(item);
    return;
  }
  const std::size_t close = item.find(']', open);
  if (close == std::string::npos) throw UsageError("malformed Slurm host list '" + list + "'");
  for (const auto& n : expand_ranges(item.substr(open + 1, close - open - 1), list))
    expand_item(item.substr(0, open) + n + item.substr(close + 1), list, out);
}

}  // namespace

std::vector<std::string> expand_hostlist(const std::string& list) {
  std::vector<std::string> out;
  std::string item;
  int depth = 0;
  for (const char c : list + ",") {
    if (c == '[') ++depth;
    if (c == ']') --depth;
    if (depth < 0 || depth > 1) throw UsageError("malformed Slurm host list '" + list + "'");
    if (c == ',' && depth == 0) {
      if (item.empty()) throw UsageError("malformed Slurm host list '" + list + "'");
      expand_item(item, list, out);
      item.clear();
    } else {
      item += c;
    }
  }
  if (depth != 0) throw UsageError("malformed Slurm host list '" + list + "'");
  return out;
}

std::vector<std::string> launch_task_nodes(int world_rank, int world_size, const EnvLookup& env) {
  try {
    const auto ompi_rank = env_int(env, "OMPI_COMM_WORLD_RANK"), ompi_size = env_int(env, "OMPI_COMM_WORLD_SIZE"),
               ompi_local = env_int(env, "OMPI_COMM_WORLD_LOCAL_SIZE");
    if (ompi_rank && ompi_size && ompi_local && *ompi_rank == world_rank && *ompi_size == world_size &&
        *ompi_local == world_size) {
      return std::vector<std::string>(static_cast<std::size_t>(world_size), discover_node_name(env));
    }
    const auto nodelist = env("SLURM_STEP_NODELIST"), per_node = env("SLURM_STEP_TASKS_PER_NODE");
    const auto tasks = env_int(env, "SLURM_STEP_NUM_TASKS"), procid = env_int(env, "SLURM_PROCID");
    if (!nodelist || !per_node || !tasks || !procid || *tasks != world_size || *procid != world_rank) return {};
    std::string distribution = env("SLURM_DISTRIBUTION").value_or("block");
    distribution = distribution.substr(0, distribution.find_first_of(":,"));
    if (distribution != "block" && distribution != "cyclic") return {};
    const std::vector<std::string> nodes = expand_hostlist(*nodelist);
    std::vector<int> counts;  // "2(x3),1": 2 2 2 1
    for (const auto part_view : detail::split_commas(*per_node)) {
      const std::string part(part_view);
      const std::size_t x = part.find("(x");
      const int count = std::stoi(part.substr(0, x));
      const int times = x == std::string::npos ? 1 : std::stoi(part.substr(x + 2));
      if (count < 1 || times < 1 || times > 1000000) return {};
      counts.insert(counts.end(), static_cast<std::size_t>(times), count);
    }
    if (counts.size() != nodes.size()) return {};
    std::vector<std::string> out;
    out.reserve(static_cast<std::size_t>(world_size));
    if (distribution == "block") {
      for (std::size_t n = 0; n < nodes.size(); ++n)
        out.insert(out.end(), static_cast<std::size_t>(counts[n]), nodes[n]);
    } else {
      for (bool any = true; any;) {  // one task on each node that has tasks left, in node order
        any = false;
        for (std::size_t n = 0; n < nodes.size(); ++n) {
          if (counts[n] == 0) continue;
          --counts[n];
          out.push_back(nodes[n]);
          any = true;
        }
      }
    }
    if (static_cast<int>(out.size()) != world_size) return {};
    if (out[static_cast<std::size_t>(world_rank)] != discover_node_name(env)) return {};
    return out;
  } catch (const std::exception&) {  // a malformed variable: no layout, rather than a failed start
    return {};
  }
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
