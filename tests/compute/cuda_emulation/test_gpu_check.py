#!/usr/bin/env python3
"""perf/gpu-check.sh, run here on the emulated CUDA device, so its logic is tested before a GPU
is lent (a GPU session has minutes of device time, none to spare on a broken script).

    python3 test_gpu_check.py BUILD_DIR SOURCE_DIR [unittest args]

The script's plan B binaries are the emulated builds, under their usual names; the bench is
the emulated one in smoke mode; nvidia-smi and compute-sanitizer are small fakes on PATH. Each
case asserts on the script's exit status and log: a green run, a sanitizer that the runtime
refuses (not a failure), a sanitizer that reports an error, and CUDA tests that skip on what
the script takes for a GPU machine (both failures).
"""
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

BUILD = os.path.abspath(sys.argv[1])
SOURCE = os.path.abspath(sys.argv[2])
del sys.argv[1:3]
EMULATED = os.path.join(BUILD, "tests", "compute", "cuda_emulation")
SCRIPT = os.path.join(SOURCE, "perf", "gpu-check.sh")

FAKE_NVIDIA_SMI = """\
#!/bin/sh
# nvidia-smi of an emulated GPU: the inventory's CSV query, or nothing (success).
case "$*" in
  *compute_cap*noheader*) echo "9.0" ;;
  *query-gpu*) echo "name, compute_cap, memory.total"; echo "Emulated GPU, 9.0, 4096 MiB" ;;
esac
exit 0
"""

# compute-sanitizer --tool T --error-exitcode N PROGRAM ARGS...: per behaviour, run the
# program (clean), refuse the device as gVisor does, or report an error.
FAKE_SANITIZER = {
    "clean": """\
#!/bin/sh
shift 4
exec "$@"
""",
    "refused": """\
#!/bin/sh
echo "========= COMPUTE-SANITIZER"
echo "========= Error: Device not supported. Please refer to the Supported Devices section."
echo "cudaMalloc failed: error 999"
exit 1
""",
    "error": """\
#!/bin/sh
echo "========= Invalid __global__ write of size 4 bytes"
echo "========= ERROR SUMMARY: 1 error"
exit 3
""",
}


class GpuCheckOnEmulatedDevice(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="antdt-gpu-check-")
        self.fakes = os.path.join(self.dir, "fakes")
        os.mkdir(self.fakes)
        self.write_tool("nvidia-smi", FAKE_NVIDIA_SMI)

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def write_tool(self, name, text):
        path = os.path.join(self.fakes, name)
        with open(path, "w") as f:
            f.write(text)
        os.chmod(path, 0o755)

    def bin_dir(self, real_cuda=False):
        """Plan B's five binaries under their usual names: the emulated builds, or the real-CUDA
        ones (which skip their CUDA tests here, having no GPU)."""
        d = os.path.join(self.dir, "bin")
        os.makedirs(d, exist_ok=True)
        if real_cuda:
            sources = {"test_compute_model": os.path.join(BUILD, "tests", "compute", "test_compute_model"),
                       "test_compute_reduce": os.path.join(BUILD, "tests", "compute", "test_compute_reduce"),
                       "test_job_device_reduce": os.path.join(BUILD, "tests", "compute", "test_job_device_reduce"),
                       "antdt-train": os.path.join(BUILD, "apps", "antdt-train")}
        else:
            sources = {"test_compute_model": os.path.join(EMULATED, "test_compute_model_emulated"),
                       "test_compute_reduce": os.path.join(EMULATED, "test_compute_reduce_emulated"),
                       "test_job_device_reduce": os.path.join(EMULATED, "test_job_device_reduce_emulated"),
                       "antdt-train": os.path.join(EMULATED, "antdt-train-emulated-cuda")}
        sources["antdt-datagen"] = os.path.join(BUILD, "apps", "antdt-datagen")
        for name, path in sources.items():
            self.assertTrue(os.path.exists(path), path)
            os.symlink(path, os.path.join(d, name))
        return d

    def check(self, sanitizer, plan_b=True, real_cuda=False):
        self.write_tool("compute-sanitizer", FAKE_SANITIZER[sanitizer])
        env = dict(os.environ,
                   PATH=self.fakes + os.pathsep + os.environ["PATH"],
                   OUT=os.path.join(self.dir, "out"),
                   GPU_CHECK_WORK=os.path.join(self.dir, "work"),
                   TMPDIR=self.dir,
                   GPU_CHECK_BENCH=os.path.join(EMULATED, "antdt-bench-gpu-emulated"),
                   GPU_CHECK_BENCH_MODE="smoke", BENCH_SECONDS="0.02",
                   PLAN_C_LAYERS="16,32,4", PLAN_C_BATCH="256 512", PLAN_C_STEPS="8",
                   PLAN_C_REPEATS="2", PLAN_C_ARGS="--read-ahead on",
                   PLAN_D_LAYERS="16,32,4 16,32,32,4", PLAN_D_BATCH="256", PLAN_D_STEPS="6", PLAN_D_REPEATS="2")
        if plan_b:
            env["GPU_CHECK_BIN"] = self.bin_dir(real_cuda)
        else:
            env["SKIP_PLAN_B"] = "1"
        r = subprocess.run(["bash", SCRIPT], capture_output=True, text=True, timeout=600, env=env, cwd=SOURCE)
        with open(os.path.join(self.dir, "out", "gpu-check.log")) as f:
            log = f.read()
        self.assertIn("== done in", log, r.stdout + r.stderr)
        self.assertTrue(os.path.exists(os.path.join(self.dir, "out", "gpu-check-logs.tar.gz")))
        return r.returncode, log

    def test_green_run_on_the_emulated_device(self):
        rc, log = self.check("clean")
        self.assertEqual(rc, 0, log)
        self.assertIn("GPU-CHECK PASS", log)
        for tool in ("memcheck", "racecheck", "synccheck"):
            self.assertRegex(log, tool + r": clean \([1-9][0-9]* checks passed under it\)")
        self.assertRegex(log, r"model: passed \([0-9]+ tests from")
        self.assertRegex(log, r"reduce-nccl-np1: passed")
        self.assertRegex(log, r"reduce-staged-np2: passed")
        self.assertRegex(log, r"job-reduce-nccl-np1: passed \([0-9]+ tests from")
        self.assertRegex(log, r"job-reduce-staged-np2: passed")
        # Plan C: both policies ran twice at each batch on the emulated device through the
        # staged reducer, and the medians are reported per batch without a lost sample.
        for batch in ("256", "512"):
            for policy in ("static", "dd"):
                self.assertRegex(log, policy + r": batch +" + batch + r", .*emulated.*reducer mpi.*median of 2: +"
                                 r"[0-9]+ samples/s, efficiency 0\.[0-9]{3}.*read ahead 0\.[5-9][0-9].*duplicated 0, missing 0")
            self.assertRegex(log, r"batch " + batch + r": dd / static throughput [0-9.]+x")
        # Plan D: off and on twice per model; on the same 2 ranks, the same parameters.
        for layers in ("16,32,4", "16,32,32,4"):
            for mode in ("off", "on"):
                self.assertRegex(log, layers + r" overlap +" + mode + r": reducer mpi, median of 2: +[0-9]+ samples/s, "
                                 r"step +[0-9.]+ ms, reduce wait 0\.[0-9]{3}")
            self.assertRegex(log, layers + r" on / off throughput: median [0-9.]+ \(runs: [0-9.]+, [0-9.]+\); "
                             r"parameters identical: yes")
        self.assertNotIn("FAILED", log)

    def test_a_runtime_that_refuses_the_sanitizer_is_not_a_failure(self):
        rc, log = self.check("refused", plan_b=False)
        self.assertEqual(rc, 0, log)
        self.assertIn("UNAVAILABLE: this runtime refuses the GPU to compute-sanitizer", log)
        self.assertNotIn("racecheck", log.split("UNAVAILABLE")[1], "the other tools are not tried")

    def test_a_sanitizer_error_fails_the_check(self):
        rc, log = self.check("error", plan_b=False)
        self.assertNotEqual(rc, 0, log)
        self.assertIn("memcheck: FAILED (exit 3)", log)
        self.assertIn("Invalid __global__ write", log)

    def test_skipped_cuda_tests_fail_the_check(self):
        # The real-CUDA builds find no device here and skip their CUDA bodies: on what the script
        # takes for a GPU machine, that must fail, not pass quietly.
        if not os.path.exists(os.path.join(BUILD, "tests", "compute", "test_compute_model")):
            self.skipTest("the compute tests are not built")
        rc, log = self.check("clean", real_cuda=True)
        self.assertNotEqual(rc, 0, log)
        self.assertIn("model: FAILED: tests were skipped on a GPU machine", log)
        self.assertIn("reduce-nccl-np1: FAILED: tests were skipped on a GPU machine", log)
        self.assertIn("job-reduce-nccl-np1: FAILED: tests were skipped on a GPU machine", log)


if __name__ == "__main__":
    unittest.main(verbosity=2)
