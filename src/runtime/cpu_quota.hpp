// Whether the kernel caps this process's CPU time with a cgroup quota (not installed). A rank
// under such a quota is stopped wherever its quota runs out; polling while it waits spends the
// quota, and the time it is held back may land outside its compute (docs/controller.md, "A rank
// the kernel holds back").
#pragma once

#include <functional>
#include <optional>
#include <string>

namespace antdt::detail {

// The cores a cgroup CPU quota allows the process whose /proc/self/cgroup and
// /proc/self/mountinfo read as given: the smallest quota / period along its cgroup's path (v1:
// cpu.cfs_quota_us over cpu.cfs_period_us under the cpu controller's mount; v2: cpu.max).
// nullopt when there is none (or the files cannot be read). `read_file` returns a file's text,
// or nullopt when it cannot be read. Pure: the unit tests give it a made-up tree.
[[nodiscard]] std::optional<double> cpu_quota_cores(
    const std::string& proc_cgroup, const std::string& mountinfo,
    const std::function<std::optional<std::string>(const std::string& path)>& read_file);

// This process's quota as above, read from /proc and /sys now (tens of microseconds).
[[nodiscard]] std::optional<double> cpu_quota_cores();

// Whether a quota of `cores` (nullopt: none) binds this process: fewer cores than the CPUs it may
// run on.
[[nodiscard]] bool cpu_quota_binds(std::optional<double> cores);

// Whether this process's quota binds (the two above).
[[nodiscard]] bool cpu_quota_binds();

}  // namespace antdt::detail
