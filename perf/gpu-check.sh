#!/usr/bin/env bash
# perf/gpu-check.sh: ONE prepared check for a GPU machine (see docs/compute.md). Run from the
# repository root. It writes its log and a tarball of the other logs to ${OUT:-./gpu-check-out},
# and works in ${GPU_CHECK_WORK:-/tmp/antdt-gpu-check}. Under 5 minutes.
#
#  1. Inventory: GPU, nvcc, and which of cmake/ninja/MPI/HDF5/GoogleTest exist.
#  2. Plan A (needs only nvcc + cuBLAS): run antdt-bench-gpu: CUDA model self-checks (gradient
#     vs finite differences, SGD step vs reference, host/CUDA agreement, learning) and step
#     throughput + GEMM TFLOP/s vs bare cuBLAS. The binary carried in .gpu-bundle/ (made here
#     by perf/gpu-bundle.sh, with the host backend) when present; else built by hand with
#     nvcc for this GPU's architecture, without the host backend (agreement is then skipped).
#     Then compute-sanitizer (memcheck, racecheck, synccheck) runs its short self-checks.
#  3. Plan B: the compute tests (every CUDA test body, host/CUDA agreement, NCCL at one rank,
#     staged MPI at two ranks; Job::reduce_device the same two ways), from the carried bundle .gpu-bundle/antdt-gpu-mpi.tar.xz
#     (perf/gpu-bundle.sh: binaries plus MPI, HDF5 and BLAS, for images that lack them), else
#     built here with CMake when MPI, HDF5, GoogleTest and CLI11 are installed.
#  4. Plan C (plan B's binaries): antdt-train on the GPU, 2 ranks sharing it, one emulated at
#     half speed (one GPU cannot show mixed generations): static vs dd efficiency.
#  5. Plan D (plan B's binaries): the same 2 ranks at equal speed, the gradient reduction
#     overlapped with backward (--reduce-overlap on) against after it (off), on two models.
# Exit status: non-zero when a check that ran failed. Steps that cannot run say why.
#
# Knobs: BENCH_SECONDS (per shape, default 1); SKIP_BUNDLE; SKIP_PLAN_B; PLAN_C_LAYERS,
# PLAN_C_BATCH (global batches, space-separated), PLAN_C_STEPS, PLAN_C_REPEATS, PLAN_C_DEVICE,
# PLAN_C_ARGS (more antdt-train options), SKIP_PLAN_C; PLAN_D_LAYERS (models, space-separated; the first
# sets the data's dim and classes), PLAN_D_BATCH, PLAN_D_STEPS, PLAN_D_REPEATS, SKIP_PLAN_D; SKIP_PLAN_A (no bench, no sanitizers). GPU_CHECK_BENCH (a bench binary),
# GPU_CHECK_BENCH_MODE (its mode: smoke) and GPU_CHECK_BIN (a folder holding the plan B
# binaries under their usual names) replace what the check would carry or build: the test
# tests/compute/test_gpu_check.py runs this script on the emulated device that way.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-$ROOT/gpu-check-out}
# $OUT gets two files (the device tool returns few): this log and a tarball of the others.
WORK=${GPU_CHECK_WORK:-${TMPDIR:-/tmp}/antdt-gpu-check}
rm -rf "$WORK"
mkdir -p "$OUT" "$WORK"
LOG="$OUT/gpu-check.log"
exec > >(tee "$LOG") 2>&1
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
CUDA_HOME=${CUDA_HOME:-$(dirname "$(dirname "$NVCC")")}
status=0
t0=$SECONDS
export NCCL_DEBUG=${NCCL_DEBUG:-WARN}  # NCCL says why, should its bootstrap or init fail there

echo "== inventory"
nvidia-smi --query-gpu=name,compute_cap,memory.total,memory.used,driver_version --format=csv 2>&1 || echo "nvidia-smi unavailable"
"$NVCC" --version 2>&1 | tail -2 || { echo "no nvcc at $NVCC: nothing can be built"; exit 1; }
for tool in cmake ninja mpicxx mpirun h5pcc; do printf "  %-8s %s\n" "$tool" "$(command -v $tool || echo missing)"; done
printf "  %-8s %s\n" gtest "$( [ -e /usr/include/gtest/gtest.h ] && echo /usr/include/gtest || echo missing)"
CC=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d ' .')
ARCH=${ARCH:-${CC:-90}}
echo "  building for sm_$ARCH"

echo "== plan A: standalone CUDA self-check + benchmark (nvcc + cuBLAS only)"
export LD_LIBRARY_PATH="$CUDA_HOME/lib64:$CUDA_HOME/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
BUNDLE="$ROOT/.gpu-bundle/antdt-bench-gpu"
BENCH="$WORK/antdt-bench-gpu"
# Runs the bench; it passes only when it ran to its end and said GPU-CHECK PASS (a bench that
# finds no GPU says SKIPPED and exits 0, which on a GPU machine is a failure).
run_bench() {
  timeout 120 "$1" "${BENCH_SECONDS:-1.0}" ${GPU_CHECK_BENCH_MODE:-} 2>&1 | tee "$WORK/bench.log"
  if [ "${PIPESTATUS[0]}" -ne 0 ] || ! grep -q "^GPU-CHECK PASS" "$WORK/bench.log"; then
    echo "  plan A: FAILED: the bench did not end with GPU-CHECK PASS"
    status=1
  fi
  BENCH_BIN=$1
}
if [ -n "${SKIP_PLAN_A:-}" ]; then
  echo "  SKIPPED: SKIP_PLAN_A is set (the sanitizers, which run its bench, are skipped too)"
elif [ -n "${GPU_CHECK_BENCH:-}" ]; then
  echo "  the bench given by GPU_CHECK_BENCH: $GPU_CHECK_BENCH"
  run_bench "$GPU_CHECK_BENCH"
elif [ -x "$BUNDLE" ] && [ -z "${SKIP_BUNDLE:-}" ]; then
  # Prebuilt by perf/gpu-bundle.sh with the host backend, so host/CUDA agreement is checked too.
  # The sources' fingerprint, not git: the copy of a tree sent to a GPU machine may carry a
  # .git that lags its files.
  bundle_commit=$(cat "$ROOT/.gpu-bundle/commit" 2>/dev/null || echo unknown)
  bundle_sources=$(cat "$ROOT/.gpu-bundle/sources" 2>/dev/null || echo unknown)
  tree_sources=$("$ROOT/perf/source-fingerprint.sh" 2>/dev/null || echo unknown)
  echo "  prebuilt $BUNDLE (commit $bundle_commit, sources $bundle_sources; not built by hand)"
  if [ "$bundle_sources" != "$tree_sources" ]; then
    echo "  WARNING: the bundle was built from other sources than this tree's ($tree_sources): rerun perf/gpu-bundle.sh"
  fi
  run_bench "$BUNDLE"
elif NVCC=$NVCC timeout 180 bash "$ROOT/perf/build-bench-gpu.sh" "$BENCH" "$ARCH"; then
  echo "  built in $((SECONDS - t0)) s"
  run_bench "$BENCH"
else
  echo "  FAILED to build antdt-bench-gpu"; status=1
fi

echo "== compute-sanitizer on the short self-checks: memcheck, racecheck, synccheck"
# What the emulated device cannot check: out-of-bounds device accesses from the launch
# geometry, and hazards in the loss kernel's shared-memory block reduction.
SANITIZER=$(command -v compute-sanitizer || echo "$CUDA_HOME/bin/compute-sanitizer")
if [ -z "${BENCH_BIN:-}" ]; then
  echo "  SKIPPED: no antdt-bench-gpu binary ran"
elif [ ! -x "$SANITIZER" ]; then
  echo "  SKIPPED: compute-sanitizer not found"
elif ! nvidia-smi > /dev/null 2>&1; then
  echo "  SKIPPED: no GPU visible"
else
  # gVisor runtimes refuse the device to the sanitizer ("Device not supported", then error 999
  # at the first allocation: a limit of the container runtime); that is no finding about antdt.
  for tool in memcheck racecheck synccheck; do
    if [ $((SECONDS - t0)) -gt 150 ]; then
      echo "  $tool: SKIPPED: $((SECONDS - t0)) s gone, plans B and C come first"; continue
    fi
    slog="$WORK/sanitizer-$tool.log"
    timeout 75 "$SANITIZER" --tool "$tool" --error-exitcode 3 "$BENCH_BIN" 0 sanitize > "$slog" 2>&1
    rc=$?
    if [ $rc -eq 0 ]; then
      echo "  $tool: clean ($(grep -c PASS "$slog") checks passed under it)"
    elif grep -q -i "device not supported" "$slog"; then
      echo "  UNAVAILABLE: this runtime refuses the GPU to compute-sanitizer:"; grep -m 3 -i "not supported" "$slog"
      break
    elif [ $rc -eq 124 ]; then
      echo "  $tool: INCONCLUSIVE: timed out after 75 s (no error reported before), see $slog"
    else
      echo "  $tool: FAILED (exit $rc), see $slog:"; grep -m 20 -E "=====|FAIL" "$slog"
      status=1
    fi
  done
fi

echo "== plan B: the compute tests on the GPU (CUDA bodies, host/CUDA agreement, NCCL, staged MPI)"
# Binaries come from the carried bundle (.gpu-bundle/antdt-gpu-mpi.tar.xz, made by
# perf/gpu-bundle.sh with MPI, HDF5 and BLAS inside), else from a CMake build here when this
# machine has MPI, parallel HDF5, GoogleTest and CLI11. run_env runs a command in the
# bundle's environment (a subshell, so nothing else sees its libraries).
TARBALL="$ROOT/.gpu-bundle/antdt-gpu-mpi.tar.xz"
BIN=""
# Open MPI as root, more ranks than cores, no CMA and no binding (see perf/gpu-bundle.sh's
# env.sh, which sets the same for the carried Open MPI).
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 \
  OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_hwloc_base_binding_policy=none
run_env() { "$@"; }
if [ -n "${SKIP_PLAN_B:-}" ]; then
  echo "  SKIPPED: SKIP_PLAN_B is set"
elif [ -n "${GPU_CHECK_BIN:-}" ]; then
  BIN=$GPU_CHECK_BIN
  echo "  the binaries given by GPU_CHECK_BIN: $BIN"
elif [ -f "$TARBALL" ] && [ -z "${SKIP_BUNDLE:-}" ]; then
  UNPACK=${TMPDIR:-/tmp}/antdt-gpu-bundle
  rm -rf "$UNPACK" && mkdir -p "$UNPACK"
  # tar needs the xz program for -J, which slim images lack; Python's tarfile has lzma built in.
  tar -C "$UNPACK" -xJf "$TARBALL" 2> "$WORK/untar.log" \
    || python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$TARBALL" "$UNPACK" \
    || { echo "  FAILED to unpack $TARBALL:"; cat "$WORK/untar.log"; status=1; }
  BIN="$UNPACK/antdt-gpu/bin"
  run_env() { (source "$UNPACK/antdt-gpu/env.sh" && "$@"); }
  echo "  carried bundle unpacked to $UNPACK ($(run_env mpirun --version 2>&1 | head -1))"
elif command -v cmake >/dev/null && command -v mpicxx >/dev/null && command -v h5pcc >/dev/null \
   && [ -e /usr/include/gtest/gtest.h ] && [ -e /usr/include/CLI/CLI.hpp ]; then
  B="$WORK/build"
  left=$((280 - (SECONDS - t0)))
  if [ "$left" -lt 60 ]; then
    echo "  SKIPPED: only $left s left of the 5-minute budget"
  elif timeout $((left - 30)) bash -c "cmake -S '$ROOT' -B '$B' -G Ninja -DCMAKE_CUDA_COMPILER='$NVCC' \
        -DANTDT_CUDA_ARCHITECTURES=$ARCH -DANTDT_BUILD_PERF=OFF > '$WORK/cmake.log' 2>&1 && \
        ninja -C '$B' test_compute_model test_compute_reduce antdt-train antdt-datagen > '$WORK/ninja.log' 2>&1"; then
    mkdir -p "$WORK/bin"
    cp "$B"/tests/compute/test_compute_model "$B"/tests/compute/test_compute_reduce "$B"/apps/antdt-train \
       "$B"/apps/antdt-datagen "$WORK/bin/"
    BIN="$WORK/bin"
  else
    echo "  FAILED or timed out: see $WORK/cmake.log and $WORK/ninja.log"; tail -20 "$WORK/ninja.log" 2>/dev/null; status=1
  fi
else
  echo "  SKIPPED: no carried bundle (run perf/gpu-bundle.sh where the repository is built, and carry"
  echo "  .gpu-bundle), and no MPI, HDF5, GoogleTest and CLI11 here to build the tests"
fi
# One test run: its log under $WORK; a skipped CUDA test counts as a failure on a GPU machine.
gtest_run() {
  local name=$1
  shift
  if run_env timeout 120 "$@" > "$WORK/$name.log" 2>&1; then
    if grep -q "SKIPPED \]" "$WORK/$name.log"; then
      echo "  $name: FAILED: tests were skipped on a GPU machine:"; grep -m 5 -i "skipping\|SKIPPED" "$WORK/$name.log"
      status=1
    else
      echo "  $name: passed ($(grep -m 1 -oE '[0-9]+ tests? from [0-9]+ test suites? ran' "$WORK/$name.log"))"
    fi
  else
    echo "  $name: FAILED, see $WORK/$name.log:"; grep -m 20 -E "Failure|FAILED|rror" "$WORK/$name.log"
    status=1
  fi
}
# Launch probe: two ranks through mpirun. Where the default transports cannot start (an
# unusual container network), fall back to TCP over loopback and say so.
if [ -n "$BIN" ] && ! run_env timeout 30 mpirun -np 2 "$BIN/antdt-train" --version > "$WORK/mpi-probe.log" 2>&1; then
  echo "  mpirun -np 2 failed with the default transports:"; head -20 "$WORK/mpi-probe.log"
  export OMPI_MCA_btl=self,tcp OMPI_MCA_btl_tcp_if_include=lo OMPI_MCA_oob_tcp_if_include=lo
  if run_env timeout 30 mpirun -np 2 "$BIN/antdt-train" --version > "$WORK/mpi-probe-tcp.log" 2>&1; then
    echo "  ... it starts with TCP over loopback, which the rest of this check uses"
  else
    echo "  ... and with TCP over loopback:"; head -20 "$WORK/mpi-probe-tcp.log"; status=1
  fi
fi
if [ -n "$BIN" ]; then
  gtest_run model "$BIN/test_compute_model"
  # One rank has the GPU to itself, so NCCL is chosen; two ranks share it, so NCCL refuses
  # ("duplicate GPU") and the device buffers are staged through MPI.
  ANTDT_TEST_EXPECT_CUDA_REDUCER=nccl OMPI_MCA_ess_singleton_isolated=1 gtest_run reduce-nccl-np1 "$BIN/test_compute_reduce"
  ANTDT_TEST_EXPECT_CUDA_REDUCER=mpi gtest_run reduce-staged-np2 mpirun -np 2 "$BIN/test_compute_reduce"
  # Job::reduce_device (the libtorch bridge's path for CUDA tensors), the same two ways.
  if [ -x "$BIN/test_job_device_reduce" ]; then
    ANTDT_TEST_EXPECT_CUDA_REDUCER=nccl OMPI_MCA_ess_singleton_isolated=1 gtest_run job-reduce-nccl-np1 "$BIN/test_job_device_reduce"
    ANTDT_TEST_EXPECT_CUDA_REDUCER=mpi gtest_run job-reduce-staged-np2 mpirun -np 2 "$BIN/test_job_device_reduce"
  else
    echo "  job-reduce: SKIPPED: no test_job_device_reduce among plan B's binaries (an older bundle)"
  fi
fi

# Plans C and D run antdt-train: each says why it is skipped (SKIP_PLAN_<X>, no plan B
# binaries, or less than $2 s left of the 5-minute budget) and returns 0 then.
plan_skipped() {
  local knob="SKIP_PLAN_$1" left=$((290 - (SECONDS - t0)))
  if [ -n "${!knob:-}" ]; then echo "  SKIPPED: $knob is set"
  elif [ -z "$BIN" ]; then echo "  SKIPPED: needs plan B's binaries"
  elif [ "$left" -lt "$2" ]; then echo "  SKIPPED: only $left s left of the 5-minute budget"
  else return 1; fi
}

# One antdt-train run on 2 ranks for plans C and D: its summary goes to $WORK/NAME.json and its
# stderr to $WORK/NAME.err; a failure prints that stderr's tail under DESC and fails the check.
train_run() {
  local name=$1 desc=$2
  shift 2
  ANTDT_LOG_LEVEL=warn run_env timeout 60 mpirun -np 2 "$BIN/antdt-train" --device "${PLAN_C_DEVICE:-cuda}" \
    --quiet "$@" --summary-json "$WORK/$name.json" 2> "$WORK/$name.err" \
    || { echo "  $desc: FAILED:"; tail -5 "$WORK/$name.err"; status=1; }
}

echo "== plan C: antdt-train on the GPU, 2 ranks, rank 1 EMULATED at half speed, static vs dd"
if ! plan_skipped C 60; then
  # GEMM work per step (6 x batch x parameters) against the staged reduction of the gradients
  # (both ranks share the GPU, so NCCL is refused) and the HDF5 reads. Each batch size runs
  # static and dd in turn, PLAN_C_REPEATS times, so drift on the machine hits both alike.
  layers=${PLAN_C_LAYERS:-256,2048,2048,10}
  batches=${PLAN_C_BATCH:-16384 65536}
  largest=$(printf '%s\n' $batches | sort -n | tail -1)
  run_env "$BIN/antdt-datagen" -o "$WORK/train.h5" --samples $((largest * 2)) --dim "${layers%%,*}" \
    --classes "${layers##*,}" > /dev/null || status=1
  for batch in $batches; do
    for rep in $(seq 1 "${PLAN_C_REPEATS:-3}"); do
      for policy in static dd; do
        train_run "plan-c-$batch-$policy-$rep" "$policy, batch $batch, run $rep" --data "$WORK/train.h5" \
          --layers "$layers" --global-batch "$batch" --steps "${PLAN_C_STEPS:-60}" --emulate-speed 1,0.5 \
          --policy "$policy" ${PLAN_C_ARGS:-}
      done
    done
  done
  rm -f "$WORK/train.h5"
  python3 - "$WORK" <<'PY' || status=1
import glob, json, os, statistics, sys
runs = {}
for path in sorted(glob.glob(os.path.join(sys.argv[1], "plan-c-*.json"))):
    _, _, batch, policy, _ = os.path.basename(path)[:-5].split("-")
    runs.setdefault((int(batch), policy), []).append(json.load(open(path)))
if not runs:
    sys.exit("  no plan C run wrote its summary")
med = lambda rs, key: statistics.median(r[key] for r in rs)
for batch in sorted({b for b, _ in runs}):
    for policy in ("static", "dd"):
        rs = runs.get((batch, policy), [])
        if not rs:
            print(f"  {policy:>6}: batch {batch}: no run finished"); continue
        r = rs[0]
        print(f"  {policy:>6}: batch {batch:6d}, {r['device']}, reducer {r['reducer']}, pinned batches "
              f"{r['pinned_batches']}, median of {len(rs)}: {med(rs, 'throughput'):9.0f} samples/s, efficiency "
              f"{med(rs, 'efficiency'):.3f}, idle {med(rs, 'idle_fraction'):.3f}, data wait "
              f"{med(rs, 'data_wait_fraction'):.3f}, read ahead {med(rs, 'read_ahead_fraction'):.2f}, "
              f"split {r['final_split']}, duplicated "
              f"{max(x['duplicated_samples'] for x in rs)}, missing {max(x['missing_samples'] for x in rs)}")
    s, d = runs.get((batch, "static"), []), runs.get((batch, "dd"), [])
    if s and d:
        print(f"  batch {batch}: dd / static throughput {med(d, 'throughput') / med(s, 'throughput'):.2f}x, "
              f"efficiency {med(s, 'efficiency'):.3f} -> {med(d, 'efficiency'):.3f}")
print("  efficiency = throughput / sum of the ranks' measured compute speeds in that run (1 = no idle,\n"
      "  no reduction or data cost). The ranks share ONE GPU: a rank computes slower while the other\n"
      "  computes too, so its speed depends on the split, and dd / static may exceed the 1.5x that\n"
      "  separate devices of speeds 1 and 0.5 would allow. Compare efficiencies, not that ratio.")
PY
fi
echo "== plan D: reduction overlapped with backward (--reduce-overlap) vs after it, 2 ranks, staged MPI"
if ! plan_skipped D 45; then
  # Equal speeds, static split: the two modes differ only in when each layer's all-reduce
  # starts. Off and on in turn, PLAN_D_REPEATS times; at 2 ranks both add the same two
  # numbers, so the parameters must agree bit for bit.
  models=${PLAN_D_LAYERS:-256,2048,2048,10 256,4096,4096,4096,10}
  batch=${PLAN_D_BATCH:-16384}
  first=${models%% *}
  run_env "$BIN/antdt-datagen" -o "$WORK/train-d.h5" --samples $((batch * 2)) --dim "${first%%,*}" \
    --classes "${first##*,}" > /dev/null || status=1
  m=0
  for layers in $models; do
    m=$((m + 1))
    for rep in $(seq 1 "${PLAN_D_REPEATS:-3}"); do
      for mode in off on; do
        train_run "plan-d-$m-$mode-$rep" "$layers, overlap $mode, run $rep" --data "$WORK/train-d.h5" \
          --layers "$layers" --global-batch "$batch" --steps "${PLAN_D_STEPS:-30}" --policy static \
          --reduce-overlap "$mode"
      done
    done
  done
  rm -f "$WORK/train-d.h5"
  python3 - "$WORK" $models <<'PY' || status=1
import glob, json, os, statistics, sys
work, models = sys.argv[1], sys.argv[2:]
runs = {}
for path in sorted(glob.glob(os.path.join(work, "plan-d-*.json"))):
    _, _, m, mode, rep = os.path.basename(path)[:-5].split("-")
    runs.setdefault((int(m), mode), {})[int(rep)] = json.load(open(path))
if not runs:
    sys.exit("  no plan D run wrote its summary")
med = lambda rs, key: statistics.median(r[key] for r in rs)
bad = False
for m, layers in enumerate(models, 1):
    off, on = runs.get((m, "off"), {}), runs.get((m, "on"), {})
    for mode, rs in (("off", off), ("on", on)):
        if not rs:
            print(f"  {layers}: overlap {mode}: no run finished"); bad = True; continue
        v = list(rs.values())
        print(f"  {layers:>24} overlap {mode:>3}: reducer {v[0]['reducer']}, median of {len(v)}: "
              f"{med(v, 'throughput'):9.0f} samples/s, step {med(v, 'measured_step_seconds') * 1e3:7.2f} ms, "
              f"reduce wait {med(v, 'reduce_fraction'):.3f}, efficiency {med(v, 'efficiency'):.3f}")
    pairs = sorted(set(off) & set(on))
    if pairs:
        ratios = [on[p]["throughput"] / off[p]["throughput"] for p in pairs]
        same = all(on[p]["parameter_checksum"] == off[p]["parameter_checksum"] for p in pairs)
        print(f"  {layers:>24} on / off throughput: median {statistics.median(ratios):.3f} "
              f"(runs: {', '.join(f'{r:.3f}' for r in ratios)}); parameters identical: {'yes' if same else 'NO'}")
        bad |= not same or not all(on[p]["reduce_overlap"] and not off[p]["reduce_overlap"] for p in pairs)
print("  reduce wait = time from the end of a rank's compute to the reduced gradients, / step time.\n"
      "  Both ranks share ONE GPU (so NCCL is refused and MPI stages through host memory).")
sys.exit(1 if bad else 0)
PY
fi
tar -C "$WORK" -czf "$OUT/gpu-check-logs.tar.gz" --exclude='*.h5' --exclude=build --exclude=bin \
  --exclude=antdt-bench-gpu . 2> /dev/null || true
echo "== done in $((SECONDS - t0)) s, status $status (logs: $OUT/gpu-check-logs.tar.gz)"
exit $status
