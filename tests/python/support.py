"""What the Python module's tests share. Importing it takes BUILD_DIR and SOURCE_DIR from the
command line (through tests/apps/harness.py) and an optional --torch-example PATH (the libtorch
example, where it is built), and removes them, so that unittest sees the rest:
`python3 test_X.py BUILD_DIR SOURCE_DIR [--torch-example PATH] [unittest args]`.

The tests run under the interpreter the module was built for, with the build tree's package on
PYTHONPATH (tests/python/CMakeLists.txt); ranks are that interpreter under mpirun.
"""
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "apps"))
from harness import BUILD, DATAGEN, ENV, SOURCE, error_lines, run  # noqa: E402  (takes argv[1:3])
from test_faults import (assert_exactly_once, finish, logged_steps, rank_pids, read_log,  # noqa: E402,F401
                         wait_for_step)

TORCH_EXAMPLE = None
if len(sys.argv) > 2 and sys.argv[1] == "--torch-example":
    TORCH_EXAMPLE = sys.argv[2]
    del sys.argv[1:3]

PY = sys.executable
EXAMPLE = os.path.join(SOURCE, "examples", "python", "train_cnn.py")
EXIT_USAGE, EXIT_NON_FINITE, EXIT_STALLED, EXIT_STOPPED = 2, 4, 5, 76
SKIP = 77  # ctest's SKIP_RETURN_CODE for these tests


def have(module):
    import importlib.util
    return importlib.util.find_spec(module) is not None


def require(*modules):
    """Skips the whole test process (exit 77, the reason on stdout) when a module is missing."""
    missing = [m for m in modules if not have(m)]
    if missing:
        print(f"skipped: {PY} has no {', '.join(missing)} (Debian: apt-get install "
              f"{' '.join('python3-' + m for m in missing)})")
        sys.exit(SKIP)


def script(directory, name, text):
    """Writes a Python script (dedented) and returns its path."""
    path = os.path.join(directory, name)
    with open(path, "w") as f:
        f.write(textwrap.dedent(text))
    return path


def mpirun(np, *args, timeout=240, env=None):
    """A finished mpirun job; besides stdout, in which mpirun may interleave the ranks' lines,
    r.ranks holds each rank's own stdout."""
    out = tempfile.mkdtemp(prefix="antdt-ranks-")
    r = run(["mpirun", "-np", np, "--output-filename", out, *args], timeout=timeout, env=env)
    r.ranks = []
    for rank in range(np):
        path = os.path.join(out, "1", f"rank.{rank}", "stdout")
        if os.path.exists(path):
            with open(path) as f:
                r.ranks.append(f.read())
        else:
            r.ranks.append("")
    shutil.rmtree(out, ignore_errors=True)
    return r


def start(np, *args, env=None):
    """An mpirun job in the background, in its own process group."""
    return subprocess.Popen(["mpirun", "-np", str(np), *map(str, args)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env or ENV, start_new_session=True)


class TempDirTest(unittest.TestCase):
    """A test in a temporary directory of its own, removed after it (kept with
    ANTDT_KEEP_TEST_DIRS=1, to look into a failure)."""

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="antdt-python-")

    def tearDown(self):
        if not os.environ.get("ANTDT_KEEP_TEST_DIRS"):
            shutil.rmtree(self.dir, ignore_errors=True)

    def path(self, name):
        return os.path.join(self.dir, name)

    def assertOneError(self, r, code, program, *needles):
        """`r` exited with `code` and printed exactly one error line of `program`, holding every
        needle, and no Python traceback; returns that line."""
        self.assertEqual(r.returncode, code, f"stdout={r.stdout[-3000:]}\nstderr={r.stderr[-3000:]}")
        lines = error_lines(r.stderr, program)
        self.assertEqual(len(lines), 1, f"exactly one error line, got:\n{r.stderr[-3000:]}")
        self.assertNotIn("Traceback", r.stderr)
        for needle in needles:
            self.assertIn(needle, lines[0])
        return lines[0]


__all__ = ["BUILD", "SOURCE", "DATAGEN", "ENV", "PY", "EXAMPLE", "TORCH_EXAMPLE", "EXIT_USAGE", "EXIT_NON_FINITE",
           "EXIT_STALLED", "EXIT_STOPPED", "SKIP", "have", "require", "script", "mpirun", "start", "finish",
           "rank_pids", "read_log", "logged_steps", "wait_for_step", "assert_exactly_once", "TempDirTest", "run",
           "error_lines"]
