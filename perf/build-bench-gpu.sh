#!/usr/bin/env bash
# perf/build-bench-gpu.sh OUTPUT ARCH [nvcc arguments...]: builds antdt-bench-gpu by hand with
# nvcc and cuBLAS only (no CMake), for perf/gpu-check.sh (on a GPU machine) and
# perf/gpu-bundle.sh (here). The generated antdt/config.hpp has CUDA on and everything else off.
# Extra arguments (sources, libraries, flags) are passed to nvcc after the common ones.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
output=$1
arch=$2
shift 2
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
gen=$(mktemp -d)
trap 'rm -rf "$gen"' EXIT
mkdir -p "$gen/antdt"
sed -e 's/#cmakedefine01 ANTDT_HAVE_CUDA/#define ANTDT_HAVE_CUDA 1/' \
    -e 's/#cmakedefine01 \([A-Z_0-9]*\)/#define \1 0/' \
    -e 's/@PROJECT_VERSION_MAJOR@/0/; s/@PROJECT_VERSION_MINOR@/1/; s/@PROJECT_VERSION_PATCH@/0/; s/@PROJECT_VERSION@/0.1.0/' \
    "$ROOT/include/antdt/config.hpp.in" > "$gen/antdt/config.hpp"
"$NVCC" -O3 -std=c++20 -gencode "arch=compute_$arch,code=sm_$arch" -I"$ROOT/include" -I"$gen" -I"$ROOT/kernels" -I"$ROOT/src" \
  -I"$ROOT/tests/compute" \
  "$ROOT/perf/compute/gpu_bench.cpp" "$ROOT/kernels/cuda/mlp_cuda.cpp" "$ROOT/kernels/cuda/mlp_kernels.cu" \
  "$ROOT/kernels/host/mlp_common.cpp" "$ROOT/src/core/plan.cpp" "$ROOT/src/runtime/error_cuda.cpp" "$ROOT/src/runtime/device_copy_cuda.cpp" "$ROOT/src/runtime/device.cpp" \
  "$ROOT/src/core/log.cpp" -lcublas "$@" -o "$output"
