"""What the antdt-train test scripts of this directory share (test_safety, test_faults, test_nd).

Importing it takes BUILD_DIR and SOURCE_DIR from the command line (and removes them, so that
unittest sees the rest): `python3 test_X.py BUILD_DIR SOURCE_DIR [unittest args]`.
"""
import collections
import glob
import os
import signal
import re
import subprocess
import sys
import time

BUILD = os.path.abspath(sys.argv[1])
SOURCE = os.path.abspath(sys.argv[2])
del sys.argv[1:3]
TRAIN = os.path.join(BUILD, "apps", "antdt-train")
DATAGEN = os.path.join(BUILD, "apps", "antdt-datagen")
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMPI_MCA_rmaps_base_oversubscribe="1", ANTDT_LOG_LEVEL="warn")


def error_lines(stderr, app="antdt-(train|datagen)"):
    """An app's own error lines (Open MPI's notes about a non-zero exit are not antdt's)."""
    return [l for l in stderr.splitlines() if re.match(app + r": error", l)]


def assert_one_error(case, r, code, *needles):
    """`r` (a finished run) exited with `code` and printed exactly one error line, which holds
    every needle; returns that line."""
    case.assertEqual(r.returncode, code, f"stdout={r.stdout}\nstderr={r.stderr}")
    lines = error_lines(r.stderr)
    case.assertEqual(len(lines), 1, f"exactly one error line, got:\n{r.stderr}")
    for needle in needles:
        case.assertIn(needle, lines[0])
    return lines[0]


def read_sample_log(prefix):
    """{step: [samples]} over every rank's --sample-log PREFIX.RANK file, each rank's in rank
    order of the files found (steps may be missing after a kill)."""
    steps = collections.defaultdict(list)
    for path in glob.glob(glob.escape(prefix) + ".*"):
        with open(path) as f:
            for line in f:
                fields = line.split()
                if fields:
                    steps[int(fields[0])].extend(map(int, fields[1:]))
    return steps


def run(cmd, timeout=240, env=None):
    return subprocess.run(list(map(str, cmd)), capture_output=True, text=True, timeout=timeout, env=env or ENV)


class Mount:
    """A small tmpfs at `path` (root only); `ok` is False, with `why`, where it cannot be had."""

    FILLERS = (("filler", 4096), ("filler2", 1))

    def __init__(self, path, size="64k"):
        self.path = path
        os.makedirs(path, exist_ok=True)
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=" + size, "tmpfs", path], capture_output=True,
                           text=True)
        self.ok = r.returncode == 0
        self.why = (r.stderr or r.stdout).strip() or "mount failed"

    def remount(self, mode, wait=0.0):
        """Remounts "ro" or "rw"; False if it could not. A file open for writing makes the kernel
        refuse a read-only remount (EBUSY): with `wait`, try again for that many seconds."""
        deadline = time.monotonic() + wait
        while True:
            if subprocess.run(["mount", "-o", "remount," + mode, self.path], capture_output=True).returncode == 0:
                return True
            if time.monotonic() > deadline:
                return False
            time.sleep(0.005)

    def fill(self):
        """Fills the file system to the last byte."""
        for name, chunk in self.FILLERS:
            try:
                with open(os.path.join(self.path, name), "wb", buffering=0) as f:
                    while True:
                        f.write(b"\0" * chunk)
            except OSError:
                pass

    def unfill(self):
        for name, _ in self.FILLERS:
            if os.path.exists(os.path.join(self.path, name)):
                os.remove(os.path.join(self.path, name))

    def close(self):
        if self.ok:
            subprocess.run(["umount", "-l", self.path], capture_output=True)


def start(np, args, env=None, program=None):
    """An mpirun job in the background (its own process group, so a test can clean up)."""
    return subprocess.Popen(["mpirun", "-np", str(np), program or TRAIN, *map(str, args)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env or ENV, start_new_session=True)


def finish(job, timeout=240):
    try:
        out, err = job.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(job.pid, signal.SIGKILL)
        out, err = job.communicate()
        raise AssertionError("the job did not end within %d s:\n%s" % (timeout, err[-3000:]))
    return subprocess.CompletedProcess(job.args, job.returncode, out, err)


def rank_pids(job, np, timeout=60):
    """{rank: pid} of an mpirun job's processes, from OMPI_COMM_WORLD_RANK in their environment."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        found = {}
        for pid in map(int, filter(str.isdigit, os.listdir("/proc"))):
            try:
                with open("/proc/%d/environ" % pid, "rb") as f:
                    env = dict(kv.split(b"=", 1) for kv in f.read().split(b"\0") if b"=" in kv)
                with open("/proc/%d/stat" % pid) as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError):
                continue
            if ppid == job.pid and b"OMPI_COMM_WORLD_RANK" in env:
                found[int(env[b"OMPI_COMM_WORLD_RANK"])] = pid
        if len(found) == np:
            return found
        time.sleep(0.05)
    raise AssertionError("did not find the job's %d rank processes" % np)


def cpu_seconds(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
