#!/usr/bin/env bash
# A private Slurm cluster on this one machine whose nodes have network stacks of their own: each
# node is a network namespace with its own address on a private bridge, so that its ranks talk
# to the other nodes' over TCP (as on a real cluster), never through shared memory or loopback,
# and a node's link can be rate-limited. Needs root (network namespaces, a bridge, veth pairs).
#   netns-slurm.sh start DIR [NODES]   NODES (default 3) nodes n1..nN; prints the exports to eval
#   netns-slurm.sh stop DIR            stops the daemons, deletes the namespaces and the bridge
#   netns-slurm.sh exec DIR NODE CMD...   runs CMD in NODE's network namespace
#   netns-slurm.sh pids DIR NODE       the processes in NODE's namespace (slurmd and its jobs)
#   netns-slurm.sh limit DIR NODE RATE    limits NODE's link to RATE (tc tbf, e.g. 200mbit), both
#                                      ways; RATE "off" lifts it. Its bucket holds 64 kB: tbf drops
#                                      a packet larger than that, and a veth's segmentation offload
#                                      makes packets of up to 64 kB (with 16 kB, connections hung).
#                                      After an idle spell the first 64 kB go at full speed.
# The bridge (adt<id>b) has 10.231.K.254/24 in this namespace, so sbatch, squeue and scontrol
# work from here with the printed SLURM_CONF; slurmctld and munged run in a namespace of their
# own (.250), node nI's slurmd in namespace antdt-<id>-nI (.I), its interface named eth0 (for
# Open MPI: --mca btl_tcp_if_include eth0). <id> is the caller's process id (ANTDT_NETNS_OWNER to
# choose another), K the first free /24 of 10.231.0.0/16. A start first deletes what runs whose
# owner has died left behind. Exit code 77 (with the reason) where namespaces cannot be made.
set -euo pipefail
cmd=${1:?start|stop|exec|pids|limit}
D=$(mkdir -p "${2:?directory}" && cd "$2" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
state=$D/netns.env

skip() { echo "netns-slurm: SKIP: $*" >&2; exit 77; }

# Everything a run made, by its owner's id: processes in its namespaces, the namespaces, the bridge.
remove_run() {
  local id=$1 ns pid
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^antdt-$id-" || true); do
    for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$pid" 2>/dev/null || true; done
  done
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^antdt-$id-" || true); do
    for _ in $(seq 50); do [ -z "$(ip netns pids "$ns" 2>/dev/null)" ] && break; sleep 0.1; done
    ip netns del "$ns" 2>/dev/null || true
  done
  ip link del "adt${id}b" 2>/dev/null || true
}

load() {
  [ -f "$state" ] || { echo "netns-slurm: no cluster in $D (start one first)" >&2; exit 2; }
  # shellcheck source=/dev/null
  . "$state"
}

node_ns() {  # NODE -> its namespace
  [[ ${1:-} =~ ^n[0-9]+$ ]] || { echo "netns-slurm: '${1:-}' is not a node name (n1, n2, ...)" >&2; exit 2; }
  local ns="$CLUSTER_PREFIX-$1"
  ip netns list | awk '{print $1}' | grep -qx "$ns" || { echo "netns-slurm: no node $1 in this cluster" >&2; exit 2; }
  echo "$ns"
}

case $cmd in
start)
  nodes=${3:-3}
  [[ $nodes =~ ^[1-9][0-9]?$ ]] || { echo "netns-slurm: NODES must be 1 to 99, not '$nodes'" >&2; exit 2; }
  for tool in ip tc slurmctld slurmd munged; do command -v $tool >/dev/null || skip "$tool is not installed"; done
  [ "$(id -u)" = 0 ] || skip "network namespaces need root"
  id=${ANTDT_NETNS_OWNER:-$PPID}
  [[ $id =~ ^[0-9]{1,7}$ ]] || { echo "netns-slurm: ANTDT_NETNS_OWNER must be a process id" >&2; exit 2; }
  # Leftovers of runs whose owner is gone (a test killed before its clean-up).
  for old in $(ip netns list 2>/dev/null | sed -n 's/^antdt-\([0-9]*\)-.*/\1/p' | sort -u); do
    kill -0 "$old" 2>/dev/null || remove_run "$old"
  done
  for l in $(ip -o link show type bridge 2>/dev/null | sed -n 's/^[0-9]*: adt\([0-9]*\)b[:@].*/\1/p'); do
    kill -0 "$l" 2>/dev/null || ip link del "adt${l}b" 2>/dev/null || true
  done
  remove_run "$id"  # a second start by the same owner replaces the first
  probe="antdt-$id-probe"
  out=$(ip netns add "$probe" 2>&1) || skip "cannot make a network namespace: $out"
  ip netns del "$probe"
  k=''
  used=$(ip -o -4 addr show 2>/dev/null | awk '{print $4}')
  for c in $(seq 10 250); do grep -q "^10\.231\.$c\." <<<"$used" || { k=$c; break; }; done
  [ -n "$k" ] || skip "no free /24 in 10.231.0.0/16"
  net=10.231.$k prefix=antdt-$id br=adt${id}b
  cat > "$state" <<ENV
CLUSTER_ID=$id
CLUSTER_PREFIX=$prefix
CLUSTER_NET=$net
CLUSTER_NODES=$nodes
ENV
  trap 'remove_run "$id"' ERR
  out=$(ip link add "$br" type bridge 2>&1) || { remove_run "$id"; skip "cannot make a bridge: $out"; }
  ip addr add "$net.254/24" dev "$br"
  ip link set "$br" up
  join() {  # NAME HOST: namespace $prefix-NAME with address $net.HOST on the bridge
    local ns=$prefix-$1 veth=adt${id}${1}
    ip netns add "$ns"
    ip link add "$veth" type veth peer name eth0 netns "$ns"
    ip link set "$veth" master "$br" up
    ip -n "$ns" addr add "$net.$2/24" dev eth0
    ip -n "$ns" link set eth0 up
    ip -n "$ns" link set lo up
  }
  join ctl 250
  addrs='' spaces=''
  for i in $(seq "$nodes"); do
    join "n$i" "$i"
    addrs+="${addrs:+ }$net.$i"
    spaces+="${spaces:+ }$prefix-n$i"
  done
  trap - ERR
  if ! conf=$(ANTDT_SLURM_NODE_ADDRS=$addrs ANTDT_SLURM_NODE_NETNS=$spaces ANTDT_SLURM_CTLD_ADDR=$net.250 \
              ANTDT_SLURM_CTLD_NETNS=$prefix-ctl "$here/local-slurm.sh" start "$D"); then
    "$here/local-slurm.sh" stop "$D" || true
    remove_run "$id"
    exit 1
  fi
  echo "$conf"
  # Open MPI between the nodes: TCP on eth0 (the same name in every node's namespace).
  echo "export OMPI_MCA_btl_tcp_if_include=eth0"
  ;;
stop)
  "$here/local-slurm.sh" stop "$D" || true
  if [ -f "$state" ]; then
    load
    remove_run "$CLUSTER_ID"
    rm -f "$state"
  fi
  ;;
exec)
  load
  ns=$(node_ns "${3:-}")
  shift 3
  exec nsenter --net="/run/netns/$ns" "$@"  # /sys and its cgroups stay as they are
  ;;
pids)
  load
  ip netns pids "$(node_ns "${3:-}")"
  ;;
limit)
  load
  node=${3:-} rate=${4:?RATE, e.g. 200mbit, or off}
  ns=$(node_ns "$node")
  veth=adt${CLUSTER_ID}${node}
  if [ "$rate" = off ]; then
    ip netns exec "$ns" tc qdisc del dev eth0 root 2>/dev/null || true
    tc qdisc del dev "$veth" root 2>/dev/null || true
  else
    [[ $rate =~ ^[0-9]+(\.[0-9]+)?[kmg]?bit$ ]] || { echo "netns-slurm: RATE must be like 200mbit, not '$rate'" >&2; exit 2; }
    # Out of the node (its eth0) and into it (the bridge's end of its pair).
    ip netns exec "$ns" tc qdisc replace dev eth0 root tbf rate "$rate" burst 64kb latency 100ms
    tc qdisc replace dev "$veth" root tbf rate "$rate" burst 64kb latency 100ms
  fi
  ;;
*) echo "usage: $0 start DIR [NODES] | stop DIR | exec DIR NODE CMD... | pids DIR NODE | limit DIR NODE RATE" >&2; exit 2 ;;
esac
