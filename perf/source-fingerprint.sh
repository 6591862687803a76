#!/usr/bin/env bash
# perf/source-fingerprint.sh: a short hash of the sources the GPU bundle is built from.
# perf/gpu-bundle.sh stores it and perf/gpu-check.sh compares it with the tree it runs in, to
# warn about a stale bundle. It reads files, not git: a copied tree's .git may lag its files.
set -euo pipefail
cd "$(dirname "$0")/.."
find include src kernels apps perf/compute tests/compute -type f \
  \( -name '*.cpp' -o -name '*.hpp' -o -name '*.cu' -o -name '*.h' -o -name '*.in' -o -name CMakeLists.txt \) -print0 \
  | LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum | cut -c1-16
