#!/usr/bin/env python3
"""antdt-sim end to end, run by ctest: the real step code (StepCoordinator, DDS, Controller,
one Agent per rank) at 4 to 10,000 simulated ranks.

    python3 test_sim.py BUILD_DIR [unittest args]
"""
import json
import os
import subprocess
import sys
import tempfile
import unittest

BUILD = os.path.abspath(sys.argv[1])
del sys.argv[1:2]
SIM = os.path.join(BUILD, "apps", "antdt-sim")


def sim(*args, timeout=300):
    with tempfile.TemporaryDirectory() as d:
        js = os.path.join(d, "sim.json")
        r = subprocess.run([SIM, *map(str, args), "--summary-json", js], capture_output=True, text=True,
                           timeout=timeout)
        assert r.returncode == 0, r.stdout + r.stderr
        with open(js) as f:
            return json.load(f), r.stdout


class Simulator(unittest.TestCase):
    def check_every_sample_once(self, result, epochs, dataset_size):
        for p in result["policies"]:
            self.assertEqual(len(p["epochs"]), epochs, p["policy"])
            for e in p["epochs"]:
                self.assertEqual((e["committed"], e["missing"], e["duplicated"]), (dataset_size, 0, 0), p["policy"])
            self.assertEqual(p["duplicated_samples"], 0)
            self.assertEqual(p["missing_samples"], 0)
            self.assertLessEqual(p["efficiency"], 1.0, "no schedule beats the sum of the ranks' speeds")
            self.assertGreater(p["efficiency"], 0.0)

    def test_real_dds_at_4_ranks(self):
        res, out = sim("--speeds", "1,1,1,0.33", "-B", "400", "--dataset-size", "9973", "--epochs", "3",
                       "--steps", "1000000", "--shard-size", "37")
        self.check_every_sample_once(res, 3, 9973)
        self.assertIn("per epoch (committed/missing/duplicated", out)
        dd = next(p for p in res["policies"] if p["policy"] == "dd")
        static = next(p for p in res["policies"] if p["policy"] == "static")
        self.assertGreater(dd["throughput"], 2.0 * static["throughput"], "dd balances the slow rank")
        self.assertEqual(sum(dd["final_split"]), 400)

    def test_real_dds_at_10000_ranks(self):
        n = 10000
        res, _ = sim("--ranks", n, "--profile", "1:0.5,0.5:0.25,0.33:0.25", "--batch-per-rank", "16",
                     "--dataset-size", 16 * n * 5 + 123, "--epochs", "2", "--steps", "1000000", "--policy", "dd",
                     "--no-charge-decision", timeout=600)
        self.check_every_sample_once(res, 2, 16 * n * 5 + 123)
        dd = res["policies"][0]
        self.assertEqual(dd["ranks"], n)
        self.assertGreaterEqual(dd["plan_changes"], 1, "dd moves off the equal split")
        # What one rank receives per step does not grow with the ranks: a reply slot's worth.
        self.assertLess(dd["reply_bytes_typical"], 256)
        self.assertEqual(dd["gather_bytes_at_rank0"], n * dd["report_bytes"])

    def test_profile_names_and_bad_input(self):
        res, out = sim("--ranks", "8", "--profile", "v100:0.25,a100:0.5,h100:0.25", "--steps", "30")
        self.assertEqual(res["ranks"], 8)
        self.assertIn("speeds 0.5,0.5,1,1,1,1,2,2", out)
        r = subprocess.run([SIM, "--ranks", "8", "--profile", "a100:0.5,h100:0.4"], capture_output=True, text=True)
        self.assertEqual(r.returncode, 2)
        self.assertIn("add up to 1", r.stderr)
        r = subprocess.run([SIM, "--profile", "a100:1"], capture_output=True, text=True)
        self.assertEqual(r.returncode, 2)
        self.assertIn("--profile needs --ranks", r.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
