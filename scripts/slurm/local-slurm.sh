#!/usr/bin/env bash
# A private Slurm on localhost (slurmctld + slurmd + munge) for tests and demos.
#   local-slurm.sh start DIR    -> prints "export SLURM_CONF=DIR/slurm.conf"
#   local-slurm.sh stop DIR
# Everything (config, state, logs, munge key and socket) lives under DIR.
#   ANTDT_SLURM_NODES=N (default 1): N > 1 starts N slurmd, nodes n1..nN, all on 127.0.0.1 (a job
#     can span them, or --exclude one); ANTDT_SLURM_CPUS: CPUs per node (8 alone, 2 per node).
# Nodes with network stacks of their own (netns-slurm.sh sets these up):
#   ANTDT_SLURM_NODE_ADDRS="A1 A2 ..."  node nI's address (one node per address)
#   ANTDT_SLURM_NODE_NETNS="NS1 NS2 ..." node nI's slurmd runs in network namespace NSI
#   ANTDT_SLURM_CTLD_ADDR, ANTDT_SLURM_CTLD_NETNS: slurmctld's (and munged's) address and namespace
set -euo pipefail
cmd=${1:?start|stop}
D=$(mkdir -p "${2:?directory}" && cd "$2" && pwd)
export SLURM_CONF=$D/slurm.conf
# Ends the daemons of these pid files together (each takes over a second to exit after SIGTERM:
# one after another, a 4-node cluster took 8 s to stop), SIGKILL for any still there after 5 s.
stop_pids() {
  local f pid pids=()
  for f in "$@"; do
    [ -f "$f" ] || continue
    pid=$(cat "$f" 2>/dev/null || true)
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
      kill "$pid" 2>/dev/null || true
      pids+=("$pid")
    fi
    rm -f "$f"
  done
  for _ in $(seq 50); do
    [ ${#pids[@]} -eq 0 ] && return 0
    local left=()
    for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && left+=("$pid"); done
    pids=(${left[@]+"${left[@]}"})
    [ ${#pids[@]} -eq 0 ] && return 0
    sleep 0.1
  done
  kill -9 "${pids[@]}" 2>/dev/null || true
}
case $cmd in
start)
  mkdir -p "$D"/{state,spool,log,run,munge,tmp}
  chmod 755 "$D"  # munged requires world-execute on the directories above its socket
  read -ra node_addrs <<<"${ANTDT_SLURM_NODE_ADDRS:-}"
  read -ra node_netns <<<"${ANTDT_SLURM_NODE_NETNS:-}"
  ctld_addr=${ANTDT_SLURM_CTLD_ADDR:-} ctld_netns=${ANTDT_SLURM_CTLD_NETNS:-}
  # They too go into slurm.conf or a root command line: addresses and plain names only.
  for a in "${node_addrs[@]}" $ctld_addr; do
    if ! [[ $a =~ ^[0-9]{1,3}(\.[0-9]{1,3}){3}$ ]]; then echo "local-slurm: '$a' is not an IPv4 address" >&2; exit 2; fi
  done
  for n in "${node_netns[@]}" $ctld_netns; do
    if ! [[ $n =~ ^[A-Za-z0-9][A-Za-z0-9._-]*$ ]]; then echo "local-slurm: '$n' is not a namespace name" >&2; exit 2; fi
  done
  if [ ${#node_netns[@]} -gt 0 ] && [ ${#node_netns[@]} -ne ${#node_addrs[@]} ]; then
    echo "local-slurm: ANTDT_SLURM_NODE_NETNS needs one namespace per address of ANTDT_SLURM_NODE_ADDRS" >&2; exit 2
  fi
  nodes=${ANTDT_SLURM_NODES:-1}
  [ ${#node_addrs[@]} -gt 0 ] && nodes=${#node_addrs[@]}
  # nsenter --net, not ip netns exec: that one also mounts a sysfs of its own over /sys, which
  # hides the cgroup file systems slurmd needs ("No filesystem mounted on /sys/fs/cgroup").
  ctld_exec=()
  [ -n "$ctld_netns" ] && ctld_exec=(nsenter --net="/run/netns/$ctld_netns")
  if ! [[ $nodes =~ ^[1-9][0-9]{0,2}$ ]]; then echo "local-slurm: ANTDT_SLURM_NODES must be a number, not '$nodes'" >&2; exit 2; fi
  if [ "$nodes" -gt 1 ]; then cpus=${ANTDT_SLURM_CPUS:-2}; else cpus=${ANTDT_SLURM_CPUS:-8}; fi
  ctld_port=${ANTDT_SLURMCTLD_PORT:-6817}
  slurmd_port=${ANTDT_SLURMD_PORT:-6818}
  # They are pasted into slurm.conf, which slurmctld runs as root: numbers only (a newline in one
  # would add a configuration line, a prologue command say).
  for v in "ANTDT_SLURM_CPUS=$cpus" "ANTDT_SLURMCTLD_PORT=$ctld_port" "ANTDT_SLURMD_PORT=$slurmd_port"; do
    if ! [[ ${v#*=} =~ ^[1-9][0-9]{0,4}$ ]]; then echo "local-slurm: ${v%%=*} must be a number, not '${v#*=}'" >&2; exit 2; fi
  done
  cat > "$D/slurm.conf" <<CONF
ClusterName=antdt-test
SlurmctldHost=localhost${ctld_addr:+($ctld_addr)}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
# cred_expire: how long a requeued job waits before it may start again (120 s by default; 5 is
# the least Slurm takes).
AuthInfo=socket=$D/munge/munge.socket,cred_expire=5
SlurmctldPort=$ctld_port
StateSaveLocation=$D/state
SlurmdSpoolDir=$D/spool/%n
TmpFS=$D/tmp/%n
SlurmctldPidFile=$D/run/slurmctld.pid
SlurmdPidFile=$D/run/slurmd-%n.pid
SlurmctldLogFile=$D/log/slurmctld.log
SlurmdLogFile=$D/log/slurmd-%n.log
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/backfill
# Scheduling passes every 2 s (main) and 1 s (backfill), not 60 and 30: a requeued job starts
# about 6 s after its requeue instead of at the next pass, up to 30 s later (a time-limit test
# spent half its minute there).
SchedulerParameters=sched_interval=2,bf_interval=1
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=pmix
ReturnToService=2
EnforcePartLimits=ALL
SlurmdParameters=config_overrides
InactiveLimit=0
KillWait=5
MinJobAge=60
Waittime=0
CONF
  port=$slurmd_port
  if [ "$nodes" -eq 1 ] && [ ${#node_addrs[@]} -eq 0 ]; then
    names=(localhost)
    echo "NodeName=localhost NodeAddr=127.0.0.1 Port=$port CPUs=$cpus Boards=1 SocketsPerBoard=1 CoresPerSocket=$cpus ThreadsPerCore=1 RealMemory=16000 State=UNKNOWN" >> "$D/slurm.conf"
  else
    names=()
    for i in $(seq "$nodes"); do
      names+=("n$i")
      echo "NodeName=n$i NodeHostname=localhost NodeAddr=${node_addrs[$((i - 1))]:-127.0.0.1} Port=$((port + i)) CPUs=$cpus RealMemory=4000 State=UNKNOWN" >> "$D/slurm.conf"
    done
  fi
  echo "PartitionName=debug Nodes=$(IFS=,; echo "${names[*]}") Default=YES MaxTime=INFINITE State=UP" >> "$D/slurm.conf"
  for n in "${names[@]}"; do mkdir -p "$D/tmp/$n"; done
  mungekey --create --keyfile="$D/munge/munge.key" --force >/dev/null 2>&1
  chmod 600 "$D/munge/munge.key"
  "${ctld_exec[@]}" munged --socket="$D/munge/munge.socket" --key-file="$D/munge/munge.key" \
    --log-file="$D/log/munged.log" --pid-file="$D/run/munged.pid" --seed-file="$D/munge/munged.seed"
  "${ctld_exec[@]}" slurmctld -f "$SLURM_CONF"
  i=0
  for n in "${names[@]}"; do
    if [ ${#node_netns[@]} -gt 0 ]; then
      nsenter --net="/run/netns/${node_netns[$i]}" slurmd -f "$SLURM_CONF" -N "$n"
    else
      slurmd -f "$SLURM_CONF" -N "$n"
    fi
    i=$((i + 1))
  done
  for _ in $(seq 300); do
    if scontrol ping 2>/dev/null | grep -q UP && [ "$(sinfo -h -o %T 2>/dev/null | sort -u)" = idle ]; then
      echo "export SLURM_CONF=$SLURM_CONF"
      exit 0
    fi
    sleep 0.1
  done
  echo "local-slurm: Slurm did not come up; logs in $D/log" >&2
  exit 1
  ;;
stop)
  # Jobs still running (a test that failed half-way) would outlive the daemons, their programs
  # spinning: cancel them first, and give them KillWait to end.
  if [ -f "$D/run/slurmctld.pid" ] && jobs=$(timeout 10 squeue -h -o %i 2>/dev/null) && [ -n "$jobs" ]; then
    # shellcheck disable=SC2086
    timeout 10 scancel $jobs 2>/dev/null || true
    for _ in $(seq 60); do [ -z "$(timeout 5 squeue -h -o %i 2>/dev/null)" ] && break; sleep 0.2; done
  fi
  stop_pids "$D"/run/slurmd-*.pid "$D/run/slurmctld.pid"
  stop_pids "$D/run/munged.pid"  # the last: slurmd and slurmctld may still use it as they end
  ;;
*) echo "usage: $0 start|stop DIR" >&2; exit 2 ;;
esac
