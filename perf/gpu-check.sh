#!/usr/bin/env bash
# perf/gpu-check.sh: ONE prepared check for a GPU machine (see docs/compute.md). Run from the
# repository root; everything it writes goes under ${OUT:-./gpu-check-out}. Under 5 minutes.
#
#  1. Inventory: GPU, nvcc, and which of cmake/ninja/MPI/HDF5/GoogleTest exist.
#  2. Plan A (needs only nvcc + cuBLAS): build antdt-bench-gpu by hand for this GPU's
#     architecture and run it: CUDA model self-checks (gradient vs finite differences, SGD
#     step vs reference, learning) and step throughput + GEMM TFLOP/s vs bare cuBLAS.
#  3. Plan B (only when MPI, parallel HDF5 and GoogleTest are present): CMake build of the
#     library and the compute tests for this architecture, and ctest -L compute (the CUDA test
#     instantiations, host/CUDA agreement, NCCL at one rank, staged MPI at two ranks).
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
GEN="$OUT/gen/antdt"
mkdir -p "$GEN"
sed -e 's/#cmakedefine01 ANTDT_HAVE_CUDA/#define ANTDT_HAVE_CUDA 1/' \
    -e 's/#cmakedefine01 ANTDT_HAVE_NCCL/#define ANTDT_HAVE_NCCL 0/' \
    -e 's/#cmakedefine01 \([A-Z_0-9]*\)/#define \1 0/' \
    -e 's/@PROJECT_VERSION_MAJOR@/0/; s/@PROJECT_VERSION_MINOR@/1/; s/@PROJECT_VERSION_PATCH@/0/; s/@PROJECT_VERSION@/0.1.0/' \
    "$ROOT/include/antdt/config.hpp.in" > "$GEN/config.hpp"
BENCH="$OUT/antdt-bench-gpu"
if timeout 180 "$NVCC" -O3 -std=c++20 -gencode "arch=compute_$ARCH,code=sm_$ARCH" \
     -I"$ROOT/include" -I"$OUT/gen" -I"$ROOT/kernels" \
     "$ROOT/perf/compute/gpu_bench.cpp" "$ROOT/kernels/cuda/mlp_cuda.cpp" "$ROOT/kernels/cuda/mlp_kernels.cu" \
     "$ROOT/kernels/host/mlp_common.cpp" "$ROOT/src/core/error_cuda.cpp" \
     -lcublas -o "$BENCH"; then
  echo "  built in $((SECONDS - t0)) s"
  timeout 120 "$BENCH" "${BENCH_SECONDS:-1.0}" || status=1
else
  echo "  FAILED to build antdt-bench-gpu"; status=1
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
  else
    echo "  FAILED or timed out: see $OUT/cmake.log and $OUT/ninja.log"; tail -20 "$OUT/ninja.log" 2>/dev/null; status=1
  fi
else
  echo "  SKIPPED: needs cmake, MPI (mpicxx), parallel HDF5 (h5pcc) and GoogleTest; plan A covered the CUDA model"
fi
echo "== done in $((SECONDS - t0)) s, status $status"
exit $status
