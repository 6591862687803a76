#!/usr/bin/env bash
# The whole test suite on a fresh machine: install dependencies, configure (CPU + CUDA build
# when the toolkit is there), build, run every ctest test. Used by .ci/run.
#   scripts/test.sh [build-dir]
#   ANTDT_PRESET=cpu|cuda|asan scripts/test.sh    (a CMakePresets.json preset instead; build-<preset>/)
#   ANTDT_WERROR=ON scripts/test.sh               (warnings as errors, as CI does)
#   ANTDT_CTEST_ARGS='-LE slurm' scripts/test.sh  (extra ctest arguments, e.g. labels to leave out)
#   ANTDT_STEPS=build scripts/test.sh             (configure and build only; .ci/run builds the
#                                                  sanitizer stage this way beside the first)
#   ANTDT_CTEST_J=8 scripts/test.sh               (ctest's parallel level; default: the cores.
#                                                  Most tests wait more than they compute:
#                                                  docs/testing.md has what more slots gave)
# The tests that run a private Slurm (labels slurm and cluster) go one at a time in a ctest of
# their own beside the others (run_tests below); the compiler cache is used where ccache is there.
set -euo pipefail
cd "$(dirname "$0")/.."
case ${ANTDT_STEPS:-all} in all | build) ;; *) echo "test.sh: ANTDT_STEPS must be all or build, not '$ANTDT_STEPS'" >&2; exit 2 ;; esac
if ! [[ ${ANTDT_CTEST_J:-1} =~ ^[1-9][0-9]?$ ]]; then echo "test.sh: ANTDT_CTEST_J must be a number of test slots, not '$ANTDT_CTEST_J'" >&2; exit 2; fi
./scripts/install-deps.sh
# The CPUs and any cgroup CPU quota the tests run under, for reading a failure's timings: a rank
# under a binding quota naps in its waits and counts the kernel's stops as its own
# (docs/controller.md, "A rank the kernel holds back").
quota=none
v2=$(awk -F: '$1 == "0" { print $3 }' /proc/self/cgroup)
v1=$(awk -F: '$2 ~ /(^|,)cpu(,|$)/ { print $3 }' /proc/self/cgroup)
for f in "/sys/fs/cgroup$v2/cpu.max" "/sys/fs/cgroup/cpu$v1/cpu.cfs_quota_us" "/sys/fs/cgroup/cpu,cpuacct$v1/cpu.cfs_quota_us"; do
  if [ -r "$f" ]; then quota="$(tr '\n' ' ' < "$f")($f)"; break; fi
done
echo "test.sh: $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg), cgroup CPU quota: $quota"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
launcher=()
if command -v ccache >/dev/null; then
  launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
fi

# Runs the ctest tests of the current directory. The Slurm and namespace-cluster tests (labels
# slurm and cluster) hold one private Slurm at a time (RESOURCE_LOCK slurm) and spend most of
# their time waiting: for Slurm's time-limit check (every 30 s), on the virtual device's sleeps
# (about 0.1 of a core each). In the same ctest they would also wait for every test that takes
# both cores (PROCESSORS above -j), and the 5-minute chain of them would add to the run. So they
# run in a ctest of their own, one after another, beside the rest (unless ANTDT_CTEST_ARGS has
# an -E of its own, which the split would override); its output follows the main run's.
run_tests() {
  local args=(--output-on-failure --timeout 900 ${ANTDT_CTEST_ARGS:-}) jobs=${ANTDT_CTEST_J:-$(nproc)}
  local names=()
  if ! [[ " ${ANTDT_CTEST_ARGS:-} " =~ \ (-E|--exclude-regex)\  ]]; then
    mapfile -t names < <(ctest -N -L 'slurm|cluster' "${args[@]}" | sed -n 's/^ *Test *#[0-9]*: //p')
  fi
  if [ ${#names[@]} -eq 0 ]; then
    ctest -j "$jobs" "${args[@]}"
    return
  fi
  local regex log rc=0 slurm_rc=0 pid
  regex="^($(printf '%s\n' "${names[@]}" | sed 's/[].*^$()+?{}|\\[]/\\&/g' | paste -sd'|'))\$"
  log=$(mktemp)
  ctest "${args[@]}" -R "$regex" > "$log" 2>&1 &
  pid=$!
  ctest -j "$jobs" "${args[@]}" -E "$regex" || rc=$?
  wait "$pid" || slurm_rc=$?
  echo "--- the Slurm and cluster tests (${#names[@]}), run beside the others:"
  cat "$log"
  rm -f "$log"
  [ "$rc" = 0 ] && [ "$slurm_rc" = 0 ]
}

if [ -n "${ANTDT_PRESET:-}" ]; then
  cmake --preset "$ANTDT_PRESET" -DANTDT_WARNINGS_AS_ERRORS="${ANTDT_WERROR:-OFF}" "${launcher[@]}"
  cmake --build --preset "$ANTDT_PRESET" -j "$(nproc)"
  [ "${ANTDT_STEPS:-all}" = build ] && exit 0
  if [ "$ANTDT_PRESET" = asan ]; then export ASAN_OPTIONS=detect_leaks=0 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1; fi
  cd "build-$ANTDT_PRESET"
  run_tests
  exit
fi
build=${1:-build}
args=(-S . -B "$build" -G Ninja -DANTDT_WARNINGS_AS_ERRORS="${ANTDT_WERROR:-OFF}" "${launcher[@]}")
if [ -x /usr/local/cuda/bin/nvcc ]; then args+=(-DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc); fi
cmake "${args[@]}"
cmake --build "$build" -j "$(nproc)"
[ "${ANTDT_STEPS:-all}" = build ] && exit 0
cd "$build"
run_tests
