#!/usr/bin/env python3
"""The examples of apps/examples/ live a production run's life (issue 24), run by ctest.

    python3 test_examples.py BUILD_DIR SOURCE_DIR [unittest args, e.g. LeastSquares]

One class per example, each with its uninterrupted reference run (2 ranks, --policy static):
  - stopped by a signal mid-run (SIGTERM to every rank, as Slurm sends it, or SIGUSR1 to mpirun,
    which forwards it): exit code 76 and a checkpoint of the step it stopped at; resumed on 3
    ranks, it finishes with every sample trained once per epoch;
  - a rank killed with SIGKILL (--fail-at-step, or kill -9 from here) and the run resumed on 2
    ranks.
Either way the final parameters are bit-identical to the reference's: a step's samples are fixed
by the data order alone (docs/dds.md), whatever the number of ranks, and the examples sum their
gradients in fixed point, so a step's update depends only on which samples it holds.
Every sample once per epoch is counted here from each rank's --sample-log, not from antdt's
counters; a resumed run continues from a checkpoint of step K, so the interrupted run counts
up to K and the resumed one from K on (test_faults.assert_exactly_once).
"""
import glob
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "apps"))
from harness import BUILD, ENV, SOURCE, run  # noqa: E402  (takes BUILD_DIR SOURCE_DIR from argv)
from test_faults import (assert_exactly_once, finish, logged_steps, rank_pids, read_log,  # noqa: E402
                         wait_for_step)

EXIT_STOPPED = 76


def start(np, program, args):
    """An mpirun job in the background (its own process group, so a test can clean up)."""
    return subprocess.Popen(["mpirun", "-np", str(np), program, *map(str, args)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=ENV, start_new_session=True)


def checkpoints(ckpt):
    return sorted(glob.glob(os.path.join(ckpt, "ckpt-*.h5")))


def state(path, name):
    """The values of the program's state `name` in the checkpoint at `path` (h5dump, full precision)."""
    r = run(["h5dump", "-d", "/" + name, "-y", "-w", "0", "-m", "%.17g", path])
    assert r.returncode == 0, r.stderr
    data = r.stdout.split("DATA {", 1)[1].split("}", 1)[0]
    return [float(v) for v in data.replace(",", " ").split()]


class Example:
    """The tests every example passes; a subclass names the program and its run."""
    program = params = None
    np = 2
    samples = batch = epochs = 0
    more = ()  # the example's own options
    slow = 0.0  # --virtual-device seconds per sample, so that a signal lands mid-run

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="antdt-examples-")
        first = cls("test_reference_trains_every_sample_once_per_epoch")
        first.work = cls.dir
        cls.ref = first.finished(cls.np, "ref", [])
        cls.ref_log, cls.ref_ckpt = os.path.join(cls.dir, "ref"), os.path.join(cls.dir, "ref-ckpt")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir, ignore_errors=True)

    def setUp(self):
        self.work = tempfile.mkdtemp(dir=self.dir)

    def path(self, name):
        return os.path.join(self.work, name)

    def args(self, name, *more):
        return ["--samples", self.samples, "--global-batch", self.batch, "--epochs", self.epochs, "--steps", 0,
                "--policy", "static", "--checkpoint-dir", self.path(name + "-ckpt"), "--checkpoint-every", 10,
                "--sample-log", self.path(name), "--quiet", *self.more, *more]

    def finished(self, np, name, more, resume=False):
        """Runs to the end (resuming `name`'s checkpoints with resume); returns its summary with
        its final parameters under "params"."""
        summary = self.path(name + "-summary.json")
        args = self.args(name, "--summary-json", summary, *more)
        r = run(["mpirun", "-np", np, self.program, *args, *(["--resume"] if resume else [])])
        assert r.returncode == 0, "%s (%d ranks): exit code %d\n%s" % (name, np, r.returncode, r.stderr[-3000:])
        with open(summary) as f:
            s = json.load(f)
        assert (s["duplicated_samples"], s["missing_samples"]) == (0, 0), s
        assert s["parameter_checksum"], "the example puts its parameters' checksum in the summary"
        s["params"] = state(checkpoints(self.path(name + "-ckpt"))[-1], self.params)
        return s

    def resumed(self, np, name, log):
        """Resumes `name`'s run on `np` ranks, logging to `log`; returns its summary."""
        return self.finished(np, name, ["--sample-log", self.path(log)], resume=True)

    def assert_as_reference(self, s, np):
        """A run resumed on `np` ranks (the reference's number or another) ends bit-identical to
        the uninterrupted run: every step held the reference's samples."""
        self.assertEqual(s["parameter_checksum"], self.ref["parameter_checksum"],
                         "resumed on %d ranks: the final parameters must be bit-identical" % np)
        self.assertEqual(s["params"], self.ref["params"])

    def stop_and_resume(self, send):
        """Stops a run on 2 ranks mid-run with `send(job, pids)`; resumes it on 3."""
        summary = self.path("stopped.json")
        job = start(self.np, self.program, self.args("a", "--virtual-device", self.slow, "--summary-json", summary,
                                                     "--checkpoint-every", 1000))
        pids = rank_pids(job, self.np)
        steps = self.samples * self.epochs // self.batch
        wait_for_step(self.path("a"), steps // 4, job)
        send(job, pids)
        r = finish(job)
        self.assertEqual(r.returncode, EXIT_STOPPED, r.stderr[-3000:])
        with open(summary) as f:
            self.assertTrue(json.load(f)["stopped"])
        done = logged_steps(self.path("a"))
        self.assertLess(done, steps, "the run stopped early")
        self.assertEqual(checkpoints(self.path("a-ckpt"))[-1], os.path.join(self.path("a-ckpt"), "ckpt-%08d.h5" % done),
                         "a checkpoint of the step it stopped at")
        s = self.resumed(3, "a", "b")
        self.assertEqual(min(read_log(self.path("b"))), done, "resumed where it stopped")
        assert_exactly_once(self, [self.path("a"), self.path("b")], n=self.samples, epochs=self.epochs)
        self.assert_as_reference(s, 3)

    def kill_and_resume(self, kill):
        """Kills a rank of a run on 2 ranks with `kill(name)` (a finished job); resumes it on 2."""
        killed = kill("a")
        self.assertNotIn(killed.returncode, (0, EXIT_STOPPED), "the killed run must fail")
        self.assertTrue(checkpoints(self.path("a-ckpt")), "the killed run had checkpointed")
        s = self.resumed(self.np, "a", "b")
        self.assertLess(min(read_log(self.path("b"))), logged_steps(self.path("a")), "resumed from before the kill")
        assert_exactly_once(self, [self.path("a"), self.path("b")], n=self.samples, epochs=self.epochs)
        self.assert_as_reference(s, self.np)

    def test_reference_trains_every_sample_once_per_epoch(self):
        assert_exactly_once(self, [self.ref_log], n=self.samples, epochs=self.epochs)


class LeastSquares(Example, unittest.TestCase):
    program = os.path.join(BUILD, "apps", "examples", "antdt-example-least-squares")
    params = "model/wb"
    samples, batch, epochs = 1000, 40, 3
    slow = 0.0005  # 10 ms steps

    def test_sigterm_to_every_rank_stops_with_76_and_resumes_on_3_ranks(self):
        self.stop_and_resume(lambda job, pids: [os.kill(p, signal.SIGTERM) for p in pids.values()])

    def test_a_rank_killed_at_a_step_resumes_bit_identical(self):
        self.kill_and_resume(lambda name: run(["mpirun", "-np", self.np, self.program,
                                               *self.args(name, "--fail-at-step", 33, "--fail-rank", 1)]))

    def test_the_fit_recovers_the_true_weights(self):
        r = run(["mpirun", "-np", 3, self.program, "--steps", 150, "--emulate-speed", "1,1,0.5", "--quiet"])
        self.assertEqual(r.returncode, 0, r.stderr[-3000:])
        self.assertIn("the true weights recovered", r.stdout)


class MlpAdam(Example, unittest.TestCase):
    program = os.path.join(BUILD, "apps", "examples", "antdt-example-mlp-adam")
    params = "model/params"
    samples, batch, epochs = 2048, 64, 3
    slow = 0.0002  # 6.4 ms steps

    def test_sigusr1_to_mpirun_stops_with_76_and_resumes_on_3_ranks(self):
        self.stop_and_resume(lambda job, pids: os.kill(job.pid, signal.SIGUSR1))

    def test_kill_9_from_outside_resumes_bit_identical(self):
        def kill(name):
            job = start(self.np, self.program, self.args(name, "--virtual-device", self.slow))
            pids = rank_pids(job, self.np)
            wait_for_step(self.path(name), 40, job)
            os.kill(pids[1], signal.SIGKILL)
            return finish(job)

        self.kill_and_resume(kill)

    def test_adam_state_is_in_the_checkpoint(self):
        newest = checkpoints(self.ref_ckpt)[-1]
        self.assertEqual(state(newest, "adam/t"), [self.samples * self.epochs // self.batch],
                         "Adam's step count: one update per step")
        self.assertEqual(len(state(newest, "adam/m")), len(self.ref["params"]))

    def test_antdt_lines_are_counted_in_the_docs(self):
        with open(os.path.join(SOURCE, "apps", "examples", "mlp_adam.cpp")) as f:
            marked = sum(1 for line in f if re.search(r"// antdt(:|$)", line.rstrip()))
        with open(os.path.join(SOURCE, "docs", "job.md")) as f:
            said = re.search(r"(\d+) lines of `mlp_adam.cpp` deal with antdt", f.read())
        self.assertIsNotNone(said, "docs/job.md gives the count")
        self.assertEqual(int(said.group(1)), marked)
        self.assertLess(marked, 40)


if __name__ == "__main__":
    unittest.main(verbosity=2)
