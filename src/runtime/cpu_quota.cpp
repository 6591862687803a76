#include "runtime/cpu_quota.hpp"

#include <algorithm>
#include <fstream>
#include <sstream>
#include <vector>

#ifdef __linux__
#include <sched.h>
#endif

namespace antdt::detail {

namespace {

std::vector<std::string> split(const std::string& text, char by) {
  std::vector<std::string> parts;
  std::string part;
  std::istringstream in(text);
  while (std::getline(in, part, by)) parts.push_back(part);
  return parts;
}

// /proc/self/cgroup: "ID:CONTROLLERS:PATH" per hierarchy; v2's is "0::PATH".
std::optional<std::string> cgroup_path(const std::string& proc_cgroup, bool v2) {
  std::istringstream in(proc_cgroup);
  for (std::string line; std::getline(in, line);) {
    const auto a = line.find(':');
    const auto b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1);
    const auto names = split(controllers, ',');
    if (v2 ? controllers.empty() : std::find(names.begin(), names.end(), "cpu") != names.end())
      return line.substr(b + 1);
  }
  return std::nullopt;
}

struct Mount {
  std::string root, point;
};

// /proc/self/mountinfo: "ID PARENT MAJ:MIN ROOT POINT OPTIONS [TAGS] - FSTYPE SOURCE SUPER".
std::optional<Mount> cgroup_mount(const std::string& mountinfo, bool v2) {
  std::istringstream in(mountinfo);
  for (std::string line; std::getline(in, line);) {
    const auto dash = line.find(" - ");
    if (dash == std::string::npos) continue;
    const auto head = split(line.substr(0, dash), ' ');
    const auto tail = split(line.substr(dash + 3), ' ');
    if (head.size() < 5 || tail.size() < 3) continue;
    if (v2 ? tail[0] != "cgroup2" : tail[0] != "cgroup") continue;
    if (!v2) {
      const auto options = split(tail[2], ',');
      if (std::find(options.begin(), options.end(), "cpu") == options.end()) continue;
    }
    return Mount{head[3], head[4]};
  }
  return std::nullopt;
}

std::optional<double> number(const std::optional<std::string>& text) {
  if (!text) return std::nullopt;
  std::istringstream in(*text);
  double v = 0.0;
  if (!(in >> v)) return std::nullopt;
  return v;
}

}  // namespace

std::optional<double> cpu_quota_cores(
    const std::string& proc_cgroup, const std::string& mountinfo,
    const std::function<std::optional<std::string>(const std::string& path)>& read_file) {
  for (const bool v2 : {false, true}) {
    const auto path = cgroup_path(proc_cgroup, v2);
    const auto mount = cgroup_mount(mountinfo, v2);
    if (!path || !mount) continue;
    // The cgroup's path below the mount: a container sees its own cgroup as the mount's root.
    std::string below = *path;
    if (mount->root != "/" && below.rfind(mount->root, 0) == 0) below = below.substr(mount->root.size());
    std::optional<double> cores;
    // Every cgroup from this one up to the mount's root caps it: the smallest quota binds.
    for (std::string dir = below;;) {
      const std::string at = mount->point + (dir == "/" ? "" : dir);
      std::optional<double> here;
      if (v2) {
        if (const auto max = read_file(at + "/cpu.max"); max && max->rfind("max", 0) != 0) {
          std::istringstream in(*max);
          double quota = 0.0, period = 0.0;
          if (in >> quota >> period && quota > 0.0 && period > 0.0) here = quota / period;
        }
      } else {
        const auto quota = number(read_file(at + "/cpu.cfs_quota_us"));
        const auto period = number(read_file(at + "/cpu.cfs_period_us"));
        if (quota && period && *quota > 0.0 && *period > 0.0) here = *quota / *period;
      }
      if (here) cores = cores ? std::min(*cores, *here) : *here;
      if (dir.empty() || dir == "/") break;
      const auto slash = dir.find_last_of('/');
      dir = slash == 0 || slash == std::string::npos ? "/" : dir.substr(0, slash);
    }
    if (cores) return cores;
  }
  return std::nullopt;
}

namespace {

std::optional<std::string> read_text(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

std::optional<double> cpu_quota_cores() {
  const auto cgroup = read_text("/proc/self/cgroup");
  const auto mounts = read_text("/proc/self/mountinfo");
  if (!cgroup || !mounts) return std::nullopt;
  return cpu_quota_cores(*cgroup, *mounts, read_text);
}

bool cpu_quota_binds() { return cpu_quota_binds(cpu_quota_cores()); }

bool cpu_quota_binds(std::optional<double> cores) {
  if (!cores) return false;
  int cpus = 1;
#ifdef __linux__
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) cpus = std::max(1, CPU_COUNT(&set));
#endif
  return *cores < static_cast<double>(cpus);
}

}  // namespace antdt::detail
