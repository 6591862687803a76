#!/usr/bin/env bash
# The whole test suite on a fresh machine: install dependencies, configure (CPU + CUDA
# build when the toolkit is there), build, run every ctest test. Used by .ci/run.
#   scripts/test.sh [build-dir]      (ANTDT_PRESET=cpu|cuda|asan picks a preset)
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
build=${1:-build}
args=(-S . -B "$build" -G Ninja -DANTDT_WARNINGS_AS_ERRORS=${ANTDT_WERROR:-OFF})
if [ -x /usr/local/cuda/bin/nvcc ]; then args+=(-DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc); fi
cmake "${args[@]}"
cmake --build "$build" -j "$(nproc)"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
cd "$build" && ctest --output-on-failure -j "$(nproc)" --timeout 900
