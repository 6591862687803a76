#!/usr/bin/env bash
# What the default data order costs the reads (docs/data.md "What the data order costs the reads").
#
# The default order is a full permutation of each epoch (one shard of N, shuffled within): a
# rank's slice of a step is B/P rows scattered over the whole file, read sorted (dense ranges
# through gaps of up to 32 rows, else row by row). Against the shard-local orders it replaced
# (shards of 10 B): `local` (shuffled within its shard, the default before) and `contiguous`
# (--no-shuffle-within-shard, one hyperslab a slice).
#
# One HDF5 file of SAMPLES x DIM float32 (antdt-datagen, clusters; 2,000,000 x 256 = 2.0 GB by
# default), then `mpirun -np RANKS antdt-bench-dds --read-data FILE --read-order O`: every rank
# reads its slice of the first STEPS steps (PER_RANK rows each, independent reads); the reads
# alone are timed (slowest rank). Runs are interleaved over REPEATS rounds, each round every
# order once per mode:
#   cold: the page cache dropped before the run (sync; echo 3 > /proc/sys/vm/drop_caches, root),
#         so every row comes from the disk;
#   warm: the whole file read into the page cache first (cat > /dev/null).
# Every run's figures go to OUT/runs.tsv; the medians are printed (and to OUT/medians.txt).
# PAGE_CACHE_LIMIT=768M runs the reads in a memory cgroup of that size (root; cgroup v1 or v2),
# whose page cache then holds only part of the file: a file larger than memory, on this machine.
# Give DATA (made beforehand, outside the cgroup: antdt-datagen holds the data in memory).
#   perf/dds/read-order.sh [build-dir]    REPEATS=5 STEPS=100 PER_RANK=256 RANKS=2 SAMPLES=2000000 DIM=256
#                                         MODES="cold warm" OUT=dir DATA=file (kept if given)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:-$root/build}" && pwd)
repeats=${REPEATS:-5}
steps=${STEPS:-100}
per_rank=${PER_RANK:-256}
ranks=${RANKS:-2}
samples=${SAMPLES:-2000000}
dim=${DIM:-256}
modes=${MODES:-cold warm}
out=${OUT:-$(mktemp -d /tmp/antdt-read-order.XXXXXX)}
mkdir -p "$out"
bench=$build/perf/dds/antdt-bench-dds
datagen=$build/apps/antdt-datagen
for exe in "$bench" "$datagen"; do
  [ -x "$exe" ] || { echo "read-order: $exe is missing (build first)" >&2; exit 2; }
done
case " $modes " in
  *" cold "*) [ -w /proc/sys/vm/drop_caches ] || { echo "read-order: cold runs need root (drop_caches)" >&2; exit 2; } ;;
esac
cleanup() {
  [ -n "${DATA:-}" ] || [ -z "${data:-}" ] || rm -f "$data"
  [ -z "${cg:-}" ] || cleanup_cgroup
}
trap cleanup EXIT
if [ -n "${PAGE_CACHE_LIMIT:-}" ]; then
  [ -n "${DATA:-}" ] || { echo "read-order: PAGE_CACHE_LIMIT needs DATA, made beforehand with antdt-datagen" >&2; exit 2; }
  if [ -d /sys/fs/cgroup/memory ]; then
    cg=/sys/fs/cgroup/memory/antdt-read-order.$$
    mkdir "$cg" && echo "$PAGE_CACHE_LIMIT" >"$cg/memory.limit_in_bytes"
  else
    cg=/sys/fs/cgroup/antdt-read-order.$$
    mkdir "$cg" && echo "$PAGE_CACHE_LIMIT" >"$cg/memory.max"
  fi
  echo $$ >"$cg/cgroup.procs"
  cleanup_cgroup() { echo $$ >"$(dirname "$cg")/cgroup.procs"; rmdir "$cg"; }
  echo "read-order: in the memory cgroup $cg, limit $PAGE_CACHE_LIMIT" >&2
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export ANTDT_LOG_LEVEL=warn

data=${DATA:-$out/data.h5}
if [ ! -f "$data" ]; then
  "$datagen" --kind clusters --samples "$samples" --dim "$dim" --seed 1 -o "$data" >/dev/null
fi
bytes=$(stat -c %s "$data")
mem_kib=$(awk '/MemTotal/ {print $2}' /proc/meminfo)
{
  echo "# read-order: $(date -u +%FT%TZ), $(nproc) cores, $((mem_kib >> 10)) MiB memory, load $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "# file $data: $samples x $dim float32, $((bytes >> 20)) MiB; $ranks ranks x $per_rank rows a step, $steps steps${PAGE_CACHE_LIMIT:+; memory cgroup of $PAGE_CACHE_LIMIT}"
  printf 'round\tmode\torder\tseconds\tms_per_step\tMB_per_s\treads_per_step\n'
} >"$out/runs.tsv"

for round in $(seq 1 "$repeats"); do
  for mode in $modes; do
    for order in default local contiguous; do
      if [ "$mode" = cold ]; then
        sync
        echo 3 >/proc/sys/vm/drop_caches
      else
        cat "$data" >/dev/null
      fi
      line=$(mpirun -np "$ranks" "$bench" --read-data "$data" --read-order "$order" --batch "$per_rank" \
        --read-steps "$steps" | grep '^read-order')
      # read-order <order> seconds S ms_per_step M MB_per_s R reads_per_step C
      echo "$line" | awk -v r="$round" -v m="$mode" 'BEGIN {OFS="\t"} {print r, m, $2, $4, $6, $8, $10}' \
        >>"$out/runs.tsv"
      echo "round $round $mode: $line" >&2
    done
  done
done

python3 - "$out/runs.tsv" <<'EOF' | tee "$out/medians.txt"
import collections, statistics, sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if not l.startswith("#")][1:]
by = collections.defaultdict(list)
for r in rows:
    by[(r[1], r[2])].append((float(r[4]), float(r[5]), float(r[6])))
for (mode, order), v in sorted(by.items()):
    ms = [x[0] for x in v]
    base = statistics.median(x[0] for x in by[(mode, "default")])
    print(f"{mode:5s} {order:10s} {statistics.median(ms):9.3f} ms a step ({min(ms):.3f}-{max(ms):.3f}, {len(v)} runs), "
          f"{statistics.median(x[1] for x in v):8.1f} MB/s, {statistics.median(x[2] for x in v):6.1f} reads a step; "
          f"default / this {base / statistics.median(ms):6.2f}x")
EOF
echo "read-order: every run in $out/runs.tsv" >&2
