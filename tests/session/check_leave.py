"""A rank whose program leaves before the run is over, in C++ (tests/session/leave_early.cpp): a
return out of the training loop, or before the Job is built, on rank 0 or another rank. Issue 44,
item 4: it was blamed as a stalled node (exit 5, "stopped, hung or swapping", its node in
antdt-restart-exclude) after the whole step timeout. Now every rank stops at once, the leaver
named as having ended, no node excluded, and a non-zero code of the leaver's own is the job's.

    python3 check_leave.py MPIEXEC NP_FLAG LEAVE_EARLY
"""
import os
import subprocess
import sys
import tempfile
import time

mpiexec, np_flag, exe = sys.argv[1:4]
env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMPI_MCA_rmaps_base_oversubscribe="1", ANTDT_LOG_LEVEL="warn")
# (scenario, ranks, the leaver, its code, what rank 0 says of it)
CASES = [("in-run", 2, 1, 0, "left the run in"), ("in-run", 3, 2, 3, "left the run in"),
         ("before-job", 2, 1, 3, "ended its program before it built its Job"),
         ("before-job", 3, 2, 0, "ended its program before it built its Job"),
         ("before-job", 3, 0, 0, "ended its program before it built its Job")]
failures = []
for scenario, np, leaver, code, says in CASES:
    name = f"{scenario} np{np} rank {leaver} returns {code}"
    with tempfile.TemporaryDirectory() as d:
        ckpt = os.path.join(d, "ckpt")
        t0 = time.time()
        r = subprocess.run([mpiexec, np_flag, str(np), exe, scenario, str(leaver), str(code), ckpt], env=env,
                           capture_output=True, text=True, timeout=240)
        took = time.time() - t0
        tail = r.stderr[-2000:]

        def check(ok, what):
            if not ok:
                failures.append(f"{name}: {what}\n{tail}")

        check(took < 40, f"every rank stops at once, not after the 60 s step timeout: {took:.1f} s")
        check(r.returncode not in (0, 5), f"an error that is not a stall's: exit {r.returncode}")
        if code != 0:
            check(r.returncode == code, f"the leaver's own code {code} is the job's: exit {r.returncode}")
        check(f"rank {leaver}" in r.stderr and says in r.stderr, f"the leaver is named: '{says}'")
        check("no node is to blame" in r.stderr, "no node is blamed")
        check("stopped, hung or swapping" not in r.stderr, "not named as stalled")
        check(r.stderr.count("no node is to blame") == 1, "one line says it")
        check(not os.path.exists(os.path.join(ckpt, "antdt-restart-exclude")), "no node is excluded")
        print(f"{name}: exit {r.returncode} in {took:.1f} s", flush=True)
for f in failures:
    print("FAILED:", f, file=sys.stderr)
sys.exit(1 if failures else 0)
