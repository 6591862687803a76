"""Every sample trained exactly once per epoch, counted from antdt-train's --sample-log files
(PREFIX.RANK; each line "STEP i i ..."), not from antdt's own counters, over the runs of one
training in order: a job, its requeues, its resubmissions. A later run resumes at a checkpoint,
so an earlier run counts only up to the later one's first step (what it trained after its last
checkpoint is trained again).

    python3 exactly_once.py SAMPLES EPOCHS PREFIX... [--stops-at-checkpoints]

--stops-at-checkpoints: each run but the last must have stopped right after a checkpoint of its
last step (a stop by signal), so that nothing is trained twice.
"""
import collections
import glob
import sys


def main(argv):
    strict = "--stops-at-checkpoints" in argv
    argv = [a for a in argv if a != "--stops-at-checkpoints"]
    n, epochs, prefixes = int(argv[0]), int(argv[1]), argv[2:]
    runs = []
    for prefix in prefixes:
        steps = collections.defaultdict(list)
        for path in glob.glob(prefix + ".*"):
            for line in open(path):
                f = line.split()
                steps[int(f[0])].extend(map(int, f[1:]))
        assert steps, "no sample log " + prefix + ".*"
        runs.append(steps)
    counts = collections.Counter()
    for i, steps in enumerate(runs):
        until = min(runs[i + 1]) if i + 1 < len(runs) else max(steps) + 1
        if strict:
            assert until == max(steps) + 1, "run %d: its successor resumed at %d, not after its last step %d" % (
                i, until, max(steps))
        for s in range(min(steps), until):
            counts.update(steps[s])
    missing = set(range(n)) - set(counts)
    assert not missing, "%d samples never trained on, e.g. %s" % (len(missing), sorted(missing)[:5])
    wrong = {i: c for i, c in counts.items() if c != epochs}
    assert not wrong, "samples not exactly once per epoch: %s" % list(wrong.items())[:5]
    print("exactly once: %d samples x %d epochs over %d run(s), stopped after steps %s" %
          (n, epochs, len(runs), [max(r) for r in runs[:-1]]))


if __name__ == "__main__":
    main(sys.argv[1:])
