# perf/cpu-quota.sh, sourced by perf/torch/torch-bench.sh and perf/python/ddp-vs-antdt.sh: real
# slowness without emulation. Rank 1 of a 2-rank mpirun runs in a cgroup v1 CPU quota (root, the
# cpu controller at /sys/fs/cgroup/cpu), so the kernel slows it in everything it does (compute,
# communication, reads), as on a node shared with other jobs.
#   cpu_quota_make NAME SHARE   makes /sys/fs/cgroup/cpu/NAME-<pid> holding SHARE of one core
#                               (period 2 ms, so that a step of a few ms sees a steady share;
#                               longer where the quota would fall under the kernel's least, 1 ms),
#                               removed when the script exits; sets CPU_QUOTA_CG and
#                               CPU_QUOTA_PERIOD (us). Returns 1 where it cannot, with the reason
#                               in CPU_QUOTA_WHY.
#   cpu_quota_mpirun CG [mpirun options...] -- command [args...]
#                               one mpirun: rank 0 free, rank 1 in the cgroup CG, the same command.
# The numbers are written with echo: Python's buffered write to a cgroup file fails (EINVAL).

cpu_quota_make() {
  local name=$1 share=$2
  CPU_QUOTA_PERIOD=$(awk -v s="$share" 'BEGIN { p = int(1000 / s + 0.999); print (p > 2000 ? p : 2000) }')
  CPU_QUOTA_CG=/sys/fs/cgroup/cpu/$name-$$
  if ! mkdir -p "$CPU_QUOTA_CG" 2>/dev/null || ! echo "$CPU_QUOTA_PERIOD" >"$CPU_QUOTA_CG/cpu.cfs_period_us" 2>/dev/null; then
    CPU_QUOTA_WHY="no cgroup v1 cpu controller to write at /sys/fs/cgroup/cpu (root needed)"
    return 1
  fi
  trap 'rmdir "$CPU_QUOTA_CG" 2>/dev/null || true' EXIT
  if ! echo "$(awk -v s="$share" -v p="$CPU_QUOTA_PERIOD" 'BEGIN { print int(s * p) }')" \
      >"$CPU_QUOTA_CG/cpu.cfs_quota_us" 2>/dev/null; then
    CPU_QUOTA_WHY="cannot set a CPU quota of $share of a core (period $CPU_QUOTA_PERIOD us)"
    return 1
  fi
}

cpu_quota_mpirun() {
  local cg=$1 opts=()
  shift
  while [ $# -gt 0 ] && [ "$1" != -- ]; do opts+=("$1"); shift; done
  shift
  mpirun "${opts[@]}" -np 1 "$@" : -np 1 bash -c "echo \$\$ > $cg/cgroup.procs; exec \"\$@\"" rank1 "$@"
}
