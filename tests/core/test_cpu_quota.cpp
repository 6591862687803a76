// The cgroup CPU quota reader (runtime/cpu_quota.hpp): on made-up trees of cgroup files, v1 and
// v2, and, where this process may make cgroups (root, cgroup v1), on the live kernel.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include "runtime/cpu_quota.hpp"

using antdt::detail::cpu_quota_binds;
using antdt::detail::cpu_quota_cores;

namespace {

using Files = std::map<std::string, std::string>;

std::optional<double> quota(const std::string& cgroup, const std::string& mounts, const Files& files) {
  return cpu_quota_cores(cgroup, mounts, [&](const std::string& path) -> std::optional<std::string> {
    const auto it = files.find(path);
    if (it == files.end()) return std::nullopt;
    return it->second;
  });
}

const std::string kV1Mounts =
    "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
    "32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime shared:9 - cgroup cgroup rw,cpu,cpuacct\n"
    "33 31 0:30 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n";
const std::string kV2Mounts = "30 23 0:27 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n";

}  // namespace

TEST(CpuQuota, V1TheSmallestQuotaAlongThePathBinds) {
  const std::string cgroup = "4:memory:/job\n3:cpu,cpuacct:/job/rank1\n0::/\n";
  const std::string d = "/sys/fs/cgroup/cpu,cpuacct";
  Files f{{d + "/cpu.cfs_quota_us", "-1\n"},           {d + "/cpu.cfs_period_us", "100000\n"},
          {d + "/job/cpu.cfs_quota_us", "150000\n"},   {d + "/job/cpu.cfs_period_us", "100000\n"},
          {d + "/job/rank1/cpu.cfs_quota_us", "-1\n"}, {d + "/job/rank1/cpu.cfs_period_us", "100000\n"}};
  EXPECT_DOUBLE_EQ(*quota(cgroup, kV1Mounts, f), 1.5);  // the parent's
  f[d + "/job/rank1/cpu.cfs_quota_us"] = "1000\n";
  f[d + "/job/rank1/cpu.cfs_period_us"] = "4000\n";
  EXPECT_DOUBLE_EQ(*quota(cgroup, kV1Mounts, f), 0.25);  // its own, smaller
  f[d + "/job/rank1/cpu.cfs_quota_us"] = "-1\n";
  f[d + "/job/cpu.cfs_quota_us"] = "-1\n";
  EXPECT_FALSE(quota(cgroup, kV1Mounts, f).has_value());  // no quota anywhere
}

TEST(CpuQuota, V1InAContainerThePathIsBelowTheMountsRoot) {
  // The container's cgroup is the mount's root: its files are at the mount point itself.
  const std::string mounts = "40 30 0:29 /kubepods/pod7 /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n";
  const Files f{{"/sys/fs/cgroup/cpu/cpu.cfs_quota_us", "50000"}, {"/sys/fs/cgroup/cpu/cpu.cfs_period_us", "100000"}};
  EXPECT_DOUBLE_EQ(*quota("2:cpu:/kubepods/pod7\n", mounts, f), 0.5);
}

TEST(CpuQuota, V2ReadsCpuMax) {
  const std::string cgroup = "0::/user.slice/job.scope\n";
  Files f{{"/sys/fs/cgroup/cpu.max", "max 100000\n"},
          {"/sys/fs/cgroup/user.slice/cpu.max", "max 100000\n"},
          {"/sys/fs/cgroup/user.slice/job.scope/cpu.max", "50000 100000\n"}};
  EXPECT_DOUBLE_EQ(*quota(cgroup, kV2Mounts, f), 0.5);
  f["/sys/fs/cgroup/user.slice/job.scope/cpu.max"] = "max 100000\n";
  EXPECT_FALSE(quota(cgroup, kV2Mounts, f).has_value());
  EXPECT_FALSE(quota("", kV2Mounts, f).has_value());       // no cgroup line
  EXPECT_FALSE(quota(cgroup, "", f).has_value());          // nothing mounted
  EXPECT_FALSE(quota(cgroup, kV2Mounts, {}).has_value());  // files unreadable
}

// This process in a cgroup of its own with a quota of a quarter of a core, then back.
TEST(CpuQuota, TheLiveKernelsQuotaIsRead) {
  const std::filesystem::path base = "/sys/fs/cgroup/cpu";
  if (geteuid() != 0 || !std::filesystem::exists(base / "cgroup.procs"))
    GTEST_SKIP() << "needs root and the cgroup v1 cpu controller at " << base;
  const std::filesystem::path mine = base / ("antdt-test-cpu-quota-" + std::to_string(getpid()));
  std::filesystem::create_directory(mine);
  const auto write = [](const std::filesystem::path& p, const std::string& v) {
    std::ofstream out(p);
    out << v << '\n';
    return static_cast<bool>(out.flush());
  };
  ASSERT_TRUE(write(mine / "cpu.cfs_period_us", "4000"));
  ASSERT_TRUE(write(mine / "cpu.cfs_quota_us", "1000"));
  ASSERT_TRUE(write(mine / "cgroup.procs", std::to_string(getpid())));
  const auto cores = cpu_quota_cores();
  const bool binds = cpu_quota_binds();
  EXPECT_TRUE(write(base / "cgroup.procs", std::to_string(getpid())));
  std::filesystem::remove(mine);
  ASSERT_TRUE(cores.has_value());
  EXPECT_DOUBLE_EQ(*cores, 0.25);
  EXPECT_TRUE(binds);
}
