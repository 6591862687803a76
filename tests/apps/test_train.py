#!/usr/bin/env python3
"""End-to-end tests of antdt-train and antdt-datagen, run by ctest.

    python3 test_train.py BUILD_DIR SOURCE_DIR [unittest args, e.g. TrainCli.test_help]

Each test launches the real apps with mpirun (oversubscribed, as root) on small data and
asserts on exit codes, messages and the --summary-json / --metrics / --timeline files.
"""
import csv
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import unittest

BUILD = os.path.abspath(sys.argv[1])
SOURCE = os.path.abspath(sys.argv[2])
del sys.argv[1:3]
TRAIN = os.path.join(BUILD, "apps", "antdt-train")
# antdt-train linked against the emulated CUDA device (tests/compute/cuda_emulation), CUDA builds only.
TRAIN_EMULATED_CUDA = os.path.join(BUILD, "tests", "compute", "cuda_emulation", "antdt-train-emulated-cuda")
DATAGEN = os.path.join(BUILD, "apps", "antdt-datagen")
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMPI_MCA_rmaps_base_oversubscribe="1", ANTDT_LOG_LEVEL="warn")


def run(cmd, timeout=240, env=None):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env or ENV)


def mpirun(np, *args, timeout=240, env=None, train=TRAIN):
    return run(["mpirun", "-np", str(np), train, *map(str, args)], timeout=timeout, env=env)


def own_cpu_quota():
    """Whether this process's cgroup sets a CPU quota (v1 cpu.cfs_quota_us, v2 cpu.max); its own
    cgroup only, where antdt also reads its ancestors'."""
    try:
        with open("/proc/self/cgroup") as f:
            lines = f.read().splitlines()
    except OSError:
        return False
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if "cpu" in controllers.split(","):
            for mount in ("/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpu,cpuacct"):
                try:
                    with open(os.path.join(mount + path, "cpu.cfs_quota_us")) as f:
                        return int(f.read()) > 0
                except (OSError, ValueError):
                    pass
        elif controllers == "":
            try:
                with open(os.path.join("/sys/fs/cgroup" + path, "cpu.max")) as f:
                    return not f.read().startswith("max")
            except OSError:
                pass
    return False


class Workdir(unittest.TestCase):
    samples = 1200

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="antdt-apps-")
        cls.train = os.path.join(cls.dir, "train.h5")
        cls.eval = os.path.join(cls.dir, "eval.h5")
        r = run([DATAGEN, "-o", cls.train, "--samples", str(cls.samples), "--dim", "8", "--classes", "4",
                 "--eval-output", cls.eval, "--eval-samples", "300", "--seed", "3"])
        assert r.returncode == 0, r.stderr

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir, ignore_errors=True)

    def base(self):
        return ["--data", self.train, "--layers", "8,16,4", "--global-batch", "40", "--quiet"]

    def summary(self, path):
        with open(path) as f:
            return json.load(f)


class TrainCli(Workdir):
    def test_help_documents_every_option(self):
        r = run([TRAIN, "--help"])
        self.assertEqual(r.returncode, 0, r.stderr)
        for opt in ["--data", "--eval-data", "--global-batch", "--steps", "--epochs", "--policy",
                    "--emulate-speed", "--emulate-transient", "--backup-workers", "--checkpoint-dir",
                    "--checkpoint-every", "--resume", "--summary-json", "--timeline", "--metrics", "--config"]:
            self.assertIn(opt, r.stdout)
        self.assertIn("ANTDT_GLOBAL_BATCH", r.stdout, "every option names its environment variable")

    def assert_usage_error(self, r, needle):
        self.assertEqual(r.returncode, 2, f"stdout={r.stdout}\nstderr={r.stderr}")
        lines = [l for l in r.stderr.strip().splitlines() if "error" in l]
        self.assertEqual(len(lines), 1, r.stderr)
        self.assertIn(needle, lines[0])

    def test_bad_values_exit_2_with_one_line(self):
        self.assert_usage_error(run([TRAIN, "--global-batch", "0", "--steps", "1"]), "global-batch")
        self.assert_usage_error(run([TRAIN, "--policy", "fastest", "--steps", "1"]), "policy")
        self.assert_usage_error(run([TRAIN, "--steps", "1", "--emulate-speed", "1,x"]), "speed")
        self.assert_usage_error(run([TRAIN, "--steps", "1", "--emulate-transient", "0.1,3"]), "transient")
        self.assert_usage_error(run([TRAIN, "--global-batch", "8"]), "--steps or --epochs")
        self.assert_usage_error(run([TRAIN, "--steps", "1", "--resume"]), "--checkpoint-dir")
        self.assert_usage_error(run([TRAIN, "--steps", "1", "--no-such-option"]), "no-such-option")
        self.assert_usage_error(run([TRAIN, "--steps", "1", "--policy", "nd", "--backup-workers", "1"]),
                                "--backup-workers 1 leaves no rank")

    def test_bad_values_on_many_ranks_exit_2(self):
        r = mpirun(3, "--steps", "1", "--emulate-speed", "1,1")  # 2 speeds for 3 ranks
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("3 ranks", r.stderr)

    def test_bad_data_file_exit_2_naming_file(self):
        missing = os.path.join(self.dir, "nope.h5")
        r = mpirun(2, "--data", missing, "--steps", "1", "--layers", "8,4")
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("nope.h5", r.stderr)
        r = mpirun(2, *self.base(), "--steps", "1", "--layers", "9,4")
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("8 features", r.stderr)

    def test_config_file_and_environment(self):
        # Precedence (CLI11): command line > config file > ANTDT_* environment.
        cfg = os.path.join(self.dir, "run.toml")
        out = os.path.join(self.dir, "cfg.json")
        with open(cfg, "w") as f:
            f.write(f'data = "{self.train}"\nlayers = "8,16,4"\nsteps = 3\npolicy = "static"\n'
                    f'summary-json = "{out}"\nquiet = true\n')
        env = dict(ENV, ANTDT_STEPS="5", ANTDT_GLOBAL_BATCH="24")
        r = mpirun(2, "--config", cfg, env=env)
        self.assertEqual(r.returncode, 0, r.stderr)
        s = self.summary(out)
        self.assertEqual(s["policy"], "static")
        self.assertEqual(s["steps"], 3, "the config file wins over the environment")
        self.assertEqual(s["samples"], 3 * 24, "ANTDT_GLOBAL_BATCH applies where nothing else sets it")
        r = mpirun(2, "--config", cfg, "--steps", "2", env=env)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(self.summary(out)["steps"], 2, "the command line wins over both")

    def test_bad_config_value_exit_2(self):
        cfg = os.path.join(self.dir, "bad.toml")
        with open(cfg, "w") as f:
            f.write("global-batch = -3\nsteps = 1\n")
        r = run([TRAIN, "--config", cfg])
        self.assertEqual(r.returncode, 2, r.stderr)


class TrainRuns(Workdir):
    def test_fixed_split_runs_as_given_and_only_under_static(self):
        js = os.path.join(self.dir, "fixed.json")
        r = mpirun(2, *self.base(), "--steps", "6", "--policy", "static", "--fixed-split", "30,10",
                   "--summary-json", js)
        self.assertEqual(r.returncode, 0, r.stderr)
        s = self.summary(js)
        self.assertEqual(s["final_split"], [30, 10])
        self.assertEqual(s["plan_changes"], 0)
        self.assertEqual(s["samples"], 6 * 40)
        for bad in (["--policy", "dd", "--fixed-split", "30,10"],      # dd plans its own split
                    ["--policy", "static", "--fixed-split", "30,9"],   # not the global batch
                    ["--policy", "static", "--fixed-split", "40"],     # one batch for two ranks
                    ["--policy", "static", "--fixed-split", "30,x"]):
            r = mpirun(2, *self.base(), "--steps", "2", *bad)
            self.assertEqual(r.returncode, 2, (bad, r.stderr))
            self.assertIn("split", r.stderr, bad)

    def test_summary_metrics_timeline_complete(self):
        js, met, tl = (os.path.join(self.dir, n) for n in ("s.json", "m.csv", "t.json"))
        r = mpirun(3, *self.base(), "--steps", "12", "--policy", "dd", "--emulate-speed", "1,1,0.5",
                   "--virtual-device", "0.0002", "--eval-data", self.eval, "--eval-every", "6",
                   "--summary-json", js, "--metrics", met, "--timeline", tl)
        self.assertEqual(r.returncode, 0, r.stderr)
        s = self.summary(js)
        for key in ["ranks", "policy", "emulated_speeds", "samples", "wall_seconds", "throughput",
                    "rank_throughput", "ideal_throughput", "efficiency", "plan_changes",
                    "duplicated_samples", "missing_samples", "final_loss", "eval_accuracy"]:
            self.assertIn(key, s)
        self.assertEqual(s["ranks"], 3)
        self.assertEqual(s["emulated_speeds"], [1, 1, 0.5])
        self.assertEqual(s["samples"], 12 * 40)
        self.assertEqual(len(s["rank_throughput"]), 3)
        self.assertAlmostEqual(s["ideal_throughput"], sum(s["rank_throughput"]), places=3)
        self.assertGreater(s["efficiency"], 0.0)
        self.assertLessEqual(s["efficiency"], 1.0, "the ideal is made of the same compute as the wall time")
        self.assertIn("model_error_median", s)
        self.assertGreaterEqual(s["model_error_median"], 0.0)
        with open(met) as f:
            rows = list(csv.DictReader(f))
        self.assertEqual(len(rows), 12 * 3, "one metrics row per step and rank")
        self.assertEqual(sum(int(r["samples"]) for r in rows), 12 * 40)
        with open(tl) as f:
            trace = json.load(f)  # the Chrome trace's JSON array form
        spans = [e for e in trace if e.get("ph") == "X"]
        for rank in range(3):
            steps = {e["args"]["step"] for e in spans if e["tid"] == rank and e["name"] == "compute"}
            self.assertEqual(steps, set(range(12)), f"rank {rank} has a compute span for every step")
        self.assertTrue(any(e.get("cat") == "plan" for e in trace))

    def test_epochs_cover_every_sample_once(self):
        js, jl = os.path.join(self.dir, "ep.json"), os.path.join(self.dir, "ep.jsonl")
        r = mpirun(4, *self.base(), "--epochs", "2", "--policy", "dd", "--emulate-speed", "1,1,1,0.33",
                   "--virtual-device", "0.0001", "--read-mode", "collective", "--summary-json", js, "--metrics", jl)
        self.assertEqual(r.returncode, 0, r.stderr)
        s = self.summary(js)
        with open(jl) as f:
            rows = [json.loads(line) for line in f]
        self.assertEqual(len(rows), 4 * s["steps"], "JSONL metrics: one object per step and rank")
        self.assertEqual(sum(row["samples"] for row in rows), 2 * self.samples)
        self.assertEqual(s["samples"], 2 * self.samples)
        self.assertEqual([e["committed"] for e in s["epochs"]], [self.samples] * 2)
        self.assertEqual(s["duplicated_samples"], 0)
        self.assertEqual(s["missing_samples"], 0)

    def test_dd_beats_static_with_a_slow_rank(self):
        res = {}
        for policy in ("static", "dd"):
            js = os.path.join(self.dir, f"cmp-{policy}.json")
            r = mpirun(4, *self.base(), "--global-batch", "64", "--steps", "60", "--policy", policy,
                       "--emulate-speed", "1,1,1,0.33", "--virtual-device", "0.0005", "--min-interval", "5",
                       "--summary-json", js)
            self.assertEqual(r.returncode, 0, r.stderr)
            res[policy] = self.summary(js)
        self.assertGreater(res["dd"]["throughput"], 1.5 * res["static"]["throughput"], res)
        split = res["dd"]["final_split"]
        self.assertEqual(sum(split), 64)
        self.assertLess(split[3], split[0], "the slow rank gets the smaller share")


    def test_dd_replans_when_a_rank_turns_slow_mid_run(self):
        js = os.path.join(self.dir, "schedule.json")
        r = mpirun(2, *self.base(), "--global-batch", "64", "--steps", "80", "--policy", "dd", "--no-probe",
                   "--virtual-device", "0.0005", "--emulate-schedule", "1:20:0.33", "--min-interval", "5",
                   "--summary-json", js)
        self.assertEqual(r.returncode, 0, r.stderr)
        s = self.summary(js)
        self.assertIn("schedule 1:20:0.33", s["emulation"])
        self.assertEqual(s["plans"][0]["batch"], [32, 32], "equal speeds until step 20")
        changed = [p for p in s["plans"][1:] if p["effective_step"] > 20]
        self.assertTrue(changed, s["plans"])
        # Within its window, plus the step a plan takes to reach the ranks (the reply lag).
        self.assertLessEqual(changed[0]["effective_step"], 20 + 25 + 1, "dd re-plans within its window")
        self.assertLess(s["final_split"][1], s["final_split"][0] / 2, s["final_split"])

    def test_read_ahead_trains_exactly_as_reading_in_the_step(self):
        """--read-ahead reads the next step's samples during this one (off by default on the
        host). It must change no parameter, and the checkpoints and evaluations in between,
        which use HDF5 on the main thread, must wait for it."""
        args = [*self.base(), "--policy", "static", "--steps", "14", "--eval-data", self.eval, "--eval-every", "4",
                "--checkpoint-every", "5"]
        sums = {}
        for mode in ("on", "off", "auto"):
            js = os.path.join(self.dir, f"ra-{mode}.json")
            r = mpirun(3, *args, "--read-ahead", mode, "--checkpoint-dir", os.path.join(self.dir, f"ra-ck-{mode}"),
                       "--summary-json", js)
            self.assertEqual(r.returncode, 0, r.stderr)
            s = self.summary(js)
            self.assertEqual(s["read_ahead"], mode == "on", "auto is off on the host backend")
            if mode == "on":
                # Every step but the first was read ahead (a static plan: the guess is always right).
                self.assertAlmostEqual(s["read_ahead_fraction"], 13 / 14, places=6)
            else:
                self.assertEqual(s["read_ahead_fraction"], 0)
            sums[mode] = s["parameter_checksum"]
        self.assertEqual(sums["on"], sums["off"])
        self.assertEqual(sums["on"], sums["auto"])

    def test_read_ahead_under_dd_keeps_every_sample_once(self):
        js = os.path.join(self.dir, "ra-dd.json")
        loud = [a for a in self.base() if a != "--quiet"]
        r = mpirun(3, *loud, "--epochs", "2", "--policy", "dd", "--emulate-speed", "1,1,0.33",
                   "--virtual-device", "0.0002", "--min-interval", "4", "--no-probe", "--read-ahead", "on",
                   "--summary-json", js)
        self.assertEqual(r.returncode, 0, r.stderr)
        s = self.summary(js)
        self.assertRegex(r.stdout, r"read ahead \([0-9]+ % of rows ready\)")
        self.assertEqual([e["committed"] for e in s["epochs"]], [self.samples] * 2)
        self.assertEqual(s["duplicated_samples"], 0)
        self.assertEqual(s["missing_samples"], 0)
        self.assertGreaterEqual(s["plan_changes"], 1, "without the probe, dd moves off the equal split")
        self.assertGreater(s["read_ahead_fraction"], 0.8, "a plan change costs a partial read, not the read-ahead")

    def test_read_ahead_refuses_collective_reads(self):
        r = mpirun(2, *self.base(), "--steps", "2", "--read-ahead", "on", "--read-mode", "collective")
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("--read-ahead on needs --read-mode independent", r.stderr)


    def test_reduce_overlap_trains_exactly_as_the_fused_reduction(self):
        """--reduce-overlap starts each layer's all-reduce during the step's last micro-batch
        (auto: off on the host). Two ranks add two numbers either way, so the parameters must
        match bit for bit, with gradient accumulation (--micro-batch-cap 7 of a share of 20)."""
        args = [*self.base(), "--policy", "static", "--steps", "10", "--micro-batch-cap", "7"]
        sums = {}
        for mode in ("on", "off", "auto"):
            js = os.path.join(self.dir, f"ov-{mode}.json")
            r = mpirun(2, *args, "--reduce-overlap", mode, "--summary-json", js)
            self.assertEqual(r.returncode, 0, r.stderr)
            s = self.summary(js)
            self.assertEqual(s["reduce_overlap"], mode == "on", "auto is off on the host backend")
            self.assertEqual(s["samples"], 10 * 40)
            sums[mode] = s["parameter_checksum"]
        self.assertEqual(sums["on"], sums["off"])
        self.assertEqual(sums["on"], sums["auto"])


class Checkpoints(Workdir):
    def test_kill_and_resume_equals_uninterrupted(self):
        a_dir, b_dir = os.path.join(self.dir, "ck-a"), os.path.join(self.dir, "ck-b")
        args = [*self.base(), "--policy", "static", "--steps", "24", "--checkpoint-every", "5"]
        a = mpirun(4, *args, "--checkpoint-dir", a_dir, "--summary-json", os.path.join(self.dir, "a.json"))
        self.assertEqual(a.returncode, 0, a.stderr)
        b = mpirun(4, *args, "--checkpoint-dir", b_dir, "--fail-at-step", "13", "--fail-rank", "2")
        self.assertNotEqual(b.returncode, 0, "the killed run must fail")
        c = mpirun(4, *args, "--checkpoint-dir", b_dir, "--resume", "--summary-json", os.path.join(self.dir, "c.json"))
        self.assertEqual(c.returncode, 0, c.stderr)
        sa, sc = self.summary(os.path.join(self.dir, "a.json")), self.summary(os.path.join(self.dir, "c.json"))
        self.assertEqual(sa["parameter_checksum"], sc["parameter_checksum"], "resumed parameters differ")
        self.assertEqual(sa["samples"], sc["samples"])

    # The parameters of one fixed run (hashed with FNV-1a 64): 4 ranks, dd moving off the equal
    # split at step 9, emulated speeds on the virtual device, accumulation above a cap of 7, a
    # checkpoint every 10 steps, rank 2 killed at step 23 and the run resumed from step 20.
    # OpenBLAS is pinned to its SSE3 kernels so that the bits do not depend on which SIMD kernels
    # this CPU gets. Recorded again (it was 7a4cec8cccb7fa06 from commit f63f47d to 160c636) when
    # a step's samples became the data order's next B positions, shuffled within shards
    # (docs/dds.md): every step trains on other samples than under per-rank grants. The shuffle
    # is asked for explicitly, so that the checksum does not follow antdt-train's default.
    # Recorded again (it was 1287a6dcaecd65fa up to 3dd6433) when rank 0 moved off the critical
    # path (--reply-lag 1, docs/protocol.md): dd's plan, decided at step 7, takes effect at step
    # 9 instead of 8, so step 8 sums its gradient over the equal split's four slices instead of
    # dd's and rounds differently. With --reply-lag 0 the run is the former protocol, and its
    # checksum must still be the former one. The shards of 400 samples (10 global batches) were
    # antdt-train's default until the default became a full permutation of each epoch (issue 44,
    # item 10); they are given explicitly, so that the checksum still guards everything else.
    FIXED_RUN_CHECKSUM = "c3cc904468e36a44"
    FIXED_RUN_CHECKSUM_WITHOUT_LAG = "1287a6dcaecd65fa"

    def fixed_run(self, name, *extra):
        env = dict(ENV, OPENBLAS_CORETYPE="Prescott")
        d = os.path.join(self.dir, name)
        js = os.path.join(self.dir, name + ".json")
        args = [*self.base(), "--policy", "dd", "--no-probe", "--emulate-speed", "1,1,1,0.33", "--virtual-device",
                "0.0002", "--micro-batch-cap", "7", "--steps", "40", "--checkpoint-every", "10", "--min-interval", "4",
                "--shuffle-within-shard", "--shard-size", "400", "--checkpoint-dir", d, *extra]
        killed = mpirun(4, *args, "--fail-at-step", "23", "--fail-rank", "2", env=env)
        self.assertNotEqual(killed.returncode, 0, "the killed run must fail")
        r = mpirun(4, *args, "--resume", "--summary-json", js, env=env)
        self.assertEqual(r.returncode, 0, r.stderr)
        s = self.summary(js)
        self.assertEqual([p["batch"] for p in s["plans"]], [[12, 12, 12, 4]], "resumed under dd's plan")
        self.assertEqual(s["samples"], 40 * 40)
        return s["parameter_checksum"]

    def test_fixed_run_keeps_its_parameter_checksum(self):
        self.assertEqual(self.fixed_run("fixed"), self.FIXED_RUN_CHECKSUM)

    def test_fixed_run_without_the_reply_lag_keeps_the_former_checksum(self):
        self.assertEqual(self.fixed_run("fixed-lag0", "--reply-lag", "0"), self.FIXED_RUN_CHECKSUM_WITHOUT_LAG)

    def elastic(self, before, after):
        d = os.path.join(self.dir, f"el-{before}-{after}")
        js = os.path.join(d, "s.json")
        args = [*self.base(), "--policy", "dd", "--epochs", "2", "--checkpoint-every", "4", "--checkpoint-dir", d]
        b = mpirun(before, *args, "--fail-at-step", "20", "--fail-rank", "1")
        self.assertNotEqual(b.returncode, 0)
        c = mpirun(after, *args, "--resume", "--summary-json", js)
        self.assertEqual(c.returncode, 0, c.stderr)
        s = self.summary(js)
        self.assertEqual(s["ranks"], after)
        self.assertEqual(s["samples"], 2 * self.samples, "every sample of both epochs committed once")
        self.assertEqual([e["committed"] for e in s["epochs"]], [self.samples] * 2)
        self.assertEqual(s["duplicated_samples"], 0)
        self.assertEqual(s["missing_samples"], 0)
        self.assertEqual(len(s["final_split"]), after)
        self.assertEqual(sum(s["final_split"]), 40)

    def test_elastic_resume_4_to_3(self):
        self.elastic(4, 3)

    def test_elastic_resume_2_to_4(self):
        self.elastic(2, 4)

    def test_resume_a_finished_run_for_more_epochs(self):
        d, js = os.path.join(self.dir, "more"), os.path.join(self.dir, "more.json")
        args = [*self.base(), "--policy", "static", "--checkpoint-dir", d, "--resume", "--summary-json", js]
        r = mpirun(2, *args, "--epochs", "1")
        self.assertEqual(r.returncode, 0, r.stderr)
        r = mpirun(2, *args, "--epochs", "1")  # already done: nothing to do, still a clean exit
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(self.summary(js)["steps"], 0)
        r = mpirun(2, *args, "--epochs", "3")  # the new limit wins over the checkpoint's
        self.assertEqual(r.returncode, 0, r.stderr)
        s = self.summary(js)
        self.assertEqual(s["samples"], 3 * self.samples)
        self.assertEqual([e["committed"] for e in s["epochs"]], [self.samples] * 3)

    def test_resume_from_only_a_corrupt_checkpoint_is_a_clear_error(self):
        d = os.path.join(self.dir, "corrupt")
        r = mpirun(2, *self.base(), "--steps", "3", "--checkpoint-dir", d)
        self.assertEqual(r.returncode, 0, r.stderr)
        (ckpt,) = [f for f in os.listdir(d) if f.startswith("ckpt-")]
        path = os.path.join(d, ckpt)
        os.truncate(path, os.path.getsize(path) // 2)
        r = mpirun(2, *self.base(), "--steps", "6", "--checkpoint-dir", d, "--resume")
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn(ckpt, r.stderr, "the error names the file")
        self.assertIn("truncated", r.stderr)

    def test_resume_with_other_model_shape_is_a_clear_error(self):
        d = os.path.join(self.dir, "shape")
        r = mpirun(2, *self.base(), "--steps", "3", "--checkpoint-dir", d)
        self.assertEqual(r.returncode, 0, r.stderr)
        r = mpirun(2, *self.base(), "--layers", "8,32,4", "--steps", "6", "--checkpoint-dir", d, "--resume")
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("shape", r.stderr)


@unittest.skipUnless(os.path.exists(TRAIN_EMULATED_CUDA), "this build has no CUDA backend (ANTDT_ENABLE_CUDA=OFF)")
class EmulatedCuda(Workdir):
    """antdt-train with --device cuda on the emulated device: the CUDA model, the staged-MPI and
    NCCL reducers, checkpoints of device state, and dd on device timings, end to end. Device
    memory is inaccessible to host code there, so a host read of a device buffer crashes."""

    def cuda(self, np, devices, *args):
        env = dict(ENV, ANTDT_EMULATED_CUDA_DEVICES=str(devices))
        return mpirun(np, *args, "--device", "cuda", env=env, train=TRAIN_EMULATED_CUDA)

    def test_cuda_run_matches_host_run_with_either_reducer(self):
        args = [*self.base(), "--policy", "static", "--steps", "20", "--eval-data", self.eval]
        host_js = os.path.join(self.dir, "emu-host.json")
        r = mpirun(2, *args, "--device", "host", "--summary-json", host_js)
        self.assertEqual(r.returncode, 0, r.stderr)
        host = self.summary(host_js)
        for devices, reducer in ((1, "mpi"), (2, "nccl")):
            js = os.path.join(self.dir, f"emu-cuda-{devices}.json")
            r = self.cuda(2, devices, *args, "--summary-json", js)
            self.assertEqual(r.returncode, 0, r.stderr)
            s = self.summary(js)
            self.assertEqual(s["backend"], "cuda")
            self.assertIn("emulated CUDA device", s["device"])
            self.assertEqual(s["reducer"], reducer, "one device per process stages through MPI; one per rank uses NCCL")
            self.assertEqual(s["samples"], host["samples"])
            self.assertAlmostEqual(s["final_loss"], host["final_loss"], delta=1e-4 * abs(host["final_loss"]))
            self.assertAlmostEqual(s["eval_loss"], host["eval_loss"], delta=1e-4 * abs(host["eval_loss"]))
            # Rounding differs by ~1e-7, so at most a sample on a near-tie may flip.
            self.assertLessEqual(abs(s["eval_accuracy"] - host["eval_accuracy"]), 1.0 / 300 + 1e-9)

    def test_pinned_batches_train_exactly_as_pageable_ones(self):
        """Batches in page-locked memory (the default on a GPU) must give the same parameters
        bit for bit. The emulated device faults any host write to a pinned batch while its
        copy is in flight, so a reuse race fails this run. A refused pin (memlock limit) falls
        back to pageable memory with one warning."""
        args = [*self.base(), "--policy", "static", "--steps", "12", "--eval-data", self.eval, "--eval-every", "5"]
        sums = {}
        for name, extra, env in (("pinned", [], {}), ("pageable", ["--no-pin-memory"], {}),
                                 ("refused", [], {"ANTDT_EMULATED_CUDA_PIN_LIMIT": "0"})):
            js = os.path.join(self.dir, f"emu-pin-{name}.json")
            r = mpirun(2, *args, *extra, "--device", "cuda", "--summary-json", js, train=TRAIN_EMULATED_CUDA,
                       env=dict(ENV, ANTDT_EMULATED_CUDA_DEVICES="1", **env))
            self.assertEqual(r.returncode, 0, r.stderr)
            s = self.summary(js)
            self.assertEqual(s["reducer"], "mpi", "one device: staged through (pinned) host memory")
            self.assertEqual(s["pinned_batches"], name == "pinned", name)
            self.assertEqual("page-locking" in r.stderr, name == "refused", r.stderr)
            sums[name] = s["parameter_checksum"]
        self.assertEqual(sums["pinned"], sums["pageable"])
        self.assertEqual(sums["pinned"], sums["refused"])

    def test_read_ahead_is_on_by_default_on_a_gpu_and_changes_nothing(self):
        """On a GPU the host's cores are free while the device computes, so --read-ahead auto
        reads the next step's samples then, into a second pinned batch whose buffers are
        swapped in: same parameters bit for bit, and no host write into a batch whose copy
        to the device is in flight (the emulated device faults it)."""
        args = [*self.base(), "--policy", "static", "--steps", "12", "--eval-data", self.eval, "--eval-every", "5"]
        res = {}
        for mode in ("auto", "off"):
            js = os.path.join(self.dir, f"emu-ra-{mode}.json")
            r = self.cuda(2, 1, *args, "--read-ahead", mode, "--summary-json", js)
            self.assertEqual(r.returncode, 0, r.stderr)
            res[mode] = self.summary(js)
        self.assertTrue(res["auto"]["read_ahead"])
        self.assertTrue(res["auto"]["pinned_batches"])
        self.assertAlmostEqual(res["auto"]["read_ahead_fraction"], 11 / 12, places=6)
        self.assertFalse(res["off"]["read_ahead"])
        self.assertEqual(res["auto"]["parameter_checksum"], res["off"]["parameter_checksum"])

    def test_reduce_overlap_is_on_by_default_with_staged_mpi_and_changes_nothing(self):
        """On a GPU reduced through MPI, --reduce-overlap auto copies each finished layer to
        host memory behind its backward kernels and starts its all-reduce while the earlier
        layers compute. Same parameters bit for bit at 2 ranks. NCCL does not overlap: on
        warns and reduces after backward."""
        args = [*self.base(), "--policy", "static", "--steps", "12", "--micro-batch-cap", "8"]
        res = {}
        for name, devices, mode, extra in (("auto", 1, "auto", []), ("off", 1, "off", []), ("nccl", 2, "on", []),
                                           ("emulated", 1, "auto", ["--emulate-speed", "1,0.5"])):
            js = os.path.join(self.dir, f"emu-ov-{name}.json")
            r = self.cuda(2, devices, *[a for a in args if a != "--quiet"], *extra, "--reduce-overlap", mode,
                          "--summary-json", js)
            self.assertEqual(r.returncode, 0, r.stderr)
            res[name] = self.summary(js)
            self.assertEqual("does not overlap" in r.stderr, name == "nccl", r.stderr)
            self.assertEqual("overlapped with backward" in r.stdout, name == "auto", r.stdout)
        self.assertEqual(res["auto"]["reducer"], "mpi")
        self.assertTrue(res["auto"]["reduce_overlap"])
        self.assertFalse(res["off"]["reduce_overlap"])
        self.assertEqual(res["nccl"]["reducer"], "nccl")
        self.assertFalse(res["nccl"]["reduce_overlap"])
        self.assertFalse(res["emulated"]["reduce_overlap"], "auto leaves emulated stragglers' runs alone")
        self.assertEqual(res["auto"]["parameter_checksum"], res["off"]["parameter_checksum"])
        self.assertEqual(res["auto"]["parameter_checksum"], res["nccl"]["parameter_checksum"])

    def test_cuda_kill_and_resume_equals_uninterrupted(self):
        a_dir, b_dir = os.path.join(self.dir, "emu-ck-a"), os.path.join(self.dir, "emu-ck-b")
        args = [*self.base(), "--policy", "static", "--optimizer", "adam", "--lr", "0.01",
                "--steps", "16", "--checkpoint-every", "5"]
        a_js, c_js = os.path.join(self.dir, "emu-a.json"), os.path.join(self.dir, "emu-c.json")
        a = self.cuda(3, 3, *args, "--checkpoint-dir", a_dir, "--summary-json", a_js)
        self.assertEqual(a.returncode, 0, a.stderr)
        b = self.cuda(3, 3, *args, "--checkpoint-dir", b_dir, "--fail-at-step", "8", "--fail-rank", "1")
        self.assertNotEqual(b.returncode, 0, "the killed run must fail")
        c = self.cuda(3, 3, *args, "--checkpoint-dir", b_dir, "--resume", "--summary-json", c_js)
        self.assertEqual(c.returncode, 0, c.stderr)
        sa, sc = self.summary(a_js), self.summary(c_js)
        self.assertEqual(sa["parameter_checksum"], sc["parameter_checksum"],
                         "parameters and Adam state restored onto the device exactly")

    def test_cuda_dd_shifts_work_to_the_fast_rank(self):
        js = os.path.join(self.dir, "emu-dd.json")
        r = self.cuda(2, 2, *self.base(), "--global-batch", "64", "--steps", "40", "--policy", "dd",
                      "--emulate-speed", "1,0.33", "--virtual-device", "0.0005", "--min-interval", "5",
                      "--summary-json", js)
        self.assertEqual(r.returncode, 0, r.stderr)
        s = self.summary(js)
        self.assertEqual(sum(s["final_split"]), 64)
        self.assertGreater(s["final_split"][0], 2 * s["final_split"][1], s["final_split"])
        self.assertEqual(s["duplicated_samples"], 0)
        self.assertEqual(s["missing_samples"], 0)

    def test_overlapped_reduction_under_dd_keeps_every_sample_once(self):
        """--reduce-overlap on with dd moving work between ranks, and accumulation above the
        cap: uneven shares change from step to step, and each must still be reduced exactly."""
        js = os.path.join(self.dir, "emu-dd-ov.json")
        r = self.cuda(2, 1, *self.base(), "--global-batch", "64", "--epochs", "2", "--policy", "dd",
                      "--emulate-speed", "1,0.33", "--virtual-device", "0.0005", "--min-interval", "5",
                      "--micro-batch-cap", "12", "--reduce-overlap", "on", "--summary-json", js)
        self.assertEqual(r.returncode, 0, r.stderr)
        s = self.summary(js)
        self.assertTrue(s["reduce_overlap"])
        self.assertEqual(s["reducer"], "mpi")
        self.assertGreater(s["final_split"][0], 2 * s["final_split"][1], s["final_split"])
        self.assertEqual([e["committed"] for e in s["epochs"]], [self.samples] * 2)
        self.assertEqual(s["duplicated_samples"], 0)
        self.assertEqual(s["missing_samples"], 0)
        self.assertLess(s["final_loss"], 1.0, "it learns")


class Segments(Workdir):
    """Issue 24: a requeued job keeps its id, so %j paths do not change, and each segment's
    summary, metrics and timeline overwrote the one before (after a requeue of a finished job,
    summary-4.json said steps 0 and the metrics held only a header). Every segment's outputs must
    be kept, and the summary must say which figures are the segment's and which the run's."""

    def test_each_segment_keeps_its_outputs_and_tells_its_figures_from_the_runs(self):
        d = os.path.join(self.dir, "segments")
        os.makedirs(d)
        out = lambda name: os.path.join(d, name)  # noqa: E731
        env = dict(ENV, SLURM_JOB_ID="4")  # what a requeue keeps: the same %j
        args = [*self.base(), "--policy", "static", "--checkpoint-dir", out("ckpt"), "--checkpoint-every", "3",
                "--summary-json", out("summary-%j.json"), "--metrics", out("metrics-%j.csv"),
                "--timeline", out("timeline-%j.json"), "--sample-log", out("samples-%j")]
        r = mpirun(2, *args, "--steps", "6", env=env)  # segment 1: steps 0-5
        self.assertEqual(r.returncode, 0, r.stderr)
        loud = [a for a in args if a != "--quiet"]
        r = mpirun(3, *loud, "--steps", "10", "--resume", env=env)  # segment 2, on 3 ranks: steps 6-9
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("segment 2 of the run, resumed at step 6: steps 4, samples 160", r.stdout)
        self.assertIn("the run, every segment: steps 10, samples 400", r.stdout)
        r = mpirun(2, *args, "--steps", "10", "--resume", env=env)  # segment 3: the run is done
        self.assertEqual(r.returncode, 0, r.stderr)

        # Issue 44, items 7 and 8: %j is expanded in --sample-log too (it made a literal
        # samples-%j.0), and a resumed segment keeps the earlier segments' sample logs (every
        # rank opened its own with "w", so a requeue erased the audit of the steps before it).
        logs = {"": 2, ".seg1": 2, ".seg2": 3}  # the segment's mark: its ranks
        self.assertEqual(sorted(f for f in os.listdir(d) if f != "ckpt"),
                         sorted([f"{kind}-4{seg}.{ext}" for kind, ext in
                                 (("summary", "json"), ("metrics", "csv"), ("timeline", "json"))
                                 for seg in ("", ".seg1", ".seg2")] +
                                [f"samples-4{seg}.{rank}" for seg, ranks in logs.items() for rank in range(ranks)]))
        for seg, steps in {".seg1": range(0, 6), ".seg2": range(6, 10), "": range(0)}.items():
            logged = set()
            for rank in range(logs[seg]):
                with open(out(f"samples-4{seg}.{rank}")) as f:
                    logged |= {int(line.split()[0]) for line in f if line.strip()}
            self.assertEqual(logged, set(steps), f"samples-4{seg}.*: the steps of that segment")
        # (segment, ranks, first step, its steps, the run's steps after it)
        for name, (index, ranks, first, steps, run_steps) in {
                "summary-4.seg1.json": (1, 2, 0, 6, 6), "summary-4.seg2.json": (2, 3, 6, 4, 10),
                "summary-4.json": (3, 2, 10, 0, 10)}.items():
            s = self.summary(out(name))
            self.assertEqual(s["ranks"], ranks, name)
            self.assertEqual(s["segment"], {"index": index, "first_step": first, "steps": steps,
                                            "samples": steps * 40, "wall_seconds": s["wall_seconds"]}, name)
            self.assertEqual(s["run"], {"steps": run_steps, "samples": run_steps * 40, "epochs_completed": 0}, name)
            self.assertEqual(s["steps"], steps, f"{name}: the top-level steps are the segment's")
            self.assertEqual(s["samples"], run_steps * 40, f"{name}: the top-level samples are the run's")
        for name, (ranks, steps) in {"metrics-4.seg1.csv": (2, range(0, 6)), "metrics-4.seg2.csv": (3, range(6, 10)),
                                     "metrics-4.csv": (2, range(0))}.items():
            with open(out(name)) as f:
                rows = list(csv.DictReader(f))
            self.assertEqual(sorted((int(r["step"]), int(r["rank"])) for r in rows),
                             [(t, k) for t in steps for k in range(ranks)], f"{name}: one row per step and rank")
            self.assertEqual(sum(int(r["samples"]) for r in rows), 40 * len(steps), name)
        for name, steps in {"timeline-4.seg1.json": set(range(0, 6)), "timeline-4.seg2.json": set(range(6, 10)),
                            "timeline-4.json": set()}.items():
            with open(out(name)) as f:
                trace = json.load(f)
            self.assertEqual({e["args"]["step"] for e in trace if e.get("ph") == "X" and e["name"] == "compute"},
                             steps, name)

    def test_a_fresh_run_overwrites_and_counts_from_one(self):
        """Without --resume a run is a new one: its outputs replace the old ones, nothing is
        moved aside, and it is segment 1 again."""
        d = os.path.join(self.dir, "fresh")
        os.makedirs(d)
        js = os.path.join(d, "s.json")
        args = [*self.base(), "--policy", "static", "--checkpoint-dir", os.path.join(d, "ckpt"), "--summary-json", js]
        for _ in range(2):
            r = mpirun(2, *args, "--steps", "3", "--checkpoint-overwrite")
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(self.summary(js)["segment"]["index"], 1)
        self.assertEqual(sorted(os.listdir(d)), ["ckpt", "s.json"])


class WaitSpin(Workdir):
    """--wait-spin: how long a waiting rank polls before it naps. A rank that waits 12 ms a step for
    a slower one polls all of it by default (20 ms), and sleeps it away with 0; the maths is the
    same either way.

    What it saves in CPU time depends on what else the machine runs: a polling rank burns only the
    share of a core it gets (2.8 s against 0.9 over these 200 steps on an idle machine, 0.86
    against 0.74 once in a loaded CI run). So the test counts the sleeps themselves, the voluntary
    context switches (a nap gives up the core; polling, even when preempted, does not): about
    2,700 for the polling run and 18,000 for the napping one, on an idle machine and beside three
    busy loops alike."""

    def switches_and_checksum(self, *extra):
        out = os.path.join(self.dir, "spin-%s.json" % "-".join(map(str, extra)))
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        # Rank 0 computes 20 samples in 4 ms of virtual device, rank 1 in 16 ms: rank 0 waits 12 ms.
        r = mpirun(2, *self.base(), "--policy", "static", "--virtual-device", "0.0002", "--emulate-speed", "1,0.25",
                   "--steps", 200, "--summary-json", out, *extra)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        self.assertEqual(r.returncode, 0, r.stderr[-2000:])
        return after.ru_nvcsw - before.ru_nvcsw, self.summary(out)["parameter_checksum"]

    def test_no_spin_sleeps_the_waits_away_with_the_same_maths(self):
        if own_cpu_quota():
            self.skipTest("this test's own cgroup has a CPU quota: its ranks nap at any --wait-spin")
        polled, sum_polled = self.switches_and_checksum()
        napped, sum_napped = self.switches_and_checksum("--wait-spin", 0)
        # 200 waits of 12 ms, napped in steps of at most 0.2 ms: 60 naps a wait. Ten a wait, at least.
        self.assertGreater(napped - polled, 2000, "voluntary context switches: %d polling, %d napping" % (polled, napped))
        self.assertEqual(sum_polled, sum_napped)

    def test_a_rank_under_a_cpu_quota_naps_whatever_wait_spin_says(self):
        """Rank 1 in a cgroup of its own, its quota (0.9 of a core) below the CPUs it may run on, waits
        12 ms a step for rank 0 (rank 0 is the slow one here) and naps through it at the default
        --wait-spin, where it polls outside the cgroup; the maths is the same."""
        base = "/sys/fs/cgroup/cpu"
        if os.geteuid() != 0 or not os.access(os.path.join(base, "cgroup.procs"), os.W_OK):
            self.skipTest("needs root and the cgroup v1 cpu controller at " + base)
        if own_cpu_quota():
            self.skipTest("this test's own cgroup has a CPU quota: its ranks nap either way")
        cg = os.path.join(base, "antdt-test-wait-spin-%d" % os.getpid())
        os.mkdir(cg)
        try:
            for name, value in (("cpu.cfs_period_us", "100000"), ("cpu.cfs_quota_us", "90000")):
                with open(os.path.join(cg, name), "w") as f:
                    f.write(value)

            def switches_and_checksum(capped):
                out = os.path.join(self.dir, "quota-%d.json" % capped)
                args = [*self.base(), "--policy", "static", "--virtual-device", "0.0002", "--emulate-speed", "0.25,1",
                        "--steps", "200", "--summary-json", out]
                rank1 = ["bash", "-c", 'echo $$ > %s/cgroup.procs; exec "$0" "$@"' % cg] if capped else []
                before = resource.getrusage(resource.RUSAGE_CHILDREN)
                r = run(["mpirun", "-np", "1", TRAIN, *args, ":", "-np", "1", *rank1, TRAIN, *args])
                after = resource.getrusage(resource.RUSAGE_CHILDREN)
                self.assertEqual(r.returncode, 0, r.stderr[-2000:])
                return after.ru_nvcsw - before.ru_nvcsw, self.summary(out)["parameter_checksum"]

            free, sum_free = switches_and_checksum(False)
            capped, sum_capped = switches_and_checksum(True)
            self.assertGreater(capped - free, 2000, "voluntary context switches: %d free, %d capped" % (free, capped))
            self.assertEqual(sum_free, sum_capped)
        finally:
            with open(os.path.join(cg, "cpu.cfs_quota_us"), "w") as f:
                f.write("-1")
            os.rmdir(cg)

    def test_out_of_range_is_a_usage_error(self):
        r = mpirun(1, *self.base(), "--epochs", 1, "--wait-spin", 2)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("--wait-spin", r.stderr)


class MainJob(unittest.TestCase):
    def test_readme_main_job_small(self):
        out = tempfile.mkdtemp(prefix="antdt-demo-")
        env = dict(ENV, ANTDT_DEMO_SAMPLES="2048", ANTDT_BUILD_DIR=BUILD)
        r = run([os.path.join(SOURCE, "scripts", "demo.sh"), out], timeout=600, env=env)
        self.assertEqual(r.returncode, 0, r.stdout[-3000:] + r.stderr[-3000:])
        with open(os.path.join(out, "static.json")) as f:
            s = json.load(f)
        with open(os.path.join(out, "dd.json")) as f:
            d = json.load(f)
        self.assertIn("dd / static throughput", r.stdout)
        self.assertGreater(d["throughput"], s["throughput"])
        self.assertGreater(d["eval_accuracy"], 0.5)
        for x in (s, d):
            self.assertEqual(x["duplicated_samples"], 0)
            self.assertEqual(x["missing_samples"], 0)
        shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    unittest.main(verbosity=2)
