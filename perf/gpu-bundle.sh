#!/usr/bin/env bash
# perf/gpu-bundle.sh: prepare, on this machine (no GPU needed), what perf/gpu-check.sh carries to
# a GPU machine whose image has nvcc and cuBLAS but no BLAS, MPI or HDF5 (docs/compute.md).
# It writes .gpu-bundle/ (git-ignored; about 41 MB):
#   1. antdt-bench-gpu WITH the host backend (OpenBLAS linked statically), so plan A checks
#      host/CUDA agreement there too;
#   2. antdt-gpu-mpi.tar.xz: the compute tests and the apps for this architecture, with their
#      libraries and a relocatable Open MPI, for plans B and C.
#     perf/gpu-bundle.sh [arch, default 90]      then, on the GPU machine:
#     device run: carry [".gpu-bundle"], command "bash perf/gpu-check.sh"
# The binaries need the same CUDA major version there (13), and load its CUDA libraries.
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
mkdir -p "$OUT"
# Kokkos is off in the generated config: the host backend runs its plain loops.
NVCC=$NVCC "$ROOT/perf/build-bench-gpu.sh" "$OUT/antdt-bench-gpu" "$ARCH" -DANTDT_BENCH_HOST_BACKEND=1 \
  -gencode "arch=compute_$ARCH,code=compute_$ARCH" -isystem "$BLAS_INC" "$ROOT/kernels/host/mlp_host.cpp" \
  "$BLAS_LIB" "$GFORTRAN" "$QUADMATH" -lpthread
git -C "$ROOT" rev-parse --short HEAD > "$OUT/commit" 2>/dev/null || true
"$ROOT/perf/source-fingerprint.sh" > "$OUT/sources"
echo "gpu-bundle: $OUT/antdt-bench-gpu ($(du -h "$OUT/antdt-bench-gpu" | cut -f1), sm_$ARCH + compute_$ARCH PTX," \
     "commit $(cat "$OUT/commit" 2>/dev/null || echo unknown)); carry .gpu-bundle"

# ---- 2. The compute tests and the apps, with MPI, HDF5 and BLAS carried along -------------
# A Release build for this one architecture, plus every shared library it needs that a CUDA
# machine image may lack (glibc, libstdc++ and the CUDA libraries are left to the machine),
# and a relocated Open MPI (its plugins, help files and config, found through OPAL_* and
# PMIX_* variables set by env.sh). Compressed to .gpu-bundle/antdt-gpu-mpi.tar.xz.
BUILD=${ANTDT_GPU_BUNDLE_BUILD:-$ROOT/build-gpu-bundle}
mkdir -p "$BUILD"
cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_COMPILER="$NVCC" \
  -DANTDT_CUDA_ARCHITECTURES="$ARCH" -DANTDT_BUILD_PERF=OFF > "$BUILD/gpu-bundle.log" 2>&1 \
  || { echo "gpu-bundle: cmake failed, see $BUILD/gpu-bundle.log" >&2; exit 1; }
ninja -C "$BUILD" test_compute_model test_compute_reduce test_job_device_reduce antdt-train antdt-datagen >> "$BUILD/gpu-bundle.log" 2>&1 \
  || { echo "gpu-bundle: build failed, see $BUILD/gpu-bundle.log" >&2; exit 1; }
pathof() { ompi_info --path "$1" --parsable | cut -d: -f3; }
PKGLIB=$(pathof pkglibdir)
PKGDATA=$(pathof pkgdatadir)
SYSCONF=$(pathof sysconfdir)
PMIX_PLUGINS=$(dirname "$(readlink -f "$(ldconfig -p | awk '/libpmix.so.2 / {print $NF; exit}')")")/pmix
STAGE=$(mktemp -d)/antdt-gpu
mkdir -p "$STAGE"/{bin,lib,openmpi3,pmix,share,etc}
cp "$BUILD"/tests/compute/test_compute_model "$BUILD"/tests/compute/test_compute_reduce "$BUILD"/tests/compute/test_job_device_reduce \
   "$BUILD"/apps/antdt-train "$BUILD"/apps/antdt-datagen "$STAGE/bin/"
cp -L "$(command -v orterun)" "$STAGE/bin/mpirun"
cp -L "$(command -v orted)" "$STAGE/bin/"
cp -L "$BUILD"/src/libantdt.so.0 "$STAGE/lib/"
# Shared memory, TCP and self transports only: the fabric plugins (UCX, OFI, verbs, PSM) would
# drag in their libraries and are of no use on one machine.
for p in "$PKGLIB"/*.so; do
  case "$(basename "$p")" in *ucx* | *ofi* | *openib* | *psm* | *java*) continue ;; esac
  cp -L "$p" "$STAGE/openmpi3/"
done
[ -d "$PMIX_PLUGINS" ] && cp -L "$PMIX_PLUGINS"/*.so "$STAGE/pmix/"
cp -r "$PKGDATA" "$STAGE/share/openmpi"
cp -L "$SYSCONF"/* "$STAGE/etc/" 2>/dev/null || true
for f in "$STAGE"/bin/* "$STAGE"/lib/* "$STAGE"/openmpi3/*.so "$STAGE"/pmix/*.so; do
  ldd "$f" 2>/dev/null | awk '/=>/ && $3 ~ /^\// {print $3}'
done | sort -u \
  | grep -v -E '/(libc|libm|libdl|libpthread|librt|libutil|libresolv|ld-linux-x86-64|libstdc\+\+|libgcc_s|libcuda|libcudart|libcublas|libcublasLt|libnccl)[.-]' \
  | xargs -r -I{} cp -L {} "$STAGE/lib/"
cat > "$STAGE/env.sh" <<'ENV'
# Source me: the carried Open MPI and libraries, then the machine's own CUDA libraries.
B=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export OPAL_PREFIX=$B OPAL_EXEC_PREFIX=$B OPAL_BINDIR=$B/bin OPAL_LIBDIR=$B/lib OPAL_PKGLIBDIR=$B/openmpi3 \
  OPAL_DATAROOTDIR=$B/share OPAL_DATADIR=$B/share OPAL_PKGDATADIR=$B/share/openmpi OPAL_SYSCONFDIR=$B/etc \
  PMIX_MCA_mca_base_component_path=$B/pmix PMIX_INSTALL_PREFIX=$B
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
NCCL_DIR=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib"))' 2>/dev/null || true)
export LD_LIBRARY_PATH=$B/lib:$CUDA_HOME/lib64:$CUDA_HOME/lib${NCCL_DIR:+:$NCCL_DIR}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PATH=$B/bin:$PATH
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_ess_singleton_isolated=1  # one-rank runs need no mpirun
# Container runtimes (gVisor, Docker without ptrace) refuse process_vm_readv, which the shared
# memory transport's single-copy path (CMA) needs: copy through the shared segment instead.
export OMPI_MCA_btl_vader_single_copy_mechanism=none
# Two ranks on one GPU machine: no core binding, so a partial /sys cannot fail the launch.
export OMPI_MCA_hwloc_base_binding_policy=none
ENV
tar -C "$(dirname "$STAGE")" -cJf "$OUT/antdt-gpu-mpi.tar.xz" antdt-gpu
echo "gpu-bundle: $OUT/antdt-gpu-mpi.tar.xz ($(du -h "$OUT/antdt-gpu-mpi.tar.xz" | cut -f1); $(du -sh "$STAGE" | cut -f1)" \
     "unpacked: $(ls "$STAGE/lib" | wc -l) libraries, $(ls "$STAGE/openmpi3" | wc -l) Open MPI plugins)"
rm -rf "$(dirname "$STAGE")"
echo "gpu-bundle: total $(du -sh "$OUT" | cut -f1) to carry"
