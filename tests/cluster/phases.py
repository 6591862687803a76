"""Every phase of a run guarded on the namespace cluster (issue 28; docs/errors.md "A stalled
rank"; tests/apps/test_phases.py is the same on one node): three ranks, one on each of the nodes
n1, n2, n3, which talk over TCP. In each of the ten phases one rank stops itself
(ANTDT_TEST_STALL=PHASE:RANK[:STEP], a hook of the Guard's, so that the phase is hit exactly),
and the job must end with exit code 5 within the step timeout plus the stated grace, with lines
that name the stopped rank and its node and never a healthy one, while the waiting ranks sleep
(under 0.1 of a core). The runs are independent jobs (srun, one rank per node), several at a
time on one cluster: each waits mostly on the timeout, so together they take about as long as
the slowest two.

    python3 phases.py BUILD_DIR WORK_DIR     (SLURM_CONF of a running cluster of 3 nodes)
"""
import concurrent.futures
import os
import re
import signal
import subprocess
import sys
import threading
import time

BUILD, WORK = (os.path.abspath(p) for p in sys.argv[1:3])
TRAIN = os.path.join(BUILD, "apps", "antdt-train")
DATAGEN = os.path.join(BUILD, "apps", "antdt-datagen")
TIMEOUT = 2.0
GRACE = 5.0  # grace_seconds(timeout) = max(5, timeout / 10)
EXIT_STALLED = 5
RANKS = 3
AT_ONCE = 5  # jobs at a time; the cluster's nodes have a CPU for each
# (name, ANTDT_TEST_STALL, the stopped rank); the longest first: a stopped rank 0 is found by
# the others only after the timeout and two graces.
CASES = [("checkpoint_the_writer", "checkpoint:0:5", 0), ("startup", "startup:1", 1), ("probe", "probe:2", 2),
         ("step", "step:1:3", 1), ("reduction", "reduction:1:3", 1), ("control_exchange", "control:2:3", 2),
         ("evaluation", "evaluation:1:3", 1), ("checkpoint_another_rank", "checkpoint:1:5", 1),
         ("resume", "resume:2", 2), ("end_of_run", "end:1", 1)]
# Open MPI 4.1.4's TCP BTL between the nodes now and then fails at start-up, inside MPI_Init:
# "connect() to ... failed", or a rank segfaults there (a core dump: a call through a null
# pointer in mca_btl_tcp.so, from opal_progress in ompi_mpi_init, as a peer that had left
# MPI_Init connected to it; its printed backtrace is frame 0 alone). Such a run is started again,
# once, and only such a run: each rank logs "MPI started" (at debug level) as MPI_Init returns,
# so a crash after every rank said it (antdt's own) fails the test.
TCP_CONNECT_FAILED = re.compile(r"failed to TCP connect|connect\(\) to .* failed")


def startup_failed(err):
    """Whether Open MPI's start-up failed in a run's output (above)."""
    if TCP_CONNECT_FAILED.search(err):
        return True
    return "Process received signal" in err and err.count("debug] MPI started") < RANKS


print_lock = threading.Lock()


def say(text):
    with print_lock:
        print(text, flush=True)


def proc_field(pid, index):
    with open("/proc/%d/stat" % pid) as f:
        return f.read().rsplit(")", 1)[1].split()[index]


def stopped(pid):
    try:
        return proc_field(pid, 0) == "T"
    except OSError:
        return False


def cpu_seconds(pid):
    try:
        return (int(proc_field(pid, 11)) + int(proc_field(pid, 12))) / os.sysconf("SC_CLK_TCK")
    except OSError:
        return None


def ranks_of(marker):
    """{rank: (pid, node)} of the antdt-train processes whose environment has ANTDT_PHASE_RUN=marker."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/comm" % entry) as f:
                if f.read().strip() != "antdt-train":
                    continue
            with open("/proc/%s/environ" % entry, "rb") as f:
                env = dict(v.split("=", 1) for v in f.read().decode(errors="replace").split("\0") if "=" in v)
        except OSError:
            continue
        if env.get("ANTDT_PHASE_RUN") == marker and "SLURM_PROCID" in env:
            found[int(env["SLURM_PROCID"])] = (int(entry), env.get("SLURMD_NODENAME", "?"))
    return found


def args(ckpt, *extra):
    return ["--data", os.path.join(WORK, "train.h5"), "--eval-data", os.path.join(WORK, "eval.h5"), "--eval-every", 4,
            "--steps", 20, "--global-batch", 60, "--virtual-device", "0.0005", "--step-timeout", TIMEOUT,
            "--checkpoint-dir", ckpt, "--checkpoint-every", 5, "--quiet", *extra]


def srun(marker, stall, train_args):
    env = dict(os.environ, ANTDT_PHASE_RUN=marker, ANTDT_LOG_LEVEL="debug")  # "MPI started": startup_failed
    env.pop("ANTDT_TEST_STALL", None)
    if stall:
        env["ANTDT_TEST_STALL"] = stall
    cmd = ["srun", "--mpi=pmix", "--kill-on-bad-exit=1", "-N", str(RANKS), "--ntasks-per-node=1", "-J", marker, TRAIN,
           *map(str, train_args)]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def check(name, stall, named):
    """Runs the case; returns a line of what it measured, or raises AssertionError."""
    ckpt = os.path.join(WORK, "ckpt-" + name)
    extra = []
    if name == "resume":  # a checkpoint to resume from first (in a fresh folder if started again)
        for attempt in (1, 2):
            ckpt = os.path.join(WORK, "ckpt-%s-%d" % (name, attempt))
            job = srun("%d-%s-first-%d" % (os.getpid(), name, attempt), None, args(ckpt, "--steps", 6))
            out, err = job.communicate(timeout=120)
            if job.returncode == 0:
                break
            assert attempt == 1 and startup_failed(err), \
                "the run to resume from failed (%d): %s" % (job.returncode, err[-2000:])
            say("note: %s: Open MPI's TCP start-up failed in the run to resume from; starting it again" % name)
        extra = ["--resume"]
    for attempt in (1, 2):
        marker = "%d-%s-%d" % (os.getpid(), name, attempt)  # this test's own, beside any other run of it
        job = srun(marker, stall, args(ckpt, *extra))
        pids, deadline = {}, time.time() + 90
        while job.poll() is None and time.time() < deadline:
            pids = ranks_of(marker)
            if named in pids and stopped(pids[named][0]):
                break
            time.sleep(0.01)
        if named in pids and stopped(pids[named][0]):
            break
        if job.poll() is None:
            job.kill()
        out, err = job.communicate()
        if attempt == 1 and startup_failed(err):
            say("note: %s: Open MPI's TCP start-up failed; starting the run again" % name)
            continue
        raise AssertionError("%s: rank %d did not stop itself at %s (exit %s): %s" %
                             (name, named, stall, job.returncode, err[-2000:]))
    t_stop = time.time()
    assert len(pids) == RANKS, "%s: ranks %s found, not %d" % (name, sorted(pids), RANKS)
    nodes = {r: node for r, (_, node) in pids.items()}
    assert len(set(nodes.values())) == RANKS, "%s: the ranks share nodes: %s" % (name, nodes)
    # The others wait for it: over a second of that wait they must sleep, not spin.
    time.sleep(0.5)
    before = {r: cpu_seconds(pid) for r, (pid, _) in pids.items() if r != named}
    time.sleep(1.0)
    after = {r: cpu_seconds(pid) for r, (pid, _) in pids.items() if r != named}
    spent = {r: after[r] - before[r] for r in before if before[r] is not None and after[r] is not None}
    try:
        out, err = job.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        job.kill()
        out, err = job.communicate()
        raise AssertionError("%s: the job still ran 60 s after the stall: %s" % (name, err[-2000:]))
    finally:
        try:
            os.kill(pids[named][0], signal.SIGKILL)
        except ProcessLookupError:
            pass
    took = time.time() - t_stop
    assert job.returncode == EXIT_STALLED, "%s: exit %d, not %d: %s" % (name, job.returncode, EXIT_STALLED, err[-3000:])
    # Rank 0 judges at the timeout and gives the others the grace to answer; a stopped rank 0 is
    # found by the others, which wait the timeout and a grace before they ask it, and a grace for
    # its answer. Plus srun's teardown.
    limit = TIMEOUT + (3 * GRACE if named == 0 else GRACE) + 3
    assert took < limit, "%s: the job ended %.1f s after the stall (limit %.1f s)" % (name, took, limit)
    lines = [l for l in err.splitlines() if l.startswith("antdt-train: error")]
    assert lines, "%s: no error line: %s" % (name, err[-3000:])
    for line in lines:
        assert re.search(r"stall|not answered", line), line
        # Every rank a line mentions is the stopped one or the rank that reports it; every node it
        # mentions is the stopped rank's (or the reporter's): a healthy node is never blamed.
        reporter = re.search(r"error(?: \(rank (\d+)\))?:", line)
        allowed = {named} | ({int(reporter.group(1))} if reporter and reporter.group(1) else set())
        mentioned = {int(m) for m in re.findall(r"\brank (\d+)", line.split(":", 1)[1])}
        assert named in mentioned, "%s: the line does not name rank %d: %s" % (name, named, line)
        assert mentioned <= allowed, "%s: a healthy rank is named: %s" % (name, line)
        blamed = set(re.findall(r"\bnode ([^)\s,]+)", line))
        assert blamed <= {nodes[r] for r in allowed}, "%s: a healthy node is named (%s): %s" % (name, nodes, line)
    # In every phase, start-up included: before the ranks have told rank 0 their nodes, it
    # names them from Slurm's layout of the srun step (one task on each of the three nodes).
    want = r"rank %d \(node %s\)" % (named, re.escape(nodes[named]))
    assert re.search(want, lines[0]), "%s: '%s' not in: %s" % (name, want, lines[0])
    assert len(spent) == RANKS - 1, "%s: the waiting ranks ended within 1.5 s of the stall" % name
    for rank, cpu in spent.items():
        assert cpu < 0.1, "%s: rank %d used %.2f s of CPU in 1 s of waiting" % (name, rank, cpu)
    return "%-24s rank %d on %s stopped; exit 5 after %4.1f s (limit %4.1f); waiting ranks' CPU in 1 s: %s\n    %s" % (
        name, named, nodes[named], took, limit, ", ".join("%.2f" % spent[r] for r in sorted(spent)), lines[0])


def main():
    r = subprocess.run([DATAGEN, "-o", os.path.join(WORK, "train.h5"), "-n", "3000", "--eval-output",
                        os.path.join(WORK, "eval.h5"), "--eval-samples", "300"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    failures = []
    with concurrent.futures.ThreadPoolExecutor(AT_ONCE) as pool:
        runs = {pool.submit(check, name, stall, named): name for name, stall, named in CASES}
        for done in concurrent.futures.as_completed(runs):
            try:
                say("ok: " + done.result())
            except AssertionError as e:
                failures.append(runs[done])
                say("FAIL: %s" % e)
    if failures:
        say("phases that failed: " + ", ".join(failures))
        return 1
    say("every phase guarded on the cluster: %d phases" % len(CASES))
    return 0


if __name__ == "__main__":
    sys.exit(main())
