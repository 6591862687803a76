#!/usr/bin/env bash
# A job that hits its time limit resumes with nothing lost, on a real Slurm on localhost:
# scripts/slurm/antdt-train.sbatch with a 40-second limit and SIGUSR1 15 s before it. The
# training (about 45 s of it, on the virtual device) is stopped by the signal (or by the
# limit's SIGTERM) after a step, checkpoints it and exits 76; the script requeues the job, which
# resumes from that checkpoint, until the run is done. Every sample is trained exactly once per
# epoch, checked from each run's --sample-log (not antdt's own counters).
#   test_time_limit.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$(cd "$1" && pwd); src=$(cd "$2" && pwd)
for tool in slurmctld slurmd munged sbatch; do
  command -v $tool >/dev/null || { echo "SKIP: $tool not installed"; exit 77; }
done
D=$(mktemp -d /tmp/antdt-slurm-limit.XXXXXX)
chmod 755 "$D"
cleanup() { "$src/scripts/slurm/local-slurm.sh" stop "$D/slurm" || true; rm -rf "$D"; }
trap cleanup EXIT
conf=$(ANTDT_SLURM_CPUS=4 ANTDT_SLURMCTLD_PORT=6857 ANTDT_SLURMD_PORT=6858 \
       "$src/scripts/slurm/local-slurm.sh" start "$D/slurm") || { tail -20 "$D"/slurm/log/*.log; exit 1; }
eval "$conf"
fail() { echo "FAIL: $*"; for f in "$D"/run/*.out "$D"/slurm/log/slurmctld.log; do [ -f "$f" ] && { echo "--- $f"; tail -60 "$f"; }; done; exit 1; }

samples=2400
"$build/apps/antdt-datagen" -o "$D/train.h5" --samples $samples --dim 8 --classes 4 >/dev/null
mkdir -p "$D/run"
# Each run of the job (SLURM_RESTART_COUNT 0, 1, ...) logs its samples to its own files.
cat > "$D/train.sh" <<SH
#!/usr/bin/env bash
exec "$build/apps/antdt-train" --sample-log "$D/run/samples-\${SLURM_RESTART_COUNT:-0}" "\$@"
SH
chmod +x "$D/train.sh"
export ANTDT_TRAIN="$D/train.sh" ANTDT_RUN_DIR="$D/run" ANTDT_RUN_NAME=limit ANTDT_LOG_LEVEL=warn
# 2 epochs of 2400 samples at B=40: 120 steps of 2 ranks x 20 samples x 19 ms = 0.38 s each.
args=(--data "$D/train.h5" --layers 8,16,4 --global-batch 40 --epochs 2 --virtual-device 0.019 --quiet)
id=$(sbatch --parsable -n 2 --time=0:40 --signal=B:USR1@15 -J limit -o "$D/run/job-%j.out" \
       "$src/scripts/slurm/antdt-train.sbatch" "${args[@]}")
for _ in $(seq 1500); do  # up to 5 minutes
  state=$(scontrol show job "$id" 2>/dev/null | grep -o 'JobState=[A-Z_]*' | head -1 | cut -d= -f2)
  case "$state" in COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY) break ;; esac
  sleep 0.2
done
[ "$state" = COMPLETED ] || fail "the job ended as '$state'"
out="$D/run/job-$id.out"
stops=$(grep -c "antdt: exit code 76" "$out" || true)
[ "$stops" -ge 1 ] || fail "the time limit never stopped the training (no exit code 76)"
grep -q "antdt: exit code 0" "$out" || fail "the last run did not finish"
python3 - "$D/run" $samples "$stops" <<'PY' || fail "exactly-once check failed"
import collections, glob, json, os, sys
run_dir, n, stops = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
runs = []
for restart in range(stops + 1):
    steps = collections.defaultdict(list)
    for path in glob.glob(os.path.join(run_dir, "samples-%d.*" % restart)):
        for line in open(path):
            f = line.split()
            steps[int(f[0])].extend(map(int, f[1:]))
    assert steps, "run %d logged nothing" % restart
    runs.append(steps)
counts = collections.Counter()
for i, steps in enumerate(runs):
    until = min(runs[i + 1]) if i + 1 < len(runs) else max(steps) + 1
    assert until == max(steps) + 1, "run %d: its successor resumed at %d, not after its last step %d" % (
        i, until, max(steps))
    for s in range(min(steps), until):
        counts.update(steps[s])
assert set(counts) == set(range(n)), "samples never trained on"
wrong = {i: c for i, c in counts.items() if c != 2}
assert not wrong, "samples not exactly once per epoch: %s" % list(wrong.items())[:5]
# One summary per run of the job (summary-<job>-<restart>.json), none overwritten by the next.
summaries = glob.glob(os.path.join(run_dir, "summary-*-*.json"))
assert len(summaries) == len(runs), "%d summaries for %d runs" % (len(summaries), len(runs))
last = json.load(open(max(summaries, key=lambda p: int(p.rsplit("-", 1)[1].split(".")[0]))))
assert [e["committed"] for e in last["epochs"]] == [n, n], last["epochs"]
print("time limit OK: %d stop(s) by signal, %d runs, every sample once per epoch; stops after steps %s" %
      (stops, len(runs), [max(r) for r in runs[:-1]]))
PY
echo "PASS"
