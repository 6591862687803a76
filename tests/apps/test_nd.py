#!/usr/bin/env python3
"""The non-dedicated mode (--policy nd) end to end, run by ctest: pooled steps
under transient slowdowns (virtual device), and kill-restart.

    python3 test_nd.py BUILD_DIR SOURCE_DIR [unittest args]
"""
import csv
import json
import os
import shutil
import subprocess
import tempfile
import unittest

from harness import DATAGEN, ENV, TRAIN



def mpirun(np, *args, timeout=300, env=None):
    return subprocess.run(["mpirun", "-np", str(np), TRAIN, *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, env=env or ENV)


class Data(unittest.TestCase):
    samples = 1200

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="antdt-nd-")
        cls.train = os.path.join(cls.dir, "train.h5")
        cls.eval = os.path.join(cls.dir, "eval.h5")
        r = subprocess.run([DATAGEN, "-o", cls.train, "--samples", str(cls.samples), "--dim", "8", "--classes", "4",
                            "--eval-output", cls.eval, "--eval-samples", "300", "--seed", "3"],
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stderr

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir, ignore_errors=True)

    def summary(self, path):
        with open(path) as f:
            return json.load(f)

    def base(self):
        return ["--data", self.train, "--layers", "8,16,4", "--quiet"]


class PooledSteps(Data):
    def run_policy(self, policy, *extra):
        js, met = os.path.join(self.dir, f"{policy}.json"), os.path.join(self.dir, f"{policy}.csv")
        r = mpirun(5, *self.base(), "--global-batch", "100", "--epochs", "3", "--policy", policy,
                   "--virtual-device", "0.001", "--emulate-transient", "0.1,3,1", "--emulate-seed", "5",
                   "--eval-data", self.eval, "--summary-json", js, "--metrics", met, *extra)
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(met) as f:
            rows = list(csv.DictReader(f))
        return self.summary(js), rows

    def test_steps_do_not_wait_for_a_slowed_rank_and_every_sample_is_used_once(self):
        nd, nd_rows = self.run_policy("nd", "--backup-workers", "1")
        dd, _ = self.run_policy("dd")
        for s in (nd, dd):
            self.assertEqual([e["committed"] for e in s["epochs"]], [self.samples] * 3)
            self.assertEqual((s["duplicated_samples"], s["missing_samples"]), (0, 0))
        # Each step of nd did exactly B = 100 samples, whoever did them; only the last steps,
        # when the data runs out and a rank's claim cap or grants stop it, may do fewer.
        by_step = {}
        for row in nd_rows:
            by_step.setdefault(int(row["step"]), []).append(int(row["samples"]))
        totals = [sum(v) for k, v in sorted(by_step.items())]
        self.assertEqual(sum(totals), 3 * self.samples)
        self.assertTrue(all(n == 100 for n in totals[:-2]), totals)
        # On the virtual device a rank's compute per sample is c / speed x its slowdown, so a
        # slowed rank (3x) is seen in the metrics: it did less than its share of 20 that step,
        # and the others took over the rest of B.
        slowed = [r for r in nd_rows if int(r["samples"]) > 0
                  and float(r["compute_s"]) / int(r["samples"]) > 2.5 * 0.001 and int(r["step"]) < len(totals) - 2]
        self.assertGreater(len(slowed), 3, "the seed slows some ranks")
        for r in slowed:
            self.assertLess(int(r["samples"]), 20, r)
            self.assertEqual(sum(by_step[int(r["step"])]), 100)
        # So no rank waits long for another: the idle fraction (1 - mean/max of the ranks'
        # modelled compute) is far below dd's, which waits for every slowed rank.
        self.assertLess(nd["idle_fraction"], dd["idle_fraction"] / 2, (nd["idle_fraction"], dd["idle_fraction"]))
        self.assertGreater(nd["throughput"], 1.15 * dd["throughput"], (nd["efficiency"], dd["efficiency"]))
        self.assertLessEqual(nd["efficiency"], 1.0)
        # The model learns as well: the same data, the same number of samples.
        self.assertGreater(nd["eval_accuracy"], 0.5)
        self.assertLess(abs(nd["eval_accuracy"] - dd["eval_accuracy"]), 0.06, (nd["eval_accuracy"], dd["eval_accuracy"]))

    def test_chunks_respect_the_micro_batch_cap(self):
        js, met = os.path.join(self.dir, "cap.json"), os.path.join(self.dir, "cap.csv")
        r = mpirun(3, *self.base(), "--global-batch", "60", "--steps", "8", "--policy", "nd", "--micro-batch-cap", "3",
                   "--virtual-device", "0.0002", "--summary-json", js, "--metrics", met)
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(met) as f:
            rows = list(csv.DictReader(f))
        for row in rows:
            self.assertGreaterEqual(int(row["micro_steps"]) * 3, int(row["samples"]), row)
        self.assertEqual(self.summary(js)["samples"], 8 * 60)

    def test_bad_backup_worker_counts_exit_2(self):
        r = mpirun(3, *self.base(), "--steps", "2", "--policy", "nd", "--backup-workers", "3")
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("leaves no rank", r.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
