#!/usr/bin/env bash
# Installs everything antdt needs from Debian's packages. Idempotent: when every package is
# already there it checks and returns quietly, without touching the network.
# CUDA, cuBLAS and NCCL come with the machine image under /usr/local/cuda, not from apt.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config
  openmpi-bin libopenmpi-dev
  libhdf5-openmpi-dev hdf5-tools
  libcli11-dev
  libopenblas-dev
  libtrilinos-kokkos-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  slurm-wlm munge
  python3 clang-format
  python3-matplotlib  # the plots of perf/studies
  stress-ng           # perf/controller/sit-out.sh: a co-tenant on a rank's core (CPU, nice levels)
  iproute2            # the tests' cluster of network namespaces (ip netns, veth, tc)
  ccache              # scripts/test.sh compiles through it: CI's later builds reuse its objects
  # The framework adapters (docs/torch.md, docs/python.md): libtorch (PyTorch's C++ API, CPU) and
  # PyTorch for Debian's /usr/bin/python3, with NumPy, pybind11 and mpi4py. The build skips
  # an adapter, saying why, when its framework is missing.
  libtorch-dev python3-torch python3-numpy pybind11-dev python3-mpi4py python3-h5py
  python3-dev         # Python's headers, for antdt's Python module (pybind11)
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ "${#missing[@]}" -eq 0 ]; then
  [ -n "${ANTDT_VERBOSE:-}" ] && echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
# Never the serial libhdf5-dev: it can shadow the parallel HDF5 (docs/testing.md, "Dependencies").
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "install-deps: done"
