#!/usr/bin/env bash
# perf/torch/gpu-case.sh: the libtorch case of a GPU check (docs/torch.md, "CUDA"). antdt::torch
# with CUDA tensors: the bridge reduces the gradient buffer in GPU memory with Job::reduce_device
# (NCCL at one rank; perf/gpu-check.sh's plan B tests that entry on its own).
# Debian's libtorch is CPU-only, so this runs only on a machine with a CUDA build of libtorch
# (the PyTorch of a GPU machine carries one: python3 -c 'import torch; print(torch.utils.cmake_prefix_path)').
# Run it alone, from the repository root (perf/gpu-check.sh does not call it). It has not run yet:
# no GPU machine was available when it was written.
# It writes its log to ${OUT:-./gpu-check-out}/torch-case.log and works in ${TORCH_CASE_WORK:-/tmp/antdt-torch-case}.
#
#  1. Inventory: the PyTorch there (version, CUDA, C++ ABI, CMake prefix), nvcc, MPI, HDF5, CLI11, GoogleTest.
#  2. Build (CMake, about 5 minutes on 16 cores): antdt with CUDA and NCCL, and antdt::torch
#     against that libtorch: test_torch, antdt-example-torch-cnn, antdt-datagen.
#  3. test_torch's TorchExact cases at 1 rank with ANTDT_TORCH_TEST_DEVICE=cuda: each step's
#     reduced gradient (CUDA tensors) against plain libtorch's on the whole batch, on the GPU
#     (TF32 off).
#  4. The example on the GPU (--device cuda), 1 rank, 2 epochs of 6000 digits: it must learn
#     (held-out accuracy >= 0.9); the summary's reducer is printed.
# Exit status: non-zero when a step that ran failed; a step that cannot run says why.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${OUT:-$ROOT/gpu-check-out}
WORK=${TORCH_CASE_WORK:-${TMPDIR:-/tmp}/antdt-torch-case}
mkdir -p "$OUT" "$WORK"
exec > >(tee "$OUT/torch-case.log") 2>&1
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
PY=${PYTHON:-python3}
status=0
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1

echo "== torch case: inventory"
read -r TORCH_VERSION TORCH_CUDA TORCH_ABI TORCH_PREFIX < <("$PY" - <<'EOF' 2>/dev/null || echo "none none none none"
import torch
print(torch.__version__, torch.version.cuda, int(torch._C._GLIBCXX_USE_CXX11_ABI), torch.utils.cmake_prefix_path)
EOF
)
echo "  PyTorch $TORCH_VERSION, CUDA $TORCH_CUDA, C++11 ABI $TORCH_ABI, CMake prefix $TORCH_PREFIX"
for tool in cmake ninja mpicxx mpirun h5pcc; do printf "  %-8s %s\n" "$tool" "$(command -v $tool || echo missing)"; done
for h in /usr/include/gtest/gtest.h /usr/include/CLI/CLI.hpp; do printf "  %-8s %s\n" "$(basename "$h")" "$([ -e "$h" ] && echo "$h" || echo missing)"; done
if [ "$TORCH_PREFIX" = none ] || [ "$TORCH_CUDA" = None ]; then
  echo "  SKIPPED: no CUDA build of PyTorch (libtorch) here"; exit 0
fi
if ! command -v mpicxx >/dev/null || ! command -v h5pcc >/dev/null || [ ! -e /usr/include/CLI/CLI.hpp ] \
   || [ ! -e /usr/include/gtest/gtest.h ]; then
  echo "  SKIPPED: antdt needs MPI, parallel HDF5, CLI11 and GoogleTest to build here"; exit 0
fi
abi_flags=""
if [ "$TORCH_ABI" = 0 ]; then
  # libtorch built with the old std::string ABI: antdt must be too, or the bridge's calls into
  # libantdt (std::string, std::function) do not link. GoogleTest from the system then may not.
  echo "  NOTE: this libtorch uses the pre-C++11 string ABI: building antdt with -D_GLIBCXX_USE_CXX11_ABI=0"
  abi_flags="-D_GLIBCXX_USE_CXX11_ABI=0"
fi

echo "== torch case: build"
B=$WORK/build
t0=$SECONDS
if timeout 900 bash -c "cmake -S '$ROOT' -B '$B' -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_COMPILER='$NVCC' \
      -DANTDT_CUDA_ARCHITECTURES=90 -DANTDT_BUILD_PERF=OFF -DANTDT_ENABLE_TORCH=ON \
      -DTorch_DIR='$TORCH_PREFIX/Torch' -DCMAKE_CXX_FLAGS='$abi_flags' > '$WORK/cmake.log' 2>&1 && \
      ninja -C '$B' test_torch antdt-example-torch-cnn antdt-datagen > '$WORK/ninja.log' 2>&1"; then
  echo "  built in $((SECONDS - t0)) s"
else
  echo "  FAILED to build (see $WORK/cmake.log, $WORK/ninja.log):"; tail -20 "$WORK/ninja.log" 2>/dev/null || tail -20 "$WORK/cmake.log"
  exit 1
fi
# libtorch's own libraries (and its CUDA ones) beside the Python package.
export LD_LIBRARY_PATH="$TORCH_PREFIX/../../lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

echo "== torch case: exact gradients with CUDA tensors, 1 rank"
if ANTDT_TORCH_TEST_DEVICE=cuda timeout 300 mpirun -np 1 "$B/tests/torch/test_torch" --gtest_filter='TorchExact.*' \
     > "$WORK/exact.log" 2>&1; then
  grep "^\[exact\]" "$WORK/exact.log"; echo "  passed"
else
  echo "  FAILED:"; grep -m 20 -E "exact|Failure|rror" "$WORK/exact.log"; status=1
fi

echo "== torch case: the example on the GPU"
"$B/apps/antdt-datagen" --kind digits -n 6000 -o "$WORK/digits.h5" --eval-output "$WORK/digits-test.h5" \
  --eval-samples 1000 --overwrite > /dev/null
if timeout 300 mpirun -np 1 "$B/apps/examples/antdt-example-torch-cnn" --data "$WORK/digits.h5" --test-data "$WORK/digits-test.h5" \
     --device cuda --global-batch 64 --epochs 2 --summary-json "$WORK/example.json" > "$WORK/example.log" 2>&1; then
  "$PY" - "$WORK/example.json" <<'EOF' || status=1
import json, sys
s = json.load(open(sys.argv[1]))
print("  held-out accuracy %.3f, reducer %s, %.0f samples/s" % (s["eval_accuracy"], s["reducer"], s["throughput"]))
ok = s["eval_accuracy"] >= 0.9
print("  passed" if ok else "  FAILED: held-out accuracy below 0.9")
sys.exit(0 if ok else 1)
EOF
else
  echo "  FAILED:"; tail -20 "$WORK/example.log"; status=1
fi
exit $status
