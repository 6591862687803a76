#!/usr/bin/env bash
# The whole test suite on a fresh machine: install dependencies, configure (CPU + CUDA build
# when the toolkit is there), build, run every ctest test. Used by .ci/run.
#   scripts/test.sh [build-dir]
#   ANTDT_PRESET=cpu|cuda|asan scripts/test.sh    (a CMakePresets.json preset instead; build-<preset>/)
#   ANTDT_WERROR=ON scripts/test.sh               (warnings as errors, as CI does)
#   ANTDT_CTEST_ARGS='-LE slurm' scripts/test.sh  (extra ctest arguments, e.g. labels to leave out)
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
if [ -n "${ANTDT_PRESET:-}" ]; then
  cmake --preset "$ANTDT_PRESET" -DANTDT_WARNINGS_AS_ERRORS="${ANTDT_WERROR:-OFF}"
  cmake --build --preset "$ANTDT_PRESET" -j "$(nproc)"
  if [ "$ANTDT_PRESET" = asan ]; then export ASAN_OPTIONS=detect_leaks=0 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1; fi
  cd "build-$ANTDT_PRESET" && exec ctest --output-on-failure -j "$(nproc)" --timeout 900 ${ANTDT_CTEST_ARGS:-}
fi
build=${1:-build}
args=(-S . -B "$build" -G Ninja -DANTDT_WARNINGS_AS_ERRORS="${ANTDT_WERROR:-OFF}")
if [ -x /usr/local/cuda/bin/nvcc ]; then args+=(-DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc); fi
cmake "${args[@]}"
cmake --build "$build" -j "$(nproc)"
cd "$build" && ctest --output-on-failure -j "$(nproc)" --timeout 900 ${ANTDT_CTEST_ARGS:-}
