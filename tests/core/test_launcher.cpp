#include <gtest/gtest.h>
#include <mpi.h>

#include <map>
#include <string>
#include <vector>

#include "antdt/error.hpp"
#include "runtime/launcher.hpp"

using antdt::discover_launch;
using antdt::map_env;

TEST(Launcher, MpiIsAskedFirst) {
  // Fake launcher variables that disagree with MPI: MPI must win.
  auto info = discover_launch(MPI_COMM_WORLD, map_env({{"OMPI_COMM_WORLD_RANK", "7"}, {"OMPI_COMM_WORLD_SIZE", "9"}}));
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  EXPECT_EQ(info.source, "mpi");
  EXPECT_EQ(info.world_rank, rank);
  EXPECT_EQ(info.world_size, size);
  EXPECT_GE(info.local_size, 1);
  EXPECT_LT(info.local_rank, info.local_size);
}

TEST(Launcher, OpenMpiVariables) {
  auto info = discover_launch(MPI_COMM_NULL, map_env({{"OMPI_COMM_WORLD_RANK", "5"},
                                                      {"OMPI_COMM_WORLD_SIZE", "8"},
                                                      {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                                                      {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"},
                                                      {"SLURM_PROCID", "3"},
                                                      {"SLURM_NTASKS", "8"}}));
  EXPECT_EQ(info.source, "ompi");
  EXPECT_EQ(info.world_rank, 5);
  EXPECT_EQ(info.world_size, 8);
  EXPECT_EQ(info.local_rank, 1);
  EXPECT_EQ(info.local_size, 4);
  EXPECT_EQ(info.job_id, "");
}

TEST(Launcher, PmiBeforeSlurm) {
  auto info = discover_launch(MPI_COMM_NULL, map_env({{"PMI_RANK", "2"},
                                                      {"PMI_SIZE", "3"},
                                                      {"SLURM_PROCID", "0"},
                                                      {"SLURM_NTASKS", "3"},
                                                      {"SLURM_JOB_ID", "4242"}}));
  EXPECT_EQ(info.source, "pmi");
  EXPECT_EQ(info.world_rank, 2);
  EXPECT_EQ(info.world_size, 3);
  EXPECT_EQ(info.job_id, "4242");
}

TEST(Launcher, SlurmVariablesAndArrayJob) {
  auto info = discover_launch(MPI_COMM_NULL, map_env({{"SLURM_PROCID", "6"},
                                                      {"SLURM_NTASKS", "8"},
                                                      {"SLURM_LOCALID", "2"},
                                                      {"SLURM_NTASKS_PER_NODE", "4(x2)"},
                                                      {"SLURM_JOB_ID", "1234"},
                                                      {"SLURM_ARRAY_TASK_ID", "7"}}));
  EXPECT_EQ(info.source, "slurm");
  EXPECT_EQ(info.world_rank, 6);
  EXPECT_EQ(info.world_size, 8);
  EXPECT_EQ(info.local_rank, 2);
  EXPECT_EQ(info.local_size, 3) << "an unparsable per-node count falls back to what local rank implies";
  EXPECT_EQ(info.job_id, "1234_7");
}

TEST(Launcher, NothingSetMeansSingleProcess) {
  auto info = discover_launch(MPI_COMM_NULL, map_env({}));
  EXPECT_EQ(info.source, "none");
  EXPECT_EQ(info.world_rank, 0);
  EXPECT_EQ(info.world_size, 1);
  EXPECT_EQ(info.local_rank, 0);
}

TEST(Launcher, MalformedValuesAreUsageErrors) {
  EXPECT_THROW((void)discover_launch(MPI_COMM_NULL, map_env({{"SLURM_PROCID", "x1"}, {"SLURM_NTASKS", "2"}})),
               antdt::UsageError);
  EXPECT_THROW((void)discover_launch(MPI_COMM_NULL, map_env({{"PMI_RANK", "4"}, {"PMI_SIZE", "4"}})),
               antdt::UsageError);
}

TEST(Launcher, SlurmHostListsExpandInOrder) {
  using V = std::vector<std::string>;
  EXPECT_EQ(antdt::expand_hostlist("n1"), V({"n1"}));
  EXPECT_EQ(antdt::expand_hostlist("n[1-3,5],login"), V({"n1", "n2", "n3", "n5", "login"}));
  EXPECT_EQ(antdt::expand_hostlist("gpu[08-10]"), V({"gpu08", "gpu09", "gpu10"}));
  EXPECT_EQ(antdt::expand_hostlist("r[1-2]-n[1-2]"), V({"r1-n1", "r1-n2", "r2-n1", "r2-n2"}));
  for (const char* bad : {"n[1-", "n[3-1]", "n[a]", "n]1[", "n[[1]]", "a,,b", ""})
    EXPECT_THROW((void)antdt::expand_hostlist(bad), antdt::UsageError) << bad;
}

TEST(Launcher, SlurmTaskLayoutNamesEachRanksNodeOnlyWhenSure) {
  using V = std::vector<std::string>;
  std::map<std::string, std::string> step{{"SLURM_STEP_NODELIST", "n[1-3]"},
                                          {"SLURM_STEP_TASKS_PER_NODE", "2(x2),1"},
                                          {"SLURM_STEP_NUM_TASKS", "5"},
                                          {"SLURM_PROCID", "0"},
                                          {"SLURMD_NODENAME", "n1"}};
  EXPECT_EQ(antdt::launch_task_nodes(0, 5, map_env(step)), V({"n1", "n1", "n2", "n2", "n3"}));  // block: the default
  step["SLURM_DISTRIBUTION"] = "cyclic:block";
  EXPECT_EQ(antdt::launch_task_nodes(0, 5, map_env(step)), V({"n1", "n2", "n3", "n1", "n2"}));
  step["SLURM_PROCID"] = "1";
  step["SLURMD_NODENAME"] = "n2";
  EXPECT_EQ(antdt::launch_task_nodes(1, 5, map_env(step)), V({"n1", "n2", "n3", "n1", "n2"}));
  // Not sure, so no layout: another distribution, another world, this rank elsewhere than the
  // layout says, another rank's SLURM_PROCID, counts that do not match the nodes, no srun step.
  auto unsure = [&](const std::string& key, const std::string& value, int rank = 1, int world = 5) {
    auto env = step;
    if (value.empty())
      env.erase(key);
    else
      env[key] = value;
    return antdt::launch_task_nodes(rank, world, map_env(env));
  };
  EXPECT_TRUE(unsure("SLURM_DISTRIBUTION", "plane=2").empty());
  EXPECT_TRUE(unsure("SLURM_DISTRIBUTION", "arbitrary").empty());
  EXPECT_TRUE(unsure("SLURM_STEP_NUM_TASKS", "5", 1, 4).empty());
  EXPECT_TRUE(unsure("SLURMD_NODENAME", "n3").empty());
  EXPECT_TRUE(unsure("SLURM_PROCID", "3").empty());
  EXPECT_TRUE(unsure("SLURM_STEP_TASKS_PER_NODE", "2,3").empty());
  EXPECT_TRUE(unsure("SLURM_STEP_NODELIST", "n[1-").empty());
  EXPECT_TRUE(unsure("SLURM_STEP_NODELIST", "").empty());
}

TEST(Launcher, MpirunOnOneNodeNamesThisNodeForEveryRank) {
  using V = std::vector<std::string>;
  std::map<std::string, std::string> env{{"OMPI_COMM_WORLD_RANK", "0"},
                                         {"OMPI_COMM_WORLD_SIZE", "3"},
                                         {"OMPI_COMM_WORLD_LOCAL_SIZE", "3"},
                                         {"SLURMD_NODENAME", "n7"}};
  EXPECT_EQ(antdt::launch_task_nodes(0, 3, map_env(env)), V({"n7", "n7", "n7"}));
  EXPECT_TRUE(antdt::launch_task_nodes(0, 2, map_env(env)).empty()) << "a communicator other than the world";
  env["OMPI_COMM_WORLD_LOCAL_SIZE"] = "2";  // one rank runs on another node: which, mpirun does not say
  EXPECT_TRUE(antdt::launch_task_nodes(0, 3, map_env(env)).empty());
}
