"""A rank that stalls in a Session's step is named by rank 0 and every rank stops within the
step timeout (tests/session/test_stalls.cpp runs one scenario per process).

    python3 check_stalls.py MPIEXEC NP_FLAG TEST_STALLS NP SCENARIO
"""
import os
import subprocess
import sys
import tempfile

mpiexec, np_flag, exe, np, scenario = sys.argv[1:6]
np = int(np)
env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMPI_MCA_rmaps_base_oversubscribe="1", ANTDT_LOG_LEVEL="warn")
with tempfile.TemporaryDirectory() as d:
    subprocess.run([mpiexec, np_flag, str(np), exe, scenario, d], env=env, capture_output=True, timeout=120)
    results = {}
    for r in range(np):
        path = os.path.join(d, f"result.{r}")
        if os.path.exists(path):
            results[r] = dict(line.rstrip("\n").split("=", 1) for line in open(path) if "=" in line)
failures = []


def check(ok, what):
    if not ok:
        failures.append(what)


stalled = 1 if scenario == "inner" else np - 1
check(0 in results, "rank 0 wrote no result")
r0 = results.get(0, {})
if scenario == "mismatch":
    # Not a stall: every rank is alive, in another call. A usage error, the same on every rank,
    # that names the odd rank and both calls.
    for r in range(np):
        res = results.get(r, {})
        check(res.get("usage") == "1", f"rank {r} threw a usage error: {res}")
        check(res.get("step") == "2", f"rank {r} stopped at step 2: {res.get('step')}")
        check(res.get("what") == r0.get("what"), f"rank {r} throws rank 0's message: {res.get('what')}")
        check((res.get("first_hand") == "1") == (r == 0), f"only rank 0 reports it first-hand: rank {r}")
    what = r0.get("what", "")
    check("different antdt calls" in what and f"rank {stalled}" in what, f"the message names the odd rank: {what}")
    check("gradient reduction" in what and "control exchange" in what, f"the message names both calls: {what}")
    check(float(r0.get("run", 99)) < 2.4, f"rank 0 stopped at the timeout: {r0.get('run')} s")
    for f in failures:
        print("FAIL:", f)
    print(f"{len(results)} of {np} ranks reported; {'FAILED' if failures else 'OK'}")
    sys.exit(1 if failures else 0)
check(r0.get("step") == "2", f"rank 0 stopped at step {r0.get('step')}, not the stalled step 2")
check(r0.get("first_hand") == "1", "rank 0 saw the stall first-hand")
check(f"rank {stalled}" in r0.get("what", ""), f"rank 0 names rank {stalled}: {r0.get('what')}")
check("step 2" in r0.get("what", ""), f"rank 0 names step 2: {r0.get('what')}")
check(float(r0.get("run", 99)) < 2.4, f"rank 0 stopped at the timeout, not when the stalled rank returned: {r0.get('run')} s")
for r, res in results.items():
    if r in (0, stalled):
        continue
    check(res.get("step") == "2", f"rank {r} stopped at step {res.get('step')}")
    check(res.get("first_hand") == "0", f"rank {r} heard of the stall from rank 0: {res.get('what')}")
    check(float(res.get("reduce", 99)) < 2.4, f"rank {r} stopped at the timeout, told by rank 0: {res.get('reduce')} s")
    check(res.get("what") == r0.get("what"), f"rank {r} throws rank 0's message: {res.get('what')}")
if stalled in results:  # the late rank came back before the job ended: it hears it too
    check(results[stalled].get("first_hand") == "0", f"the stalled rank heard of it: {results[stalled]}")
for f in failures:
    print("FAIL:", f)
print(f"{len(results)} of {np} ranks reported; {'FAILED' if failures else 'OK'}")
sys.exit(1 if failures else 0)
