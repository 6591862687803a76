"""The antdt module itself (docs/python.md): each class is one ctest test, python.<Class>.

Options: keywords, the ANTDT_* environment and argparse flags, checked by the C++ table, with
messages that name options the way the user gave them. Errors: one class per kind, with its exit
code, one line from run_main. Reduce: float32 and int64 arrays and tensors in place, exact over
uneven splits. State: arrays and bytes through a checkpoint, resumed on another number of
ranks. Stop: request_stop, request_checkpoint and SIGTERM. Mpi4py: beside mpi4py in either
order. Stall: a stopped rank ends every rank with exit code 5. Data: antdt's HDF5 reader.
"""
import glob
import json
import os
import signal
import subprocess
import sys
import time
import unittest

from support import (DATAGEN, ENV, EXIT_NON_FINITE, EXIT_STALLED, EXIT_STOPPED, EXIT_USAGE, PY, TempDirTest, finish,
                     mpirun, rank_pids, require, run, script, start)

require("numpy")
import numpy as np  # noqa: E402

import antdt  # noqa: E402


def clean_env():
    for k in [k for k in os.environ if k.startswith("ANTDT_") and k != "ANTDT_LOG_LEVEL"]:
        del os.environ[k]


class Options(TempDirTest):
    def setUp(self):
        super().setUp()
        clean_env()
        antdt._antdt.set_option_names("keywords")

    def tearDown(self):
        clean_env()
        super().tearDown()

    def test_keywords_set_the_job(self):
        job = antdt.Job(dataset_size=100, global_batch=10, steps=3, policy="static", data_seed=7)
        self.assertEqual((job.global_batch, job.policy, job.data_seed, job.dataset_size), (10, "static", 7, 100))
        steps = 0
        while job.next_step():
            self.assertEqual(sum(len(b) for b in job.micro_batches()), 10)
            steps += 1
        self.assertEqual((steps, job.exit_code), (3, 0))
        job.close()

    def test_the_environment_fills_what_keywords_leave(self):
        os.environ["ANTDT_GLOBAL_BATCH"] = "20"
        os.environ["ANTDT_POLICY"] = "static"
        job = antdt.Job(dataset_size=100, steps=1)
        self.assertEqual((job.global_batch, job.policy), (20, "static"))
        job.close()
        job = antdt.Job(dataset_size=100, steps=1, global_batch=5)
        self.assertEqual(job.global_batch, 5, "a keyword wins over the environment")
        job.close()

    def test_messages_name_keywords(self):
        with self.assertRaises(antdt.UsageError) as c:
            antdt.Job(dataset_size=100, global_batch=0, steps=1)
        self.assertIn("global_batch", str(c.exception))
        self.assertNotIn("--global-batch", str(c.exception))
        self.assertEqual(c.exception.exit_code, EXIT_USAGE)
        with self.assertRaises(antdt.UsageError) as c:
            antdt.Job(dataset_size=100, global_batch=8, steps=1, resume=True)
        self.assertRegex(str(c.exception), r"^resume needs checkpoint_dir$")
        with self.assertRaises(antdt.UsageError) as c:
            antdt.Job(dataset_size=100, global_batch=8, steps=1, policy="fastest")
        self.assertIn("policy", str(c.exception))
        self.assertIn("fastest", str(c.exception))

    def test_an_unknown_keyword_is_named_with_the_nearest(self):
        with self.assertRaises(antdt.UsageError) as c:
            antdt.Job(dataset_size=100, global_bacth=8, steps=1)
        self.assertIn("unknown option 'global_bacth' (did you mean 'global_batch'?)", str(c.exception))
        with self.assertRaises(antdt.UsageError) as c:
            antdt.Job(dataset_size=100, global_batch=8, steps=1, checkpoint_every_steps=5)
        self.assertIn("unknown option 'checkpoint_every_steps' (did you mean 'checkpoint_every'?)", str(c.exception))
        with self.assertRaises(antdt.UsageError):
            antdt.Job(dataset_size=100, **{"global-batch": 8}, steps=1)
        with self.assertRaises(antdt.UsageError) as c:
            antdt.Job(dataset_size=100, global_batch=8, steps=1, quiet="yes")
        self.assertIn("quiet", str(c.exception))
        self.assertIn("True or False", str(c.exception))

    def test_a_bad_environment_value_is_named(self):
        os.environ["ANTDT_GLOBAL_BATCH"] = "many"
        with self.assertRaises(antdt.UsageError) as c:
            antdt.Job(dataset_size=100, steps=1)
        self.assertIn("ANTDT_GLOBAL_BATCH=many", str(c.exception))

    def test_lists_and_flags(self):
        with self.assertRaises(antdt.UsageError) as c:  # one rank, two speeds
            antdt.Job(dataset_size=100, global_batch=8, steps=1, emulate_speed=[1, 0.5])
        self.assertIn("emulate_speed", str(c.exception))
        job = antdt.Job(dataset_size=100, global_batch=8, steps=1, emulate_speed=[0.5], probe=False, quiet=True)
        job.close()
        with self.assertRaises(antdt.UsageError):
            antdt.Job(dataset_size=0, global_batch=8, steps=1)
        with self.assertRaises(antdt.UsageError):
            antdt.Job(global_batch=8, steps=1)

    def test_argparse_flags(self):
        import argparse
        parser = antdt.add_arguments(argparse.ArgumentParser(prog="t"))
        parser.add_argument("--lr", type=float, default=0.1)
        args = parser.parse_args(["--global-batch", "12", "--steps", "2", "--no-probe", "--lr", "0.5"])
        self.assertEqual((args.global_batch, args.probe, args.lr, args.resume), ("12", False, 0.5, None))
        job = antdt.Job(args, dataset_size=50)
        self.assertEqual(job.global_batch, 12)
        job.close()
        with self.assertRaises(antdt.UsageError) as c:
            antdt.Job(parser.parse_args(["--global-batch", "0", "--steps", "1"]), dataset_size=50)
        self.assertIn("--global-batch", str(c.exception), "the command line's options are named as flags")
        for flag in ("--policy", "--emulate-speed", "--checkpoint-dir", "--resume", "--sample-log"):
            self.assertIn(flag, parser.format_help())
        with self.assertRaises(antdt.UsageError):
            antdt.Job(argparse.Namespace(global_batch=3), dataset_size=5)
        self.assertIn("global_batch", antdt.option_names())

    def test_a_config_file(self):
        with open(self.path("run.toml"), "w") as f:
            f.write("global-batch = 16\npolicy = \"static\"\nsteps = 1\n")
        job = antdt.Job(dataset_size=64, config=self.path("run.toml"))
        self.assertEqual((job.global_batch, job.policy), (16, "static"))
        job.close()
        with open(self.path("bad.toml"), "w") as f:
            f.write("global-bacth = 16\n")
        with self.assertRaises(antdt.UsageError) as c:
            antdt.Job(dataset_size=64, config=self.path("bad.toml"))
        self.assertIn("did you mean 'global-batch'", str(c.exception))


class Errors(TempDirTest):
    def test_one_class_per_kind_with_its_exit_code(self):
        codes = {antdt.UsageError: 2, antdt.FileError: 2, antdt.CheckpointError: 2, antdt.WriteError: 3,
                 antdt.NonFiniteError: 4, antdt.StallError: 5, antdt.MpiError: 1, antdt.DeviceError: 1,
                 antdt.Error: 1}
        for cls, code in codes.items():
            self.assertEqual(cls.exit_code, code, cls.__name__)
            self.assertTrue(issubclass(cls, antdt.Error))
            self.assertEqual(antdt.exit_code_for(cls("x")), code)
        self.assertTrue(issubclass(antdt.CheckpointError, antdt.FileError))
        self.assertEqual(antdt.exit_code_for(ValueError("x")), 1)
        self.assertEqual((antdt.EXIT_STOPPED, antdt.EXIT_RESTART), (76, 75))

    def test_run_main_prints_one_line_and_returns_the_code(self):
        s = script(self.dir, "bad.py", """
            import sys, antdt
            def main():
                antdt.Job(dataset_size=10, global_batch=0, steps=1)
            sys.exit(antdt.run_main(main, program="bad"))
        """)
        r = mpirun(2, PY, s)
        line = self.assertOneError(r, EXIT_USAGE, "bad", "global_batch")
        self.assertRegex(line, r"^bad: error: ")

    def test_an_uncaught_antdt_error_ends_with_its_code(self):
        s = script(self.dir, "uncaught.py", """
            import antdt
            antdt.Job(dataset_size=10, global_batch=4, steps=1, checkpoint_dir="/proc/antdt-cannot-be-here")
        """)
        r = mpirun(2, PY, s)
        self.assertNotEqual(r.returncode, 0)
        self.assertOneError(r, EXIT_USAGE, "uncaught.py", "checkpoint")

    def test_a_failure_on_one_rank_ends_the_job(self):
        s = script(self.dir, "one.py", """
            import sys, antdt
            def main():
                job = antdt.Job(dataset_size=100, global_batch=10, steps=50, quiet=True)
                while job.next_step():
                    list(job.micro_batches())
                    if job.rank == 1 and job.step == 3:
                        raise KeyError("only rank 1 fails")
                    job.reduce(__import__("numpy").zeros(3, "float32"))
            sys.exit(antdt.run_main(main, program="one"))
        """)
        t0 = time.time()
        r = mpirun(3, PY, s, timeout=120)
        self.assertEqual(r.returncode, 1, r.stderr[-2000:])
        self.assertLess(time.time() - t0, 60, "the other ranks must not wait for the step timeout")
        self.assertIn("one: error (rank 1): KeyError: 'only rank 1 fails'", r.stderr)
        self.assertIn("Traceback", r.stderr, "a Python failure keeps its traceback")

    def test_a_broadcast_while_a_rank_sits_out(self):
        """A root after a rank that sits out is that root (the steps' communicator then holds the
        others: MPI_ERR_ROOT before, an MPI error of antdt's own guard); a root that sits out is
        exit 2 and one line."""
        s = script(self.dir, "sitting-root.py", """
            import sys, numpy as np, antdt
            def main():
                job = antdt.Job(dataset_size=48000, global_batch=48, steps=2000, policy="dd",
                                emulate_speed=[1, 0.02, 1], virtual_device=0.0002, min_interval=5, quiet=True)
                g = np.zeros(4, np.float32)
                while job.next_step():
                    for idx in job.micro_batches():
                        g += 1
                    job.reduce(g)
                    a = np.array([job.rank], np.int64)
                    job.broadcast(a, root=2)
                    assert a[0] == 2, a
                    if job.split[1] == 0:  # rank 1 sits out
                        print("root 2 while rank 1 sits out: got", a[0], flush=True)
                        job.broadcast(a, root=1)
                return job.exit_code
            sys.exit(antdt.run_main(main, program="sitting-root"))
        """)
        r = mpirun(3, PY, s, timeout=240)
        self.assertIn("root 2 while rank 1 sits out: got 2", r.ranks[0])
        self.assertOneError(r, EXIT_USAGE, "sitting-root", "Job::broadcast: root 1 sits out at this step")

    def test_collectives_the_ranks_call_differently_are_exit_2_and_one_line(self):
        """Issue 44, item 5: these ended in Open MPI's MPI_ERR_TRUNCATE (exit 15, no word of
        antdt's) or, with different roots, passed silently with exit 0."""
        for name, call, needles in (
                ("count", "job.reduce(np.zeros(101 if job.rank == 1 else 100, np.float32))",
                 ["Job::reduce: the ranks disagree", "rank 0: 100 float32", "rank 1: 101 float32"]),
                ("type", "job.reduce(np.zeros(100, np.int64 if job.rank == 1 else np.float32))",
                 ["Job::reduce", "rank 0: 100 float32", "rank 1: 100 int64"]),
                ("bytes", "job.broadcast(np.zeros(50 if job.rank == 1 else 100, np.uint8), 0)",
                 ["Job::broadcast", "rank 0: 100 bytes from root 0", "rank 1: 50 bytes from root 0"]),
                ("root", "job.broadcast(np.zeros(8, np.uint8), job.rank)",
                 ["Job::broadcast", "rank 0: 8 bytes from root 0", "rank 1: 8 bytes from root 1"])):
            s = script(self.dir, f"mismatch-{name}.py", f"""
                import sys, numpy as np, antdt
                def main():
                    job = antdt.Job(dataset_size=100, global_batch=10, steps=3, quiet=True)
                    while job.next_step():
                        list(job.micro_batches())
                        {call}
                    return job.exit_code
                sys.exit(antdt.run_main(main, program="mismatch"))
            """)
            r = mpirun(2, PY, s, timeout=120)
            with self.subTest(name):
                self.assertOneError(r, EXIT_USAGE, "mismatch", *needles)

    def test_a_rank_that_leaves_early_is_not_blamed_as_a_stalled_node(self):
        """Issue 44, item 4: a break, a sys.exit(3) or a KeyboardInterrupt on one rank gave exit 5,
        "stopped, hung or swapping" for that healthy rank, after the whole step timeout, and its
        node went into antdt-restart-exclude. Now the rank says it leaves: the others stop at
        once, naming it as having left, and no node is excluded."""
        for name, leave in (("break", "break"), ("exit", "sys.exit(3)"), ("interrupt", "raise KeyboardInterrupt")):
            ckpt = self.path(f"leave-{name}")
            s = script(self.dir, f"leave-{name}.py", f"""
                import sys, numpy as np, antdt
                job = antdt.Job(dataset_size=1000, global_batch=10, steps=400, quiet=True, checkpoint_dir="{ckpt}",
                                step_timeout=60)
                while job.next_step():
                    list(job.micro_batches())
                    if job.rank == 1 and job.step == 3:
                        {leave}
                    job.reduce(np.zeros(2, np.float32))
            """)
            t0 = time.time()
            r = mpirun(2, PY, s, timeout=120)
            with self.subTest(name):
                self.assertLess(time.time() - t0, 45, "the other rank stops at once, not after the step timeout")
                self.assertNotEqual(r.returncode, 5, r.stderr[-3000:])
                self.assertNotEqual(r.returncode, 0, r.stderr[-3000:])
                if name == "exit":  # the leaver's own code is the job's
                    self.assertEqual(r.returncode, 3, r.stderr[-3000:])
                self.assertIn("rank 1", r.stderr)
                self.assertIn("left the run", r.stderr)
                self.assertNotIn("stopped, hung or swapping", r.stderr)
                self.assertFalse(os.path.exists(os.path.join(ckpt, "antdt-restart-exclude")), "no node is excluded")

    def test_a_non_finite_gradient_stops_every_rank_with_code_4(self):
        s = script(self.dir, "nan.py", """
            import sys, numpy as np, antdt
            def main():
                job = antdt.Job(dataset_size=100, global_batch=10, steps=5, quiet=True)
                while job.next_step():
                    list(job.micro_batches())
                    g = np.zeros(4, np.float32)
                    if job.step == 2 and job.rank == job.size - 1:
                        g[1] = np.nan
                    job.reduce(g)
                return job.exit_code
            sys.exit(antdt.run_main(main, program="nan"))
        """)
        r = mpirun(2, PY, s)
        self.assertOneError(r, EXIT_NON_FINITE, "nan", "step 2", "not finite")


class Reduce(TempDirTest):
    """A rank's per-sample values summed over its micro-batches, reduced: the mean over the
    step's global batch, whatever the split, in a NumPy array and in a tensor, in place."""

    def test_exact_means_over_uneven_splits(self):
        s = script(self.dir, "reduce.py", """
            import sys, numpy as np, antdt
            have_torch = True
            try:
                import torch
            except ImportError:
                have_torch = False

            def value(i):  # a per-sample "gradient"
                return np.array([i, (i * 7) % 13, 1.0, i % 2], np.float32)

            def gather(job, idx):  # every rank's indices of the step, from broadcasts
                out = []
                for r in range(job.size):
                    n = np.array([len(idx)], np.int64)
                    job.broadcast(n, root=r)
                    buf = idx.copy() if r == job.rank else np.zeros(n[0], np.int64)
                    job.broadcast(buf, root=r)
                    out.append(buf)
                return np.concatenate(out)

            def main(opts):
                job = antdt.Job(dataset_size=97, global_batch=24, steps=4, quiet=True, probe=False, **opts)
                while job.next_step():
                    mine = [idx for idx in job.micro_batches()]
                    idx = np.concatenate(mine) if mine else np.zeros(0, np.int64)
                    sums = sum((value(i) for i in idx), np.zeros(4, np.float32))
                    fixed = np.array([idx.sum(), len(idx)], np.int64)
                    B = job.reduce(sums)
                    assert B == 24, B
                    assert job.reduce(fixed) == 24
                    every = gather(job, idx)
                    assert len(every) == 24, every  # (the same sample may come twice, from two epochs)
                    want = np.mean([value(i) for i in every], axis=0)
                    assert np.allclose(sums, want, rtol=1e-6), (sums, want)
                    assert fixed.tolist() == [every.sum(), 24], (fixed, every)
                    if have_torch:
                        t = torch.from_numpy(sum((value(i) for i in idx), np.zeros(4, np.float32)))
                        job.reduce(t)
                        assert torch.allclose(t, torch.from_numpy(want)), t
                    if job.rank == 0:
                        print("split", job.split, flush=True)
                return job.exit_code

            n = antdt.world_size()
            cases = [dict(policy="static", micro_batch_cap=5),
                     dict(policy="static", fixed_split=[24] if n == 1 else [3] + [21 // (n - 1)] * (n - 2) + [21 - 21 // (n - 1) * (n - 2)]),
                     dict(policy="nd", nd_chunks=4, backup_workers=0)]
            for c in cases:
                code = antdt.run_main(main, c)
                if code:
                    sys.exit(code)
            print("reduce OK", flush=True)
        """)
        for np_ in (1, 2, 3):
            r = mpirun(np_, PY, s)
            self.assertEqual(r.returncode, 0, r.stderr[-3000:])
            for out in r.ranks:
                self.assertIn("reduce OK", out)
        self.assertIn("split [3, 10, 11]", "".join(r.ranks), "the fixed uneven split was used")

    def test_what_cannot_be_reduced_is_refused(self):
        job = antdt.Job(dataset_size=10, global_batch=2, steps=1, quiet=True)
        self.assertTrue(job.next_step())
        list(job.micro_batches())
        with self.assertRaises(antdt.UsageError) as c:
            job.reduce(np.zeros(3, np.float64))
        self.assertIn("float32", str(c.exception))
        with self.assertRaises(antdt.UsageError) as c:
            job.reduce(np.zeros((3, 4), np.float32)[:, 1])
        self.assertIn("not C-contiguous", str(c.exception))
        ro = np.zeros(3, np.float32)
        ro.setflags(write=False)
        with self.assertRaises(antdt.UsageError) as c:
            job.reduce(ro)
        self.assertIn("read-only", str(c.exception))
        with self.assertRaises(antdt.UsageError):
            job.reduce([1.0, 2.0])
        self.assertEqual(job.reduce(np.ones((2, 2), np.float32)), 2)
        self.assertFalse(job.next_step())
        with self.assertRaises(antdt.UsageError) as c:
            job.reduce(np.zeros(2, np.float32))
        self.assertIn("outside a step", str(c.exception))
        job.close()
        with self.assertRaises(antdt.UsageError):
            job.next_step()


STATE_SCRIPT = """
import json, sys, numpy as np, antdt
def main(steps, resume, broken):
    job = antdt.Job(dataset_size=40, global_batch=8, steps=steps, checkpoint_dir=sys.argv[1], checkpoint_every=2,
                    resume=resume, quiet=True, policy="static")
    w = np.zeros(5, np.float32)
    d = np.zeros(2, np.float64)
    n = np.zeros(1, np.int64)
    meta = {"lr": 0.5, "steps": []}
    job.add_state("model/w", w)
    job.add_state("model/d", d)
    job.add_state("count", n)
    def load(data):
        if broken:
            raise ValueError("cannot read this")
        meta.update(json.loads(data))
    job.add_state("meta", save=lambda: json.dumps(meta).encode(), load=load)
    first = True
    while job.next_step():
        if first:
            print("start", job.step, job.resumed, w.tolist(), n.tolist(), meta["steps"], flush=True)
            first = False
        list(job.micro_batches())
        job.reduce(np.zeros(1, np.float32))
        w += 1
        d -= 0.5
        n += 2
        meta["steps"].append(job.step)
    print("end", job.step, w.tolist(), d.tolist(), n.tolist(), flush=True)
    return job.exit_code
sys.exit(antdt.run_main(main, int(sys.argv[2]), sys.argv[3] == "resume", len(sys.argv) > 4, program="state"))
"""


class State(TempDirTest):
    def test_arrays_and_bytes_come_back_on_another_number_of_ranks(self):
        s = script(self.dir, "state.py", STATE_SCRIPT)
        ckpt = self.path("ckpt")
        r = mpirun(2, PY, s, ckpt, 5, "fresh")
        self.assertEqual(r.returncode, 0, r.stderr[-3000:])
        for out in r.ranks:  # each rank's own output: mpirun's stdout may interleave their lines
            self.assertIn("end 5 [5.0, 5.0, 5.0, 5.0, 5.0] [-2.5, -2.5] [10]", out)
        r = mpirun(3, PY, s, ckpt, 7, "resume")
        self.assertEqual(r.returncode, 0, r.stderr[-3000:])
        for out in r.ranks:  # every rank got rank 0's saved state
            self.assertIn("start 5 True [5.0, 5.0, 5.0, 5.0, 5.0] [10] [0, 1, 2, 3, 4]", out)
        for out in r.ranks:
            self.assertIn("end 7 [7.0, 7.0, 7.0, 7.0, 7.0] [-3.5, -3.5] [14]", out)

    def test_a_load_that_fails_is_a_checkpoint_error(self):
        s = script(self.dir, "state.py", STATE_SCRIPT)
        ckpt = self.path("ckpt")
        self.assertEqual(mpirun(2, PY, s, ckpt, 3, "fresh").returncode, 0)
        r = mpirun(2, PY, s, ckpt, 5, "resume", "broken")
        self.assertOneError(r, EXIT_USAGE, "state", "checkpoint state 'meta'", "ValueError: cannot read this")

    def test_state_that_cannot_be_kept(self):
        job = antdt.Job(dataset_size=10, global_batch=2, steps=1, quiet=True)
        with self.assertRaises(antdt.UsageError) as c:
            job.add_state("h", np.zeros(3, np.float16))
        self.assertIn("float32, float64 or int64", str(c.exception))
        with self.assertRaises(antdt.UsageError):
            job.add_state("bad name!", np.zeros(3, np.float32))
        with self.assertRaises(antdt.UsageError):
            job.add_state("x", save=lambda: b"")
        with self.assertRaises(antdt.UsageError):
            job.add_state("antdt/mine", np.zeros(3, np.float32))
        job.close()


STOP_SCRIPT = """
import sys, time, numpy as np, antdt
def main(ckpt, mode):
    job = antdt.Job(dataset_size=1000, global_batch=10, steps=400, checkpoint_dir=ckpt, quiet=True,
                    checkpoint_minutes=0, summary_json=ckpt + ".json", sample_log=ckpt + ".log")
    while job.next_step():
        list(job.micro_batches())
        job.reduce(np.zeros(2, np.float32))
        if mode == "stop" and job.step == 6 and job.rank == job.size - 1:
            job.request_stop()
        if mode == "checkpoint" and job.step in (3, 9) and job.rank == 0:
            job.request_checkpoint()
        if mode == "checkpoint" and job.step == 12:
            job.request_stop()
        if mode == "signal":
            time.sleep(0.01)
    # One write per line: mpirun interleaves the ranks' writes, and print(a, b, ...) makes several.
    sys.stdout.write(f"rank {job.rank} after {job.step} stopped {job.stopped} code {job.exit_code}\\n")
    sys.stdout.flush()
    return job.exit_code
sys.exit(antdt.run_main(main, sys.argv[1], sys.argv[2], program="stop"))
"""


class Stop(TempDirTest):
    def checkpoints(self, ckpt):
        return sorted(os.path.basename(p) for p in glob.glob(os.path.join(ckpt, "ckpt-*.h5")))

    def test_request_stop_ends_every_rank_with_76_after_a_checkpoint(self):
        s = script(self.dir, "stop.py", STOP_SCRIPT)
        ckpt = self.path("a")
        r = mpirun(2, PY, s, ckpt, "stop")
        self.assertEqual(r.returncode, EXIT_STOPPED, r.stderr[-3000:])
        for rank in (0, 1):
            self.assertIn(f"rank {rank} after 7 stopped True code 76", r.ranks[rank])
        self.assertEqual(self.checkpoints(ckpt), ["ckpt-00000007.h5"])
        with open(ckpt + ".json") as f:  # rank 1 asked: rank 0, which writes it, says so
            self.assertEqual(json.load(f)["stopped_by"], "")

    def test_request_stop_on_one_rank_says_so(self):
        """Issue 44, item 7: a single rank's request_stop() logged "stopped by a signal to another
        rank"."""
        s = script(self.dir, "stop.py", STOP_SCRIPT)
        ckpt = self.path("one")
        r = mpirun(1, PY, s, ckpt, "stop")
        self.assertEqual(r.returncode, EXIT_STOPPED, r.stderr[-3000:])
        self.assertIn("stopped by request_stop() after step 6", r.stderr)
        self.assertNotIn("another rank", r.stderr)
        with open(ckpt + ".json") as f:
            self.assertEqual(json.load(f)["stopped_by"], "request_stop()")

    def test_request_checkpoint_takes_one_at_that_step(self):
        s = script(self.dir, "stop.py", STOP_SCRIPT)
        ckpt = self.path("b")
        r = mpirun(2, PY, s, ckpt, "checkpoint")
        self.assertEqual(r.returncode, EXIT_STOPPED, r.stderr[-3000:])
        self.assertEqual(self.checkpoints(ckpt), ["ckpt-00000004.h5", "ckpt-00000010.h5", "ckpt-00000013.h5"])

    def test_sigterm_stops_every_rank_with_76(self):
        s = script(self.dir, "stop.py", STOP_SCRIPT)
        ckpt = self.path("c")
        job = start(2, PY, s, ckpt, "signal")
        pids = rank_pids(job, 2)
        deadline = time.time() + 60
        while not glob.glob(ckpt + ".log.*") or os.path.getsize(ckpt + ".log.0") < 200:
            self.assertLess(time.time(), deadline, "the job did not start its steps")
            time.sleep(0.05)
        for pid in pids.values():
            os.kill(pid, signal.SIGTERM)
        r = finish(job)
        self.assertEqual(r.returncode, EXIT_STOPPED, r.stderr[-3000:])
        self.assertEqual(r.stdout.count("stopped True code 76"), 2, r.stdout)
        self.assertEqual(len(self.checkpoints(ckpt)), 1)
        with open(ckpt + ".json") as f:
            self.assertIn('"stopped_by": "SIGTERM"', f.read().replace('":"', '": "'))


PROGRESS_SCRIPT = r"""
import json, sys
import numpy as np
import antdt

def main(ckpt, out):
    # (no backup workers: a rank that sat out would not see every step, and these steps are so
    # short that a rank costs more than it gives)
    job = antdt.Job(dataset_size=1000, global_batch=100, epochs=2, policy="dd", checkpoint_dir=ckpt,
                    checkpoint_every=5, backup_workers=0)
    steps, summaries = [], []
    job.on_step_end(lambda s: summaries.append([s.step, s.totals_step, s.samples, s.completed_epochs, s.finished]))
    job.on_report(lambda r: setattr(r, "eval_accuracy", 0.5))
    g = np.zeros(4, dtype=np.float32)
    while job.next_step():
        steps.append([job.step, job.epoch])
        for idx in job.micro_batches():
            g += len(idx)
        job.add_loss(1.0)
        job.reduce(g)
    with open(f"{out}.{job.rank}", "w") as f:
        json.dump({"steps": steps, "summaries": summaries}, f)
    return job.exit_code
sys.exit(antdt.run_main(main, sys.argv[1], sys.argv[2]))
"""


class Progress(TempDirTest):
    def test_epoch_summaries_and_report_say_where_the_run_stands(self):
        """Issue 42: with the reply lag, job.epoch read 1 at step 10 and 0 at steps 11 and 16, the
        summaries of rounds that brought no reply said 0 epochs completed, and the report printed
        "eval loss 0.00000" (never set) and an empty backend."""
        s = script(self.dir, "progress.py", PROGRESS_SCRIPT)
        out = self.path("out")
        r = mpirun(2, PY, s, self.path("ckpt"), out)
        self.assertEqual(r.returncode, 0, r.stderr[-3000:])
        for rank in (0, 1):
            with open(f"{out}.{rank}") as f:
                got = json.load(f)
            self.assertEqual(got["steps"], [[t, t * 100 // 1000] for t in range(20)], f"rank {rank}")
            done = [c for _, _, _, c, _ in got["summaries"]]
            self.assertEqual(done, sorted(done), f"rank {rank}: epochs completed went back: {done}")
            self.assertEqual(done[-1], 2)
            self.assertTrue(got["summaries"][-1][4])
            for step, totals_step, samples, _, _ in got["summaries"]:
                self.assertEqual(samples, 100 if totals_step >= 0 else 0, f"rank {rank}, step {step}")
        self.assertIn("backend host", r.stdout)
        self.assertIn("eval accuracy 0.5", r.stdout)
        self.assertNotIn("eval loss", r.stdout)


class Mpi4py(TempDirTest):
    """Beside mpi4py, imported before or after antdt: whoever initialised MPI finalises it, the
    job runs on mpi4py's communicator, and mpi4py's own collectives work between the steps."""

    def test_either_order(self):
        require("mpi4py")
        body = """
import numpy as np
job = antdt.Job(dataset_size=40, global_batch=8, steps=3, quiet=True, comm=MPI.COMM_WORLD)
while job.next_step():
    list(job.micro_batches())
    job.reduce(np.zeros(1, np.float32))
    assert MPI.COMM_WORLD.allreduce(job.rank + 1) == 3
job.close()
print("mpi4py OK, antdt initialised MPI:", antdt._antdt.owns_mpi(), flush=True)
"""
        for first in ("mpi4py", "antdt"):
            with self.subTest(first=first):
                imports = ("from mpi4py import MPI\nimport antdt\n" if first == "mpi4py" else
                           "import antdt\nfrom mpi4py import MPI\n")
                s = script(self.dir, f"m_{first}.py", imports + body)
                r = mpirun(2, PY, s, timeout=120)
                self.assertEqual(r.returncode, 0, r.stderr[-3000:])
                for out in r.ranks:
                    self.assertIn(f"mpi4py OK, antdt initialised MPI: {first == 'antdt'}", out, r.stderr[-2000:])


class Stall(TempDirTest):
    def test_a_stopped_rank_ends_every_rank_with_code_5(self):
        s = script(self.dir, "stall.py", """
            import os, signal, sys, time, numpy as np, antdt
            def main():
                job = antdt.Job(dataset_size=1000, global_batch=10, steps=1000, quiet=True, step_timeout=2)
                while job.next_step():
                    list(job.micro_batches())
                    if job.step == 5 and job.rank == 1:
                        os.kill(os.getpid(), signal.SIGSTOP)
                    job.reduce(np.zeros(2, np.float32))
                return job.exit_code
            sys.exit(antdt.run_main(main, program="stall"))
        """)
        job = start(3, PY, s)
        pids = rank_pids(job, 3)
        t0 = time.time()
        r = finish(job, timeout=60)
        try:
            os.kill(pids[1], signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.assertEqual(r.returncode, EXIT_STALLED, r.stderr[-3000:])
        self.assertLess(time.time() - t0, 40)
        mine = [l for l in r.stderr.splitlines() if l.startswith("stall: error")]
        self.assertEqual(len(mine), 1, r.stderr[-3000:])
        self.assertRegex(mine[0], r"rank 1 \(node [^)]*\) has not answered in the gradient reduction of step \d+, 2 s")


class Data(TempDirTest):
    def test_the_hdf5_reader(self):
        path = self.path("d.h5")
        r = run([DATAGEN, "--kind", "digits", "-n", 50, "--image-size", 12, "-o", path])
        self.assertEqual(r.returncode, 0, r.stderr)
        data = antdt.Hdf5Dataset(path)
        self.assertEqual((len(data), data.dim, data.num_classes, data.sample_shape), (50, 144, 10, [1, 12, 12]))
        x, y = data.read([3, 4, 5, 40, 3])
        self.assertEqual((x.shape, x.dtype, y.shape, y.dtype), ((5, 1, 12, 12), np.float32, (5,), np.int64))
        np.testing.assert_array_equal(x[0], x[4])
        self.assertTrue(((0 <= y) & (y < 10)).all())
        self.assertTrue((x >= 0).all() and (x <= 1).all())
        with self.assertRaises(antdt.UsageError):
            data.read([50])
        with self.assertRaises(antdt.FileError) as c:
            antdt.Hdf5Dataset(self.path("missing.h5"))
        self.assertIn("missing.h5", str(c.exception))


if __name__ == "__main__":
    unittest.main()
