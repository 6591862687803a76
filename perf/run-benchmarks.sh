#!/usr/bin/env bash
# Runs every benchmark in perf/ with the configurations quoted in docs/benchmarks.md and the
# README, and prints (and saves under OUT) the figures. Each benchmark prints its own
# configuration and ratios measured in the same run; medians are over --repeats.
#   perf/run-benchmarks.sh [build-dir]        OUT=dir to choose where the logs go
# Real-compute figures need a quiet machine: nothing else running on its cores.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-$root/build}" && pwd)
out=${OUT:-$root/out/bench-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$out"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OPENBLAS_NUM_THREADS=1 ANTDT_LOG_LEVEL=warn
cmake --build "$build" --target antdt-bench-session antdt-bench-dds antdt-bench-compute antdt-bench-reduce antdt-bench-controller >/dev/null
b=$build/perf
run() {  # name, command...
  local name=$1; shift
  echo "=== $name: $*" | tee "$out/$name.txt"
  "$@" 2>&1 | tee -a "$out/$name.txt"
}
# Virtual-device runs (ranks wait out modelled compute; sum x_i known exactly).
run eff4 mpirun -np 4 "$b/session/antdt-bench-session" --mode efficiency --speeds 1,1,1,0.33 --repeats 5 --steps 150
run eff8 mpirun -np 8 "$b/session/antdt-bench-session" --mode efficiency --speeds 1,1,1,1,0.5,0.5,0.33,0.33 --repeats 5 --steps 150
run eff8-b512 mpirun -np 8 "$b/session/antdt-bench-session" --mode efficiency --speeds 1,1,1,1,0.5,0.5,0.33,0.33 --repeats 5 --steps 150 --global-batch 512
run transient mpirun -np 4 "$b/session/antdt-bench-session" --mode transient --transient 0.1,3,1 --repeats 5 --steps 300
# Real-compute runs: one rank per core.
run overhead mpirun -np 2 "$b/session/antdt-bench-session" --mode overhead --repeats 7 --steps 200 --layers 64,256,256,10 --global-batch 512
run stretch2 mpirun -np 2 "$b/session/antdt-bench-session" --mode efficiency --speeds 1,0.5 --virtual-device 0 --repeats 5 --steps 150 --layers 64,256,256,10 --global-batch 512
run compute "$b/compute/antdt-bench-compute"
run reduce mpirun -np 2 "$b/compute/antdt-bench-reduce"
run dds mpirun -np 4 "$b/dds/antdt-bench-dds"
run controller "$b/controller/antdt-bench-controller"
echo "logs in $out"
grep -h RESULT "$out"/*.txt
