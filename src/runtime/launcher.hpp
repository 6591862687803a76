// Where this process sits in the job: world rank and size, rank and size on its node, and
// the batch job id. MPI is asked first (it knows best); launcher variables fill the gaps in
// this order: Open MPI (OMPI_COMM_WORLD_*), PMI (PMI_*), Slurm (SLURM_*).
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <mpi.h>

namespace antdt {

struct LaunchInfo {
  int world_rank = 0;
  int world_size = 1;
  int local_rank = 0;  // rank among the processes on this node
  int local_size = 1;
  std::string job_id;  // Slurm job id (with array/step suffix where present), or ""
  std::string source;  // what the ranks came from: "mpi", "ompi", "pmi", "slurm", "none"
  std::string hostname;
  // The node this process runs on as the batch system names it: Slurm's SLURMD_NODENAME inside
  // a job step (several "nodes" may share one host in a test cluster), else the host name.
  std::string node_name;
};

// Looks up an environment variable; std::nullopt when unset. Tests pass a fake.
using EnvLookup = std::function<std::optional<std::string>(const std::string&)>;

// The process environment.
[[nodiscard]] EnvLookup process_env();
// A fixed map, for tests and for tools that replay a job's environment.
[[nodiscard]] EnvLookup map_env(std::map<std::string, std::string> vars);

// If `comm` is not MPI_COMM_NULL, world rank/size come from it and the node-local rank/size
// from MPI_Comm_split_type(MPI_COMM_TYPE_SHARED) (collective over comm). Otherwise they come
// from the launcher variables. The job id always comes from SLURM_JOB_ID (plus
// SLURM_ARRAY_TASK_ID as "_N" when set). Throws UsageError on malformed numbers.
[[nodiscard]] LaunchInfo discover_launch(MPI_Comm comm, const EnvLookup& env = process_env());

// LaunchInfo::node_name of this process, without asking MPI.
[[nodiscard]] std::string discover_node_name(const EnvLookup& env = process_env());

// Slurm's hostlist syntax, expanded in order: "n[1-3,07-08],login" is n1 n2 n3 n07 n08 login.
// UsageError on a malformed list.
[[nodiscard]] std::vector<std::string> expand_hostlist(const std::string& list);

// Each rank's node as the launcher laid out the tasks: what names a rank before the ranks have
// told each other their nodes. From Slurm's layout of an srun step (SLURM_STEP_NODELIST,
// SLURM_STEP_TASKS_PER_NODE, SLURM_DISTRIBUTION block or cyclic), or, under Open MPI's mpirun,
// this rank's node for every rank when all of them run here (OMPI_COMM_WORLD_LOCAL_SIZE equal to
// the world). Empty wherever the layout is not known for sure: not an srun step of world_size
// tasks with this rank's SLURM_PROCID, another distribution, this rank's own node
// (discover_node_name) not where the layout puts it, or ranks on other nodes under mpirun.
[[nodiscard]] std::vector<std::string> launch_task_nodes(int world_rank, int world_size,
                                                         const EnvLookup& env = process_env());

// Replaces "%j" in an output path with the job id (LaunchInfo::job_id), or "local" when there
// is none, as Slurm's own file patterns do.
[[nodiscard]] std::string expand_job_id(const std::string& path, const std::string& job_id);

}  // namespace antdt
