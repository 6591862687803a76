"""Every phase of a run is guarded (issue 28, docs/errors.md "A stalled rank"): a rank that
stops (SIGSTOP) in any phase ends the job within the step timeout plus the stated grace, with
exit code 5 and one line that names the right rank and its node, while the waiting ranks sleep
(under 0.1 of a core). The rank stops itself where the phase begins (ANTDT_TEST_STALL, a hook
of the Guard's), so each phase is hit exactly.

    python3 test_phases.py BUILD_DIR SOURCE_DIR [Phases.test_...]
"""
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
import unittest

from harness import DATAGEN, ENV, TRAIN, cpu_seconds, finish, rank_pids, start

TIMEOUT = 2.0
GRACE = 5.0  # grace_seconds(timeout) = max(5, timeout / 10)
EXIT_STALLED = 5
RANKS = 3


def stopped(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "T"
    except OSError:
        return False


class Phases(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="antdt-phases-")
        cls.train = os.path.join(cls.dir, "train.h5")
        cls.eval = os.path.join(cls.dir, "eval.h5")
        r = subprocess.run([DATAGEN, "-o", cls.train, "-n", "3000", "--eval-output", cls.eval, "--eval-samples", "300"],
                           capture_output=True, text=True, env=ENV)
        assert r.returncode == 0, r.stderr

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir, ignore_errors=True)

    def args(self, ckpt, *extra):
        return ["--data", self.train, "--eval-data", self.eval, "--eval-every", 4, "--steps", 20, "--global-batch", 60,
                "--virtual-device", "0.0005", "--step-timeout", TIMEOUT, "--checkpoint-dir", ckpt,
                "--checkpoint-every", 5, "--quiet", *extra]

    def stall(self, spec, named, resume=False):
        """Runs a job whose rank stops itself at `spec` (PHASE:RANK[:STEP]) and checks it ends as
        a stall that names rank `named`, in time, with the others idle while they wait."""
        ckpt = os.path.join(self.dir, "ckpt-" + spec.replace(":", "-"))
        extra = []
        if resume:  # a checkpoint to resume from first
            r = subprocess.run(["mpirun", "-np", str(RANKS), TRAIN, *map(str, self.args(ckpt, "--steps", 6))],
                               capture_output=True, text=True, env=ENV, timeout=120)
            self.assertEqual(r.returncode, 0, r.stderr[-2000:])
            extra = ["--resume"]
        job = start(RANKS, self.args(ckpt, *extra), env=dict(ENV, ANTDT_TEST_STALL=spec))
        pids = rank_pids(job, RANKS)
        stopper = int(spec.split(":")[1])
        deadline = time.time() + 60
        while not stopped(pids[stopper]) and job.poll() is None and time.time() < deadline:
            time.sleep(0.01)
        self.assertTrue(stopped(pids[stopper]), "rank %d did not stop itself at %s" % (stopper, spec))
        t_stop = time.time()
        # The others wait for it: over a second of that wait they must sleep, not spin.
        time.sleep(0.5)
        before = {r: cpu_seconds(p) for r, p in pids.items() if r != stopper and os.path.exists("/proc/%d" % p)}
        time.sleep(1.0)
        spent = {r: cpu_seconds(p) - before[r] for r, p in pids.items() if r in before and os.path.exists("/proc/%d" % p)}
        r = finish(job, timeout=60)
        took = time.time() - t_stop
        try:
            os.kill(pids[stopper], signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.assertEqual(r.returncode, EXIT_STALLED, r.stderr[-3000:])
        # Rank 0 judges at the timeout and gives the others the grace to answer; a stalled rank 0
        # is found by the others, which wait the timeout and a grace before they ask it, and a
        # grace for its answer. Plus the launcher's teardown.
        limit = TIMEOUT + (3 * GRACE if named == 0 else GRACE) + 3
        self.assertLess(took, limit, "the job ended %.1f s after the stall (limit %.1f s)" % (took, limit))
        lines = [l for l in r.stderr.splitlines() if l.startswith("antdt-train: error")]
        self.assertTrue(lines, r.stderr[-3000:])
        for line in lines:
            self.assertRegex(line, r"stall|not answered", line)
            # Every rank the line mentions is the stalled one, or the rank that reports it
            # ("rank 2 waited ... and rank 0 did not answer"): a healthy rank is never blamed.
            reporter = re.search(r"error(?: \(rank (\d+)\))?:", line)
            mentioned = {int(m) for m in re.findall(r"\brank (\d+)", line.split(":", 1)[1])}
            allowed = {named} | ({int(reporter.group(1))} if reporter and reporter.group(1) else set())
            self.assertIn(named, mentioned, "the line names the stalled rank %d: %s" % (named, line))
            self.assertLessEqual(mentioned, allowed, "a healthy rank is named: %s" % line)
        # In every phase, start-up included: before the ranks have told rank 0 their nodes, it
        # knows them from mpirun's layout (every rank on this node; cluster.phases: srun's).
        self.assertRegex(lines[0], r"rank %d \(node [^)]+\)" % named, lines[0])
        # A spinning rank would use most of a core. A napping one used up to 0.10 s under ASan and
        # UBSan (counted in 10 ms clock ticks, its MPI and watchdog threads included): 0.2 s of
        # margin still tells the two apart.
        for rank, cpu in spent.items():
            self.assertLess(cpu, 0.2, "rank %d used %.2f s of CPU in 1 s of waiting in %s" % (rank, cpu, spec))
        return lines

    def test_startup(self):
        self.stall("startup:1", 1)

    def test_probe(self):
        self.stall("probe:2", 2)

    def test_step(self):
        self.stall("step:1:3", 1)

    def test_reduction(self):
        self.stall("reduction:1:3", 1)

    def test_control_exchange(self):
        self.stall("control:2:3", 2)

    def test_evaluation(self):
        self.stall("evaluation:1:3", 1)

    def test_checkpoint_another_rank(self):
        self.stall("checkpoint:1:5", 1)

    def test_checkpoint_the_writer(self):
        lines = self.stall("checkpoint:0:5", 0)
        self.assertTrue(all("rank 0 stalled" in l for l in lines), lines)
        # Issue 44, item 7: every other rank found it and each printed a line; rank 1 says it.
        self.assertEqual(len(lines), 1, lines)
        self.assertIn("error (rank 1): rank 1 waited", lines[0])

    def test_resume(self):
        self.stall("resume:2", 2, resume=True)

    def test_end_of_run(self):
        self.stall("end:1", 1)


if __name__ == "__main__":
    unittest.main()
