#!/usr/bin/env bash
# perf/gpu-bundle.sh: prepare, on this machine (no GPU needed), what perf/gpu-check.sh carries to
# a GPU machine whose image has nvcc and cuBLAS but no BLAS, MPI or HDF5 (docs/compute.md).
# It builds antdt-bench-gpu WITH the host backend (OpenBLAS linked statically), so the
# host/CUDA agreement check runs there too, into .gpu-bundle/ (git-ignored; carry it):
#     perf/gpu-bundle.sh [arch, default 90]      then, on the GPU machine:
#     device run: carry [".gpu-bundle"], command "bash perf/gpu-check.sh"
# The binary needs the same CUDA major version there (13) and loads libcublas from it.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
ARCH=${1:-90}
NVCC=${NVCC:-/usr/local/cuda/bin/nvcc}
OUT="$ROOT/.gpu-bundle"
BLAS_INC=${BLAS_INC:-/usr/include/x86_64-linux-gnu/openblas-pthread}
BLAS_LIB=${BLAS_LIB:-/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.a}
for f in "$NVCC" "$BLAS_INC/cblas.h" "$BLAS_LIB"; do
  [ -e "$f" ] || { echo "gpu-bundle: missing $f (run scripts/install-deps.sh)" >&2; exit 1; }
done
GFORTRAN=$(g++ -print-file-name=libgfortran.a)
QUADMATH=$(g++ -print-file-name=libquadmath.a)
mkdir -p "$OUT/gen/antdt"
# The generated config: CUDA on, NCCL and Kokkos off (the host backend's plain loops).
sed -e 's/#cmakedefine01 ANTDT_HAVE_CUDA/#define ANTDT_HAVE_CUDA 1/' \
    -e 's/#cmakedefine01 \([A-Z_0-9]*\)/#define \1 0/' \
    -e 's/@PROJECT_VERSION_MAJOR@/0/; s/@PROJECT_VERSION_MINOR@/1/; s/@PROJECT_VERSION_PATCH@/0/; s/@PROJECT_VERSION@/0.1.0/' \
    "$ROOT/include/antdt/config.hpp.in" > "$OUT/gen/antdt/config.hpp"
"$NVCC" -O3 -std=c++20 -DANTDT_BENCH_HOST_BACKEND=1 \
  -gencode "arch=compute_$ARCH,code=sm_$ARCH" -gencode "arch=compute_$ARCH,code=compute_$ARCH" \
  -I"$ROOT/include" -I"$OUT/gen" -I"$ROOT/kernels" -isystem "$BLAS_INC" \
  "$ROOT/perf/compute/gpu_bench.cpp" "$ROOT/kernels/cuda/mlp_cuda.cpp" "$ROOT/kernels/cuda/mlp_kernels.cu" \
  "$ROOT/kernels/host/mlp_common.cpp" "$ROOT/kernels/host/mlp_host.cpp" "$ROOT/src/core/error_cuda.cpp" \
  "$BLAS_LIB" "$GFORTRAN" "$QUADMATH" -lcublas -lpthread -o "$OUT/antdt-bench-gpu"
rm -rf "$OUT/gen"
git -C "$ROOT" rev-parse --short HEAD > "$OUT/commit" 2>/dev/null || true
echo "gpu-bundle: $OUT/antdt-bench-gpu ($(du -h "$OUT/antdt-bench-gpu" | cut -f1), sm_$ARCH + compute_$ARCH PTX," \
     "commit $(cat "$OUT/commit" 2>/dev/null || echo unknown)); carry .gpu-bundle"
