#!/usr/bin/env bash
# perf/gpu-check.sh: ONE prepared check for a GPU machine (see docs/compute.md). Run from the
# repository root; everything it writes goes under ${OUT:-./gpu-check-out}. Under 5 minutes.
#
#  1. Inventory: GPU, nvcc, and which of cmake/ninja/MPI/HDF5/GoogleTest exist.
#  2. Plan A (needs only nvcc + cuBLAS): run antdt-bench-gpu: CUDA model self-checks (gradient
#     vs finite differences, SGD step vs reference, host/CUDA agreement, learning) and step
#     throughput + GEMM TFLOP/s vs bare cuBLAS. The binary carried in .gpu-bundle/ (made here
#     by perf/gpu-bundle.sh, with the host backend) when present; else built by hand with
#     nvcc for this GPU's architecture, without the host backend (agreement is then skipped).
#     Then compute-sanitizer (memcheck, racecheck, synccheck) runs that binary on small shapes.
#  3. Plan B (only when MPI, parallel HDF5 and GoogleTest are present): CMake build of the
#     library and the compute tests for this architecture, and ctest -L compute (the CUDA test
#     instantiations, host/CUDA agreement, NCCL at one rank, staged MPI at two ranks, and the
#     fat binary's contents).
#  4. Plan C (plan B's build, plus CLI11): antdt-train on the GPU, 2 ranks sharing it, one
#     emulated at half speed (one GPU cannot show mixed generations): static vs dd efficiency.
# Exit status: non-zero when a check that ran failed. Steps that cannot run say why.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-$ROOT/gpu-check-out}
mkdir -p "$OUT"
LOG="$OUT/gpu-check.log"
exec > >(tee "$LOG") 2>&1
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
CUDA_HOME=${CUDA_HOME:-$(dirname "$(dirname "$NVCC")")}
status=0
t0=$SECONDS

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
if [ -x "$BUNDLE" ] && [ -z "${SKIP_BUNDLE:-}" ]; then
  # Prebuilt by perf/gpu-bundle.sh with the host backend, so host/CUDA agreement is checked too.
  bundle_commit=$(cat "$ROOT/.gpu-bundle/commit" 2>/dev/null || echo unknown)
  head_commit=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)
  echo "  prebuilt $BUNDLE (commit $bundle_commit; tree at $head_commit)"
  if [ "$head_commit" != unknown ] && [ "$bundle_commit" != "$head_commit" ]; then
    echo "  WARNING: the bundle was built from another commit: rerun perf/gpu-bundle.sh"
  fi
  timeout 120 "$BUNDLE" "${BENCH_SECONDS:-1.0}" || status=1
  BENCH_DONE=1
  BENCH_BIN=$BUNDLE
fi
GEN="$OUT/gen/antdt"
mkdir -p "$GEN"
sed -e 's/#cmakedefine01 ANTDT_HAVE_CUDA/#define ANTDT_HAVE_CUDA 1/' \
    -e 's/#cmakedefine01 ANTDT_HAVE_NCCL/#define ANTDT_HAVE_NCCL 0/' \
    -e 's/#cmakedefine01 \([A-Z_0-9]*\)/#define \1 0/' \
    -e 's/@PROJECT_VERSION_MAJOR@/0/; s/@PROJECT_VERSION_MINOR@/1/; s/@PROJECT_VERSION_PATCH@/0/; s/@PROJECT_VERSION@/0.1.0/' \
    "$ROOT/include/antdt/config.hpp.in" > "$GEN/config.hpp"
BENCH="$OUT/antdt-bench-gpu"
if [ -n "${BENCH_DONE:-}" ]; then
  echo "  (not built by hand: the prebuilt bundle ran)"
elif timeout 180 "$NVCC" -O3 -std=c++20 -gencode "arch=compute_$ARCH,code=sm_$ARCH" \
     -I"$ROOT/include" -I"$OUT/gen" -I"$ROOT/kernels" \
     "$ROOT/perf/compute/gpu_bench.cpp" "$ROOT/kernels/cuda/mlp_cuda.cpp" "$ROOT/kernels/cuda/mlp_kernels.cu" \
     "$ROOT/kernels/host/mlp_common.cpp" "$ROOT/src/core/error_cuda.cpp" \
     -lcublas -o "$BENCH"; then
  echo "  built in $((SECONDS - t0)) s"
  timeout 120 "$BENCH" "${BENCH_SECONDS:-1.0}" || status=1
  BENCH_BIN=$BENCH
else
  echo "  FAILED to build antdt-bench-gpu"; status=1
fi

echo "== compute-sanitizer on the self-checks (small shapes): memcheck, racecheck, synccheck"
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
  for tool in memcheck racecheck synccheck; do
    if timeout 150 "$SANITIZER" --tool "$tool" --error-exitcode 3 "$BENCH_BIN" 0 smoke > "$OUT/sanitizer-$tool.log" 2>&1; then
      echo "  $tool: clean ($(grep -c PASS "$OUT/sanitizer-$tool.log") checks passed under it)"
    else
      echo "  $tool: FAILED (exit $?), see $OUT/sanitizer-$tool.log:"; grep -m 20 -E "=====|FAIL" "$OUT/sanitizer-$tool.log"
      status=1
    fi
  done
fi

echo "== plan B: CMake build + ctest of the compute tests"
if [ -n "${SKIP_PLAN_B:-}" ]; then
  echo "  SKIPPED: SKIP_PLAN_B is set"
elif command -v cmake >/dev/null && command -v mpicxx >/dev/null && command -v h5pcc >/dev/null \
   && [ -e /usr/include/gtest/gtest.h ]; then
  B="$OUT/build"
  left=$((280 - (SECONDS - t0)))
  if [ "$left" -lt 60 ]; then
    echo "  SKIPPED: only $left s left of the 5-minute budget"
  elif timeout $((left - 30)) bash -c "cmake -S '$ROOT' -B '$B' -G Ninja -DCMAKE_CUDA_COMPILER='$NVCC' \
        -DANTDT_CUDA_ARCHITECTURES=$ARCH -DANTDT_ENABLE_KOKKOS=OFF -DANTDT_BUILD_APPS=OFF -DANTDT_BUILD_PERF=OFF \
        > '$OUT/cmake.log' 2>&1 && ninja -C '$B' test_compute_model test_compute_reduce > '$OUT/ninja.log' 2>&1"; then
    (cd "$B" && timeout 60 ctest -L compute --output-on-failure) || status=1
    plan_c=1
  else
    echo "  FAILED or timed out: see $OUT/cmake.log and $OUT/ninja.log"; tail -20 "$OUT/ninja.log" 2>/dev/null; status=1
  fi
else
  echo "  SKIPPED: needs cmake, MPI (mpicxx), parallel HDF5 (h5pcc) and GoogleTest; plan A covered the CUDA model"
fi
echo "== plan C: antdt-train on the GPU, 2 ranks, rank 1 EMULATED at half speed, static vs dd"
left=$((290 - (SECONDS - t0)))
if [ -z "${plan_c:-}" ]; then
  echo "  SKIPPED: needs plan B's build"
elif [ ! -e /usr/include/CLI/CLI.hpp ]; then
  echo "  SKIPPED: CLI11 (CLI/CLI.hpp) is missing, so the apps cannot be built"
elif [ "$left" -lt 60 ]; then
  echo "  SKIPPED: only $left s left of the 5-minute budget"
elif timeout 120 bash -c "cmake -DANTDT_BUILD_APPS=ON '$B' >> '$OUT/cmake.log' 2>&1 && \
        ninja -C '$B' antdt-train antdt-datagen >> '$OUT/ninja.log' 2>&1"; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 ANTDT_LOG_LEVEL=warn
  # GEMM work per step (6 x batch x parameters) well above the staged reduction of the
  # gradients (both ranks share the GPU, so NCCL is refused) and the HDF5 reads.
  layers=${PLAN_C_LAYERS:-256,2048,2048,10}
  "$B/apps/antdt-datagen" -o "$OUT/train.h5" --samples 65536 --dim "${layers%%,*}" --classes 10 > /dev/null || status=1
  for policy in static dd; do
    timeout 60 mpirun -np 2 "$B/apps/antdt-train" --data "$OUT/train.h5" --layers "$layers" \
      --global-batch "${PLAN_C_BATCH:-16384}" --steps "${PLAN_C_STEPS:-40}" --device "${PLAN_C_DEVICE:-cuda}" \
      --emulate-speed 1,0.5 --policy "$policy" --quiet --summary-json "$OUT/plan-c-$policy.json" || status=1
  done
  python3 - "$OUT/plan-c-static.json" "$OUT/plan-c-dd.json" <<'PY' || status=1
import json, sys
s, d = (json.load(open(p)) for p in sys.argv[1:3])
for name, r in (("static", s), ("dd", d)):
    print(f"  {name:>6}: {r['device']}, reducer {r['reducer']}, {r['throughput']:9.0f} samples/s, "
          f"efficiency {r['efficiency']:.3f}, split {r['final_split']}, duplicated {r['duplicated_samples']}")
print(f"  dd / static throughput {d['throughput'] / s['throughput']:.2f}x (limit 1.5x for speeds 1, 0.5)")
PY
else
  echo "  FAILED to build the apps: see $OUT/ninja.log"; status=1
fi
echo "== done in $((SECONDS - t0)) s, status $status"
exit $status
