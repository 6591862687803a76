#!/usr/bin/env python3
"""The libtorch example (apps/examples/torch_cnn.cpp) end to end, run by ctest (label torch).

    python3 test_torch_cnn.py BUILD_DIR SOURCE_DIR [unittest args, e.g. Learns]

Learns: the CNN reaches the held-out accuracy docs/torch.md states, on antdt-datagen's digits.
SameBits: two runs with the same plan (static) end with bit-identical parameters.
KillAndResume: a rank SIGKILLed (--fail-at-step) and the run resumed, on the same and on
another number of ranks: the parameters are bit-identical to an uninterrupted run with the
same plan (on another number of ranks: the run that ended at the checkpoint and went on from
it on that number), and every sample is trained exactly once per epoch, counted from
--sample-log, each rank's own list of the samples it trained on.
StopSignal: SIGTERM to every rank mid-run ends it with exit code 76 and a checkpoint of the
last step; --resume finishes it, bit-identical to an uninterrupted run.
"""
import json
import os
import signal
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.abspath(sys.argv[2]), "tests", "apps"))
from harness import BUILD, DATAGEN, ENV, run  # noqa: E402 (takes BUILD_DIR and SOURCE_DIR off argv)
from test_faults import (Faults, assert_exactly_once, finish, logged_steps, rank_pids, read_log,  # noqa: E402
                         wait_for_step)

EXAMPLE = os.path.join(BUILD, "apps", "examples", "antdt-example-torch-cnn")
EXIT_STOPPED = 76
# The accuracy docs/torch.md states: 3 epochs of 6000 images at 2 ranks (10 classes: chance 0.1).
LEARNS_ACCURACY = 0.90
SAMPLES, BATCH, EPOCHS = 960, 48, 2  # the fault runs: 40 steps


def start(np, args):
    """The example under mpirun in the background, in its own process group."""
    return subprocess.Popen(["mpirun", "-np", str(np), EXAMPLE, *map(str, args)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=ENV, start_new_session=True)


class Example(Faults):
    """Faults' scratch folders (setUp, path, tearDownClass) with the digits instead of its data."""
    samples = SAMPLES
    eval_samples = 0

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="antdt-torch-")
        cls.data = os.path.join(cls.dir, "digits.h5")
        more = ["--eval-output", os.path.join(cls.dir, "digits-test.h5"), "--eval-samples", cls.eval_samples] \
            if cls.eval_samples else []
        r = run([DATAGEN, "--kind", "digits", "-o", cls.data, "-n", cls.samples, "--seed", 3, *more])
        assert r.returncode == 0, r.stderr

    def args(self, name, *more):
        """A run's options; its summary goes to NAME.json, its sample log to NAME.log.RANK."""
        return ["--data", self.data, "--global-batch", BATCH, "--epochs", EPOCHS, "--policy", "static",
                "--sample-log", self.path(name + ".log"), "--summary-json", self.path(name + ".json"),
                "--progress", "never", "--quiet", *more]

    def train(self, np, name, *more, code=0):
        r = run(["mpirun", "-np", np, EXAMPLE, *self.args(name, *more)], timeout=300)
        self.assertEqual(r.returncode, code, r.stderr[-3000:])
        return self.summary(name)

    def summary(self, name):
        with open(self.path(name + ".json")) as f:
            s = json.load(f)
        self.assertEqual((s["duplicated_samples"], s["missing_samples"]), (0, 0))
        return s


class Learns(Example):
    samples, eval_samples = 6000, 1000

    def test_the_cnn_learns_the_digits(self):
        s = self.train(2, "learn", "--epochs", 3, "--global-batch", 64, "--policy", "dd",
                       "--test-data", os.path.join(self.dir, "digits-test.h5"))
        self.assertEqual(s["epochs_completed"], 3)
        self.assertGreaterEqual(s["eval_accuracy"], LEARNS_ACCURACY,
                                "held-out accuracy %.3f (chance is 0.1)" % s["eval_accuracy"])
        print("held-out accuracy %.3f after %d steps, %.1f s of training" %
              (s["eval_accuracy"], s["steps"], s["wall_seconds"]))


class SameBits(Example):
    def test_two_runs_with_the_same_plan_end_bit_identical(self):
        a = self.train(3, "a")
        b = self.train(3, "b")
        self.assertEqual(a["parameter_checksum"], b["parameter_checksum"])
        steps = [{k: sorted(v) for k, v in read_log(self.path(name + ".log")).items()} for name in "ab"]
        self.assertEqual(steps[0], steps[1], "the runs trained other samples at some step")


class KillAndResume(Example):
    def killed_and_resumed(self, name, np, kill_at, resume_np):
        """A run of np ranks whose rank 1 SIGKILLs itself as step kill_at begins (checkpoints every
        5 steps), resumed on resume_np ranks; returns the resumed run's summary."""
        ckpt = self.path(name + "-ckpt")
        r = run(["mpirun", "-np", np, EXAMPLE, *self.args(name + "-killed", "--checkpoint-dir", ckpt,
                                                          "--checkpoint-every", 5, "--fail-at-step", kill_at,
                                                          "--fail-rank", 1)], timeout=300)
        self.assertNotEqual(r.returncode, 0, "the killed run ended well")
        self.assertEqual(logged_steps(self.path(name + "-killed.log")), kill_at)
        s = self.train(resume_np, name + "-resumed", "--checkpoint-dir", ckpt, "--checkpoint-every", 5, "--resume")
        self.assertEqual(min(read_log(self.path(name + "-resumed.log"))), kill_at // 5 * 5)
        assert_exactly_once(self, [self.path(name + "-killed.log"), self.path(name + "-resumed.log")],
                            n=SAMPLES, epochs=EPOCHS)
        return s

    def test_resumed_on_the_same_ranks_it_is_the_uninterrupted_run(self):
        whole = self.train(3, "whole")
        resumed = self.killed_and_resumed("same", 3, 13, 3)
        self.assertEqual(resumed["parameter_checksum"], whole["parameter_checksum"])

    def test_resumed_on_other_ranks_it_is_the_run_that_changed_ranks_at_the_checkpoint(self):
        # The uninterrupted run with the same plan: 3 ranks to step 10, where it ends with a
        # checkpoint, then 2 ranks to the end. The killed one loses steps 10-12 and resumes on 2
        # ranks from the checkpoint of step 10.
        ckpt = self.path("changed-ckpt")
        self.train(3, "changed-first", "--checkpoint-dir", ckpt, "--steps", 10)
        changed = self.train(2, "changed-second", "--checkpoint-dir", ckpt, "--resume")
        resumed = self.killed_and_resumed("other", 3, 13, 2)
        self.assertEqual(resumed["ranks"], 2)
        self.assertEqual(resumed["parameter_checksum"], changed["parameter_checksum"])


class StopSignal(Example):
    def test_sigterm_checkpoints_the_last_step_and_exits_76(self):
        whole = self.train(2, "whole", "--epochs", 4)
        ckpt, first = self.path("ckpt"), self.path("stopped.log")
        job = start(2, self.args("stopped", "--epochs", 4, "--checkpoint-dir", ckpt, "--checkpoint-every", 1000))
        pids = rank_pids(job, 2)
        wait_for_step(first, 8, job)
        for pid in pids.values():
            os.kill(pid, signal.SIGTERM)
        r = finish(job)
        self.assertEqual(r.returncode, EXIT_STOPPED, r.stderr[-3000:])
        steps = logged_steps(first)
        self.assertLess(steps, SAMPLES * 4 // BATCH, "the run stopped early")
        checkpoints = sorted(f for f in os.listdir(ckpt) if f.startswith("ckpt-"))
        self.assertTrue(checkpoints and checkpoints[-1] == "ckpt-%08d.h5" % steps,
                        "no checkpoint of the last step %d: %s" % (steps, checkpoints))
        s = self.train(2, "resumed", "--epochs", 4, "--checkpoint-dir", ckpt, "--resume")
        assert_exactly_once(self, [first, self.path("resumed.log")], n=SAMPLES, epochs=4)
        self.assertEqual(s["parameter_checksum"], whole["parameter_checksum"])


if __name__ == "__main__":
    unittest.main()
