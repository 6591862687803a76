#!/usr/bin/env python3
"""End-to-end tests that antdt-train and antdt-datagen never lose a user's data, run by ctest.

    python3 test_safety.py BUILD_DIR SOURCE_DIR [unittest args, e.g. OutputPaths]

Each class is one ctest test and covers one defect of issue 17 as a new user meets it: outputs
that would overwrite inputs, checkpoint directories shared by runs, NaN and Inf, checks that
came only after the run, a lenient config file, impossible schedules, messages, a script that
ran environment values as code, and a model whose widths had to restate the data. Runs are
tiny (a few steps on 1200 samples); tests that need a full or read-only file system mount a
64 KiB tmpfs and skip, saying why, where that is not allowed.
"""
import collections
import fcntl
import glob
import hashlib
import json
import os
import random
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
import unittest

from harness import BUILD, DATAGEN, ENV, SOURCE, TRAIN, Mount, run



def mpirun(np, *args, timeout=240, env=None):
    return run(["mpirun", "-np", str(np), TRAIN, *args], timeout=timeout, env=env)


def digest(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def error_lines(stderr):
    """antdt's own error lines (Open MPI's notes about a non-zero exit are not antdt's)."""
    return [l for l in stderr.splitlines() if re.match(r"antdt-(train|datagen): error", l)]


def features_offset(path):
    """Byte offset of the contiguous /features data set, from h5dump's storage layout."""
    out = subprocess.run(["h5dump", "-p", "-H", "-d", "/features", path], capture_output=True, text=True,
                         check=True).stdout
    return int(re.search(r"OFFSET (\d+)", out).group(1))


def labels_offset(path):
    """Byte offset of the contiguous /labels data set (int32), from h5dump's storage layout."""
    out = subprocess.run(["h5dump", "-p", "-H", "-d", "/labels", path], capture_output=True, text=True,
                         check=True).stdout
    return int(re.search(r"OFFSET (\d+)", out).group(1))


def plant(path, dim, cells):
    """Overwrites features (sample, column) of an antdt-datagen file with the given floats."""
    base = features_offset(path)
    with open(path, "r+b") as f:
        for (sample, column), value in cells.items():
            f.seek(base + (sample * dim + column) * 4)
            f.write(struct.pack("<f", value))


class Workdir(unittest.TestCase):
    samples = 1200

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="antdt-safety-")
        cls.train = os.path.join(cls.dir, "train.h5")
        cls.eval = os.path.join(cls.dir, "eval.h5")
        r = run([DATAGEN, "-o", cls.train, "--samples", cls.samples, "--dim", 8, "--classes", 4,
                 "--eval-output", cls.eval, "--eval-samples", 300, "--seed", 3])
        assert r.returncode == 0, r.stderr

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir, ignore_errors=True)

    def base(self):
        return ["--data", self.train, "--layers", "8,16,4", "--global-batch", 40, "--quiet"]

    def path(self, name):
        return os.path.join(self.dir, name)

    def summary(self, path):
        with open(path) as f:
            return json.load(f)

    def assert_one_error(self, r, code, *needles):
        self.assertEqual(r.returncode, code, f"stdout={r.stdout}\nstderr={r.stderr}")
        lines = error_lines(r.stderr)
        self.assertEqual(len(lines), 1, f"exactly one error line, got:\n{r.stderr}")
        for needle in needles:
            self.assertIn(needle, lines[0])
        return lines[0]

    def mount(self, name):
        m = Mount(self.path(name))
        if not m.ok:
            self.skipTest(f"cannot mount a tmpfs here ({m.why}); this check needs root")
        self.addCleanup(m.close)
        return m


class OutputPaths(Workdir):
    """Defect 1: an output equal to an input replaced it, with exit 0."""

    def test_outputs_equal_to_an_input_are_refused_and_the_input_is_kept(self):
        before = {p: digest(p) for p in (self.train, self.eval)}
        link = self.path("link-to-train.h5")
        os.symlink(self.train, link)
        spelled = os.path.join(self.dir, ".", "..", os.path.basename(self.dir), "train.h5")
        for option, target, names in (("--summary-json", self.train, "--data"),
                                      ("--metrics", spelled, "--data"),  # another spelling of the same path
                                      ("--timeline", link, "--data"),  # a symbolic link to it
                                      ("--summary-json", self.eval, "--eval-data")):
            r = mpirun(2, *self.base(), "--steps", 2, "--eval-data", self.eval, option, target)
            self.assert_one_error(r, 2, option, names, "same file")
        self.assertEqual({p: digest(p) for p in before}, before, "the inputs are unchanged")

    def test_an_output_over_a_checkpoint_is_refused(self):
        d = self.path("ck-out")
        r = mpirun(2, *self.base(), "--steps", 2, "--checkpoint-dir", d)
        self.assertEqual(r.returncode, 0, r.stderr)
        (ckpt,) = glob.glob(os.path.join(d, "ckpt-*.h5"))
        kept = digest(ckpt)
        r = mpirun(2, *self.base(), "--steps", 2, "--checkpoint-dir", d, "--resume", "--summary-json", ckpt)
        self.assert_one_error(r, 2, "--summary-json", "checkpoint")
        self.assertEqual(digest(ckpt), kept)

    def test_datagen_refuses_one_file_for_both_sets(self):
        out = self.path("both.h5")
        r = run([DATAGEN, "-o", out, "--samples", 100, "--dim", 4, "--classes", 2, "--eval-output",
                 os.path.join(self.dir, ".", "both.h5")])
        self.assert_one_error(r, 2, "--eval-output", "--output", "same file")
        self.assertFalse(os.path.exists(out), "nothing was written")


class CheckpointOwnership(Workdir):
    """Defect 2: a fresh run deleted another run's checkpoints; two runs shared a directory."""

    def checkpoints(self, d):
        return sorted(os.path.basename(p) for p in glob.glob(os.path.join(d, "ckpt-*.h5")))

    def test_a_fresh_run_refuses_another_runs_checkpoints_unless_told_to_overwrite(self):
        d = self.path("owned")
        r = mpirun(2, *self.base(), "--steps", 10, "--checkpoint-every", 5, "--checkpoint-dir", d)
        self.assertEqual(r.returncode, 0, r.stderr)
        first = self.checkpoints(d)
        self.assertEqual(first, ["ckpt-00000005.h5", "ckpt-00000010.h5"])
        sums = {f: digest(os.path.join(d, f)) for f in first}
        r = mpirun(2, *self.base(), "--steps", 3, "--checkpoint-dir", d, "--model-seed", 9)
        self.assert_one_error(r, 2, d, "--resume", "--checkpoint-overwrite")
        self.assertEqual({f: digest(os.path.join(d, f)) for f in self.checkpoints(d)}, sums, "nothing deleted")
        r = mpirun(2, *self.base(), "--steps", 3, "--checkpoint-dir", d, "--model-seed", 9, "--checkpoint-overwrite")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(self.checkpoints(d), ["ckpt-00000003.h5"], "the old run's checkpoints are gone, all of them")

    def test_resume_into_another_runs_directory_says_what_differs(self):
        d = self.path("other-run")
        r = mpirun(2, *self.base(), "--steps", 4, "--checkpoint-dir", d)
        self.assertEqual(r.returncode, 0, r.stderr)
        r = mpirun(2, *self.base(), "--steps", 8, "--checkpoint-dir", d, "--resume", "--model-seed", 5,
                   "--data-seed", 2)
        line = self.assert_one_error(r, 2, d, "another run", "model_seed: 1 there, 5 here",
                                     "data_seed: 0 there, 2 here")
        self.assertNotIn("model_shape", line, "only what differs is listed")
        self.assertEqual(self.checkpoints(d), ["ckpt-00000004.h5"])

    def test_a_failed_resume_records_no_identity_and_the_right_one_goes_on(self):
        """Issue 24: the run identity was written before the resume had checked it, so a resume
        that failed (a data set of another size) left its identity behind and the next, correct
        resume was refused. Here the directory has no recorded identity (as one from before
        identities were recorded), so only the resume itself can find the mismatch."""
        d = self.path("identity-after-resume")
        other = self.path("other-size.h5")
        self.assertEqual(run([DATAGEN, "-o", other, "--samples", 1000, "--dim", 8, "--classes", 4]).returncode, 0)
        r = mpirun(2, *self.base(), "--steps", 4, "--checkpoint-dir", d)
        self.assertEqual(r.returncode, 0, r.stderr)
        identity = os.path.join(d, "antdt-run")
        with open(identity) as f:
            recorded = f.read()
        os.remove(identity)
        wrong = ["--data", other, *self.base()[2:]]
        r = mpirun(2, *wrong, "--steps", 8, "--checkpoint-dir", d, "--resume")
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("was taken on a data set of 1200 samples, but this run has 1000", r.stderr)
        self.assertFalse(os.path.exists(identity), "the failed resume recorded its identity")
        r = mpirun(2, *self.base(), "--steps", 8, "--checkpoint-dir", d, "--resume")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("ckpt-00000008.h5", self.checkpoints(d))
        with open(identity) as f:
            self.assertEqual(f.read(), recorded, "the resumed run recorded its own identity again")

    def test_a_second_writer_is_refused_while_the_first_runs(self):
        d = self.path("locked")
        # Its own process group, so that kill -9 reaches mpirun and every rank at once.
        first = subprocess.Popen(list(map(str, ["mpirun", "-np", 2, TRAIN, *self.base(), "--steps", 100000,
                                                "--virtual-device", "0.001", "--checkpoint-dir", d,
                                                "--checkpoint-every", 50])),
                                 env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        lock = os.path.join(d, "antdt.lock")
        try:
            for _ in range(600):
                if os.path.exists(lock) and os.path.getsize(lock) > 0:
                    break
                time.sleep(0.05)
            with open(lock) as f:
                holder = f.read().strip()
            self.assertRegex(holder, r"^host .+, pid \d+$")
            for extra in ([], ["--resume"]):
                r = mpirun(2, *self.base(), "--steps", 3, "--checkpoint-dir", d, *extra)
                self.assert_one_error(r, 2, d, "in use by another run", holder)
            self.assertIsNone(first.poll(), "the first run goes on")
        finally:
            os.killpg(first.pid, signal.SIGKILL)
            first.wait()
        # The kernel drops the lock of a killed holder; nothing is left to clean up.
        with open(lock) as f:
            for _ in range(200):
                try:
                    fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    fcntl.flock(f, fcntl.LOCK_UN)
                    break
                except BlockingIOError:
                    time.sleep(0.05)
            else:
                self.fail("the lock outlived its killed holder")
        r = mpirun(2, *self.base(), "--steps", 3, "--checkpoint-dir", d, "--resume", "--checkpoint-keep", 1)
        self.assertEqual(r.returncode, 0, r.stderr)

    def test_sbatch_gives_each_submission_its_own_directory(self):
        """The template, run as Slurm would (ANTDT_LAUNCHER=mpirun, Slurm's variables set by
        hand): two submissions of the default job name do not share a directory, a requeue (same
        job id) resumes its own, and ANTDT_RUN_NAME names a run that later jobs continue."""
        sbatch = os.path.join(SOURCE, "scripts", "slurm", "antdt-train.sbatch")
        runs = self.path("runs")
        os.makedirs(runs)

        def job(job_id, *args, **env):
            e = dict(ENV, ANTDT_TRAIN=TRAIN, ANTDT_RUN_DIR=runs, ANTDT_LAUNCHER="mpirun", SLURM_JOB_NAME="antdt-train",
                     SLURM_JOB_ID=str(job_id), **env)
            return run(["bash", sbatch, *self.base(), "--steps", 4, "--checkpoint-every", 2, *args], env=e)

        for job_id in (101, 102):
            r = job(job_id)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            self.assertEqual(self.checkpoints(os.path.join(runs, f"antdt-train-{job_id}-ckpt")),
                             ["ckpt-00000002.h5", "ckpt-00000004.h5"])
        r = job(101, SLURM_RESTART_COUNT="1")  # a requeue keeps its job id: nothing left to do
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertEqual(self.summary(os.path.join(runs, "summary-101-1.json"))["steps"], 0)
        self.assertEqual(self.summary(os.path.join(runs, "summary-101-0.json"))["steps"], 4)  # kept
        r = job(103, ANTDT_RUN_NAME="mine")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        r = job(104, "--steps", 6, ANTDT_RUN_NAME="mine")  # a later job continues the named run
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertEqual(self.summary(os.path.join(runs, "summary-104-0.json"))["steps"], 2)
        r = job(105, ANTDT_RUN_NAME="../elsewhere")
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        self.assertIn("ANTDT_RUN_NAME", r.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.dir, "elsewhere-ckpt")))


class NonFinite(Workdir):
    """Defect 4: NaN features trained to NaN parameters with exit 0, and NaN checkpoints pushed
    the good ones out of the keep window."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.poisoned = os.path.join(cls.dir, "nan.h5")
        shutil.copy(cls.train, cls.poisoned)
        plant(cls.poisoned, 8, {(17, 3): float("nan"), (600, 0): float("inf"), (601, 7): float("-inf")})

    def poisoned_args(self):
        return ["--data", self.poisoned, "--layers", "8,16,4", "--global-batch", 40, "--quiet"]

    def test_non_finite_features_are_an_error_naming_file_and_sample(self):
        r = mpirun(3, *self.poisoned_args(), "--steps", 3)
        self.assert_one_error(r, 2, "nan.h5", "sample 17", "3 of 1200", "--skip-non-finite")

    def test_skip_non_finite_trains_on_the_rest_exactly_once(self):
        js = self.path("skip.json")
        r = mpirun(3, *self.poisoned_args(), "--epochs", 2, "--skip-non-finite", "--policy", "dd",
                   "--emulate-speed", "1,1,0.5", "--virtual-device", "0.0001", "--summary-json", js)
        self.assertEqual(r.returncode, 0, r.stderr)
        s = self.summary(js)
        self.assertEqual(s["non_finite_dropped"], 3)
        self.assertEqual([e["committed"] for e in s["epochs"]], [self.samples - 3] * 2)
        self.assertEqual(s["duplicated_samples"], 0)
        self.assertEqual(s["missing_samples"], 0)
        self.assertIsNotNone(s["final_loss"], "the loss is a number (null would be NaN)")
        self.assertLess(s["final_loss"], 1.5)

    def test_divergence_stops_before_checkpointing_and_keeps_the_good_ones(self):
        d = self.path("diverged")
        js = self.path("diverged.json")
        # lr 1e4 overflows within a few steps; a checkpoint every step, the newest 3 kept.
        r = mpirun(2, *self.base(), "--steps", 40, "--lr", "1e4", "--checkpoint-dir", d, "--checkpoint-every", 1,
                   "--checkpoint-keep", 3, "--summary-json", js)
        line = self.assert_one_error(r, 4, "not finite", "rank")
        step = int(re.search(r"step (\d+):", line).group(1))
        self.assertGreater(step, 0)
        self.assertFalse(os.path.exists(js), "no summary of a diverged run")
        ckpts = sorted(glob.glob(os.path.join(d, "ckpt-*.h5")))
        self.assertTrue(ckpts, "the checkpoints before the failure are kept")
        self.assertEqual(os.path.basename(ckpts[-1]), f"ckpt-{step:08d}.h5",
                         "the newest checkpoint is the state the failing step started from")
        for path in ckpts:
            dump = subprocess.run(["h5dump", "-d", "/model/parameters", path], capture_output=True, text=True,
                                  check=True).stdout
            self.assertNotRegex(dump.lower(), r"\b(nan|inf)\b", f"{path} holds non-finite parameters")


class EarlyChecks(Workdir):
    """Defect 6: bad outputs and eval data failed only after the whole run; a full disk left a
    0-byte summary with exit 0."""

    def metrics_rows(self, path):
        if not os.path.exists(path):
            return 0
        with open(path) as f:
            return max(0, len(f.read().splitlines()) - 1)

    def test_a_summary_in_a_missing_directory_fails_before_training(self):
        met = self.path("missing-dir.csv")
        r = mpirun(2, *self.base(), "--steps", 20, "--metrics", met, "--summary-json",
                   self.path("no/such/dir/s.json"))
        self.assert_one_error(r, 2, "--summary-json", "does not exist")
        self.assertEqual(self.metrics_rows(met), 0, "no step was trained")

    def test_bad_eval_labels_fail_before_training_naming_the_file(self):
        other = self.path("ten-classes.h5")
        r = run([DATAGEN, "-o", other, "--samples", 50, "--dim", 8, "--classes", 10, "--seed", 3])
        self.assertEqual(r.returncode, 0, r.stderr)
        met = self.path("eval-labels.csv")
        r = mpirun(2, *self.base(), "--steps", 20, "--eval-data", other, "--metrics", met)
        self.assert_one_error(r, 2, "--eval-data", "ten-classes.h5", "10 classes")
        self.assertEqual(self.metrics_rows(met), 0, "no step was trained")

    def test_a_read_only_checkpoint_directory_fails_before_training(self):
        m = self.mount("ro")
        os.makedirs(os.path.join(m.path, "ck"))
        if not m.remount("ro"):
            self.skipTest("cannot remount the tmpfs read-only")
        met = self.path("ro.csv")
        r = mpirun(2, *self.base(), "--steps", 20, "--checkpoint-every", 0, "--checkpoint-dir",
                   os.path.join(m.path, "ck"), "--metrics", met)
        line = self.assert_one_error(r, 2, "not writable", "Read-only file system")
        self.assertNotIn("o_flags", line, "no HDF5 internals")
        self.assertEqual(self.metrics_rows(met), 0, "no step was trained")

    def test_a_summary_on_a_full_disk_is_exit_3_and_no_empty_file(self):
        m = self.mount("full")
        m.fill()
        js = os.path.join(m.path, "s.json")
        r = mpirun(2, *self.base(), "--steps", 3, "--summary-json", js)
        self.assert_one_error(r, 3, "--summary-json", "No space left on device")
        self.assertEqual([f for f in os.listdir(m.path) if not f.startswith("filler")], [],
                         "neither a 0-byte summary nor a temporary is left")

    def test_streamed_outputs_on_a_full_disk_are_exit_3_and_no_empty_file(self):
        m = self.mount("full-streams")
        m.fill()
        for option, name in (("--metrics", "m.csv"), ("--timeline", "t.json"), ("--sample-log", "log")):
            r = mpirun(2, *self.base(), "--steps", 30, option, os.path.join(m.path, name))
            self.assertEqual(r.returncode, 3, f"{option}: {r.stderr[-2000:]}")
            self.assertTrue(any(option in l or name in l for l in error_lines(r.stderr)), r.stderr[-2000:])
            self.assertEqual([f for f in os.listdir(m.path) if not f.startswith("filler")], [],
                             f"{option}: no 0-byte file is left")


    def test_outputs_on_a_nearly_full_disk_leave_no_torn_line(self):
        """Issue 44, item 6: a full disk took part of the last buffer, and the metrics file ended in
        half a row. Now it is cut back to its last whole row; so is a sample log, whose torn last
        line would read as a step with fewer samples."""
        for option, name in (("--metrics", "m.csv"), ("--sample-log", "log")):
            m = self.mount("nearly-full-" + name.replace(".", "-"))
            m.fill()
            os.remove(os.path.join(m.path, "filler2"))
            filler = os.path.join(m.path, "filler")
            os.truncate(filler, max(0, os.path.getsize(filler) - 8192))  # two pages left
            out = os.path.join(m.path, name)
            r = mpirun(2, *self.base(), "--steps", 400, option, out)
            self.assertEqual(r.returncode, 3, r.stderr[-2000:])
            self.assertTrue(any(name in l and "No space left on device" in l for l in error_lines(r.stderr)),
                            r.stderr[-2000:])
            files = [out] if option == "--metrics" else [out + ".0", out + ".1"]
            lines = []
            for path in files:
                if not os.path.exists(path):
                    continue  # a rank whose first line did not fit leaves no file
                with open(path) as f:
                    text = f.read()
                self.assertTrue(text.endswith("\n"), f"{path}: the last line is whole: ...{text[-200:]!r}")
                lines += text.splitlines()
            self.assertGreater(len(lines), 20, f"{option}: the lines that fitted are kept")
            for line in lines:
                if option == "--metrics":
                    self.assertEqual(line.count(","), 11, f"a whole row: {line!r}")
                else:  # the step, then its samples
                    self.assertTrue(line.split()[0].isdigit(), f"a whole line: {line!r}")

    def test_an_output_naming_the_checkpoint_directory_fails_before_training(self):
        """Issue 44, item 6: --summary-json naming the checkpoint directory (made when training
        starts) trained to the end, then failed with exit 3."""
        ck = self.path("ck-as-output")
        for option in ("--summary-json", "--metrics"):
            for given in (ck, ck + "/"):
                met = self.path("before.csv")
                extra = ["--metrics", met] if option != "--metrics" else []
                r = mpirun(2, *self.base(), "--steps", 20, "--checkpoint-dir", ck, option, given, *extra)
                self.assert_one_error(r, 2, option, "is the --checkpoint-dir")
                self.assertFalse(os.path.exists(met) and self.metrics_rows(met) > 0, "no step was trained")


class ConfigFile(Workdir):
    """Defect 7: a misspelt key, a line without '=' or a broken [section were ignored."""

    def config(self, name, text):
        path = self.path(name)
        with open(path, "w") as f:
            f.write(f'data = "{self.train}"\nlayers = "8,16,4"\nsteps = 2\nquiet = true\n' + text)
        return path

    def test_bad_lines_are_errors_naming_file_and_line(self):
        for name, text, needles in (
                ("typo.toml", "global-bacth = 64\n", ["line 5", "global-bacth", "did you mean 'global-batch'"]),
                ("noeq.toml", "# fine\nglobal-batch 64\n", ["line 6", "not 'key = value'"]),
                ("section.toml", "[schedule\nglobal-batch = 64\n", ["line 5", "broken section header"]),
                ("other.toml", "[schedule]\nglobal-batch = 64\n", ["line 5", "section [schedule]"])):
            cfg = self.config(name, text)
            r = mpirun(2, "--config", cfg)
            self.assert_one_error(r, 2, name, *needles)

    def test_a_bad_value_or_a_duplicate_key_names_the_file_and_line(self):
        """Issue 44, item 7: these named no file or line, and a duplicate read "'64,32' is not
        a number" (CLI11 joined the two values)."""
        cfg = self.config("dup.toml", "global-batch = 64\nglobal-batch = 32\n")
        self.assert_one_error(mpirun(2, "--config", cfg), 2, "dup.toml", "line 6", "'global-batch' is set twice",
                              "line 5")
        cfg = self.config("badvalue.toml", "global-batch = \"sixty\"\n")
        self.assert_one_error(mpirun(2, "--config", cfg), 2, "badvalue.toml", "line 5", "--global-batch",
                              "'sixty' is not a number")
        r = mpirun(2, "--config", cfg, "--global-batch", 64)  # the command line's value wins
        self.assertEqual(r.returncode, 0, r.stderr[-2000:])

    def test_a_removed_option_fails_with_one_line_saying_it_is_gone(self):
        """--prefetch-steps did nothing and is gone: on the command line, in a config file or
        from the environment it ends the run with one line (exit 2); --help no longer lists it."""
        cfg = self.config("gone.toml", "prefetch-steps = 2\n")
        for args, env in ((["--prefetch-steps", 2], None), (["--config", cfg], None),
                          ([], dict(ENV, ANTDT_PREFETCH_STEPS="2"))):
            with self.subTest(args=args, env=env is not None):
                r = run([TRAIN, *self.base(), "--steps", 1, *args], env=env)
                self.assert_one_error(r, 2, "--prefetch-steps is gone", "positional")
        self.assertNotIn("prefetch", run([TRAIN, "--help"]).stdout)
        r = run([os.path.join(BUILD, "apps", "antdt-sim"), "--prefetch-steps", 2])
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("--prefetch-steps is gone", r.stderr)

    def test_a_good_file_still_runs(self):
        js = self.path("cfg.json")
        cfg = self.config("good.toml", f'# a comment\n\nglobal-batch = 24\nsummary-json = "{js}"\n'
                          'emulate-speed = [1, 0.5]\n')
        r = mpirun(2, "--config", cfg)
        self.assertEqual(r.returncode, 0, r.stderr)
        s = self.summary(js)
        self.assertEqual(s["samples"], 2 * 24)
        self.assertEqual(s["emulated_speeds"], [1, 0.5])


class Schedule(Workdir):
    """Defect 8: B > N repeated samples within a step; B < ranks left a rank idle."""

    def test_a_batch_larger_than_the_data_is_refused(self):
        r = mpirun(2, *self.base(), "--steps", 2, "--global-batch", self.samples + 1)
        self.assert_one_error(r, 2, "--global-batch 1201", f"{self.samples} samples")

    def test_a_batch_smaller_than_the_ranks_is_refused(self):
        r = mpirun(3, *self.base(), "--steps", 2, "--global-batch", 2)
        self.assert_one_error(r, 2, "--global-batch 2", "3 ranks")


class Messages(Workdir):
    """Defect 9: 300-digit ranges, one line per rank plus an abort banner, shape mismatches
    without the widths, truncated files not called truncated, eval errors without the file."""

    def test_a_huge_label_is_named_as_the_cause_of_a_huge_model(self):
        """Issue 44, item 7: a label of 2,000,000,000 was reported as "the model (--hidden) needs
        9082 GiB", which sent a user to the layers rather than the labels."""
        data = self.path("huge-label.h5")
        r = run([DATAGEN, "-o", data, "--samples", 200, "--dim", 8, "--classes", 4, "--seed", 3])
        self.assertEqual(r.returncode, 0, r.stderr)
        offset = labels_offset(data)
        with open(data, "r+b") as f:
            raw = bytearray(f.read())
            # No num_classes attribute (as in the probe's file): the largest label sets the classes.
            at = raw.find(b"num_classes")
            self.assertGreater(at, 0, "antdt-datagen writes the attribute")
            raw[at:at + 11] = b"antdt_other"
            raw[offset + 7 * 4:offset + 8 * 4] = struct.pack("<i", 2_000_000_000)
            f.seek(0)
            f.write(raw)
        r = run([TRAIN, "--data", data, "--hidden", 16, "--steps", 2, "--global-batch", 64])
        self.assert_one_error(r, 2, "8,16,2000000001", "2000000001 classes", "largest label", "check the labels")

    def test_log_level_error_prints_no_info_line(self):
        """Issue 44, item 7: --log-level error still printed the "device:" line, logged before the
        level was set."""
        r = mpirun(2, *self.base(), "--steps", 2, "--log-level", "error")
        self.assertEqual(r.returncode, 0, r.stderr[-2000:])
        self.assertEqual([l for l in r.stderr.splitlines() if l.startswith("[antdt")], [], r.stderr[-2000:])

    def test_bad_numbers_print_their_real_bounds(self):
        for args, needle in ((["--global-batch", 0], ">= 1"), (["--lr", 0], "> 0"), (["--reply-lag", 2], "[0, 1]"),
                             (["--checkpoint-keep", 0], "[1, 1000]"), (["--momentum", 2], "[0, 1]")):
            r = run([TRAIN, "--steps", 1, *args])
            line = self.assert_one_error(r, 2, str(args[0]), needle)
            self.assertLess(len(line), 160, line)
            self.assertNotRegex(line, r"\d{20}")

    def test_a_number_too_large_for_its_type_is_named_not_clamped(self):
        r = run([TRAIN, "--steps", 1, "--global-batch", "99999999999999999999"])
        line = self.assert_one_error(r, 2, "--global-batch", "99999999999999999999 is too large")
        self.assertNotIn("not >=", line)

    def test_an_error_every_rank_meets_is_printed_once_without_an_abort(self):
        for args in (["--data", self.path("nope.h5"), "--steps", 1],  # found by every rank
                     [*self.base(), "--steps", 1, "--emulate-speed", "1,1"]):  # a Session option
            r = mpirun(3, *args)
            self.assert_one_error(r, 2)
            self.assertNotIn("MPI_ABORT", r.stderr)

    def test_a_truncated_data_file_is_called_truncated(self):
        cut = self.path("cut.h5")
        shutil.copy(self.train, cut)
        os.truncate(cut, os.path.getsize(cut) // 2)
        r = mpirun(2, "--data", cut, "--steps", 1, "--global-batch", 40)
        self.assert_one_error(r, 2, "cut.h5", "truncated")

    def test_eval_errors_name_the_file(self):
        wide = self.path("wide.h5")
        self.assertEqual(run([DATAGEN, "-o", wide, "--samples", 50, "--dim", 9, "--classes", 4]).returncode, 0)
        r = mpirun(2, *self.base(), "--steps", 1, "--eval-data", wide)
        self.assert_one_error(r, 2, "wide.h5", "9 features", "train.h5", "8")

    def test_a_shape_mismatch_on_resume_shows_both_shapes(self):
        d = self.path("shape")
        self.assertEqual(mpirun(2, *self.base(), "--steps", 2, "--checkpoint-dir", d).returncode, 0)
        r = mpirun(2, *self.base(), "--layers", "8,32,4", "--steps", 4, "--checkpoint-dir", d, "--resume")
        self.assert_one_error(r, 2, "shape", "8,16,4", "8,32,4")


class ResumeFromDamagedCheckpoint(Workdir):
    """A hostile probe flipped single bits in the newest checkpoint: in 2 of 34 files HDF5
    corrupted the heap while parsing the damaged metadata, and the job fell back correctly,
    trained to the end and then died of it (SIGSEGV in MPI at exit, or munmap_chunk() inside the
    check itself on 1 rank). A checkpoint now carries a checksum of its bytes that is checked
    before HDF5 opens it. Here one bit is flipped at 256 offsets spread evenly over the newest
    checkpoint plus 64 random ones (fixed seed), each file checked by a resume's own choice of
    checkpoint in a process of its own (antdt-checkpoint-probe), and 16 of them by a real
    antdt-train --resume (on 1 and 2 ranks): every one falls back to the older checkpoint, none
    crashes. With both checkpoints damaged, the resume is exit 2 and one line."""

    PROBE = os.path.join(BUILD, "tests", "checkpoint", "antdt-checkpoint-probe")
    EVEN, RANDOM, TRAINED = 256, 64, 16

    def resume(self, d, np=1):
        js = os.path.join(d, "..", os.path.basename(d) + ".json")
        r = mpirun(np, *self.base(), "--steps", 4, "--checkpoint-every", 2, "--checkpoint-dir", d, "--resume",
                   "--summary-json", js)
        return r, js

    def test_one_flipped_bit_anywhere_falls_back_and_never_crashes(self):
        d = self.path("flips")
        r = mpirun(2, *self.base(), "--steps", 4, "--checkpoint-every", 2, "--checkpoint-dir", d)
        self.assertEqual(r.returncode, 0, r.stderr)
        older, newest = (os.path.join(d, n) for n in ("ckpt-00000002.h5", "ckpt-00000004.h5"))
        self.assertTrue(os.path.exists(older) and os.path.exists(newest), os.listdir(d))
        with open(newest, "rb") as f:
            pristine = f.read()
        size = len(pristine)
        rng = random.Random(20240611)
        flips = [(i * size // self.EVEN, rng.randrange(8)) for i in range(self.EVEN)]
        flips += [(rng.randrange(size), rng.randrange(8)) for _ in range(self.RANDOM)]
        flips.append((size - 1, 7))  # the very last byte

        def flipped(offset, bit):
            damaged = bytearray(pristine)
            damaged[offset] ^= 1 << bit
            return bytes(damaged)

        outcomes = collections.Counter()
        for offset, bit in flips:
            with open(newest, "wb") as f:
                f.write(flipped(offset, bit))
            p = run([self.PROBE, d], timeout=60)
            where = f"bit {bit} of byte {offset} of {size}: exit {p.returncode}\n{p.stderr}"
            outcomes[p.returncode] += 1
            self.assertEqual(p.returncode, 0, where)
            self.assertEqual(p.stdout.strip(), older, "fell back to the older checkpoint; " + where)
            self.assertIn("skipping invalid checkpoint", p.stderr, where)
            self.assertIn("ckpt-00000004.h5", p.stderr, where)
        with open(newest, "wb") as f:
            f.write(pristine)
        p = run([self.PROBE, d], timeout=60)
        self.assertEqual((p.returncode, p.stdout.strip()), (0, newest), "the intact file is chosen: " + p.stderr)

        # Real resumes: every 20th flip on 1 rank, a few on 2 (where the crash came at exit).
        for n, (offset, bit) in enumerate(flips[::len(flips) // self.TRAINED][:self.TRAINED]):
            copy = self.path(f"flip-{n}")
            shutil.copytree(d, copy)
            with open(os.path.join(copy, "ckpt-00000004.h5"), "wb") as f:
                f.write(flipped(offset, bit))
            r, js = self.resume(copy, np=2 if n % 4 == 0 else 1)
            where = f"bit {bit} of byte {offset}: exit {r.returncode}\n{r.stderr}"
            self.assertEqual(r.returncode, 0, where)
            self.assertEqual(self.summary(js)["steps"], 2, "resumed at step 2, the older checkpoint; " + where)
            self.assertIn("skipping invalid checkpoint", r.stderr, where)

        # Both damaged: no checkpoint to resume from, exit 2 and one line.
        copy = self.path("both")
        shutil.copytree(d, copy)
        for name, (offset, bit) in (("ckpt-00000004.h5", flips[7]), ("ckpt-00000002.h5", flips[200])):
            path = os.path.join(copy, name)
            with open(path, "rb") as f:
                damaged = bytearray(f.read())
            damaged[min(offset, len(damaged) - 1)] ^= 1 << bit
            with open(path, "wb") as f:
                f.write(damaged)
        r, _ = self.resume(copy, np=2)
        self.assert_one_error(r, 2, "ckpt-00000004.h5", "restore an older checkpoint")
        print(f"{len(flips)} flips of a {size}-byte checkpoint, exit codes {dict(outcomes)}", file=sys.stderr)


class DemoScript(unittest.TestCase):
    """Defect 11: scripts/demo.sh pasted ANTDT_DEMO_RANKS into Python and ANTDT_DEMO_SAMPLES into
    shell arithmetic, so environment values ran as code."""

    def test_environment_values_never_run_as_code(self):
        out = tempfile.mkdtemp(prefix="antdt-demo-env-")
        self.addCleanup(shutil.rmtree, out, True)
        marker = os.path.join(out, "ran")
        demo = os.path.join(SOURCE, "scripts", "demo.sh")
        for var, value in (("ANTDT_DEMO_RANKS", f'1)+__import__("os").system("touch {marker}")+(1'),
                           ("ANTDT_DEMO_SAMPLES", f"a[$(touch {marker})]"),
                           ("ANTDT_DEMO_SAMPLES", "16384; touch " + marker)):
            r = run([demo, os.path.join(out, "o")], env=dict(ENV, ANTDT_BUILD_DIR=BUILD, **{var: value}), timeout=600)
            self.assertEqual(r.returncode, 2, r.stdout[-2000:] + r.stderr[-2000:])
            self.assertIn(var, r.stderr)
            self.assertFalse(os.path.exists(marker), f"{var} ran as code")


class LayersFromData(Workdir):
    """Defect 12: --layers defaulted to 32,64,10, so a first run on one's own data failed."""

    def test_a_first_run_on_ones_own_data_takes_its_widths_from_the_data(self):
        mine = self.path("mine.h5")
        r = run([DATAGEN, "-o", mine, "--samples", 600, "--dim", 64, "--classes", 5])
        self.assertEqual(r.returncode, 0, r.stderr)
        js = self.path("mine.json")
        r = mpirun(2, "--data", mine, "--steps", 3, "--global-batch", 32, "--quiet", "--summary-json", js)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(error_lines(r.stderr), [])
        self.assertEqual(self.summary(js)["model_layers"], [64, 64, 5], "one hidden layer of 64 by default")
        r = mpirun(2, "--data", mine, "--steps", 3, "--global-batch", 32, "--quiet", "--hidden", "32,16",
                   "--summary-json", js)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(self.summary(js)["model_layers"], [64, 32, 16, 5])
        r = mpirun(2, "--data", mine, "--steps", 1, "--global-batch", 32, "--layers", "8,16,4")
        self.assert_one_error(r, 2, "--layers 8,16,4", "64 features")
        r = mpirun(2, "--data", mine, "--steps", 1, "--layers", "64,5", "--hidden", "8")
        self.assert_one_error(r, 2, "--layers", "--hidden")

    def test_synthetic_data_keeps_working_defaults(self):
        js = self.path("synthetic.json")
        r = mpirun(2, "--steps", 2, "--quiet", "--summary-json", js)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(self.summary(js)["model_layers"], [32, 64, 10])
        r = mpirun(2, "--steps", 2, "--quiet", "--synthetic-dim", 6, "--synthetic-classes", 3, "--summary-json", js)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(self.summary(js)["model_layers"], [6, 64, 3])


if __name__ == "__main__":
    unittest.main(verbosity=2)
