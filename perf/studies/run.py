#!/usr/bin/env python3
"""antdt scaling studies: one command each, CSV + PNG into perf/results/.

    perf/studies/run.py heterogeneity|overhead|scaling|control|all [--long] [--build DIR] [--out DIR]

(perf/studies/<study>.sh runs one of them.) Every study measures on this machine and writes
perf/results/<study>.csv (one row per measurement, with how it was measured) and
perf/results/<study>.png (plotted by plot.py, labelled with machine, ranks, emulation and date).
"real" rows come from MPI runs of the Session on this machine; "simulated" rows from antdt-sim
(the real step code on simulated ranks, with modelled compute and network). The default runs
take minutes; --long runs more ranks, steps and repeats. Standard library only; the plot needs
matplotlib (python3-matplotlib, scripts/install-deps.sh), found in this or the system python.
"""
import argparse
import csv
import datetime
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
           "OMPI_MCA_rmaps_base_oversubscribe": "1", "OPENBLAS_NUM_THREADS": "1", "ANTDT_LOG_LEVEL": "warn"}

# Speed profiles as KIND:FRACTION blocks, as antdt-sim --profile takes them.
PROFILES = {
    "one-third": "1:0.75,0.33:0.25",          # a quarter of the ranks at 1/3 speed
    "half-half": "1:0.5,0.5:0.5",             # two GPU generations, 2x apart
    "three-gens": "1:0.5,0.5:0.25,0.33:0.25",  # three generations
}


def speeds_of_profile(profile, ranks):
    """The per-rank speeds antdt-sim gives a profile (contiguous blocks, rank i at (i+0.5)/P)."""
    entries = [(float(k), float(f)) for k, f in (item.split(":") for item in profile.split(","))]
    speeds = []
    for i in range(ranks):
        at, upto, k = (i + 0.5) / ranks, 0.0, 0
        while k + 1 < len(entries) and at >= upto + entries[k][1]:
            upto += entries[k][1]
            k += 1
        speeds.append(entries[k][0])
    return speeds


class Context:
    def __init__(self, args):
        self.long = args.long
        self.build = os.path.abspath(args.build)
        self.out = os.path.abspath(args.out)
        os.makedirs(self.out, exist_ok=True)
        self.date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
        self.machine = machine()
        self.sim = self.exe("apps", "antdt-sim")
        self.bench_session = self.exe("perf", "session", "antdt-bench-session")
        self.bench_dds = self.exe("perf", "dds", "antdt-bench-dds")
        self.env = dict(os.environ, **MPI_ENV)
        self.mpirun = shutil.which("mpirun") or "mpirun"
        self.load_at_start = os.getloadavg()[0]

    def exe(self, *parts):
        return os.path.join(self.build, *parts)

    def need(self, *paths):
        missing = [p for p in paths if not os.path.exists(p)]
        if missing:
            sys.exit("run.py: build these first (cmake --build BUILD --target ...): " + ", ".join(missing))

    def run(self, cmd, timeout=1800):
        print("  $ " + " ".join(map(str, cmd)), flush=True)
        r = subprocess.run(list(map(str, cmd)), capture_output=True, text=True, env=self.env, timeout=timeout)
        if r.returncode != 0:
            sys.exit(f"run.py: command failed ({r.returncode}):\n{r.stdout}\n{r.stderr}")
        return r.stdout

    def mpi(self, ranks, cmd, timeout=1800):
        return self.run([self.mpirun, "-np", ranks, *cmd], timeout)

    def sim_json(self, *args):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "sim.json")
            self.run([self.sim, *args, "--summary-json", path])
            with open(path) as f:
                return json.load(f)

    def sim_policies(self):
        """static and dd, plus nd where this antdt-sim runs it (a 2-step nd simulation)."""
        policies = ["static", "dd"]
        probe = subprocess.run([self.sim, "--ranks", "4", "--steps", "2", "--policy", "nd"],
                               capture_output=True, text=True, env=self.env)
        if probe.returncode == 0:
            policies.append("nd")
        else:
            print("  (a 2-step nd simulation failed; nd left out: %s)" % (probe.stderr.strip().splitlines() or ["?"])[-1])
        return policies

    def real_policies(self, sim_policies):
        """static and dd, plus nd when the simulator has it and a short real 2-rank run with it works."""
        policies = ["static", "dd"]
        if "nd" in sim_policies:
            probe = subprocess.run([self.mpirun, "-np", "2", self.bench_session, "--mode", "efficiency", "--policies",
                                    "nd", "--steps", "12", "--warmup", "2", "--repeats", "1"],
                                   capture_output=True, text=True, env=self.env)
            if probe.returncode == 0:
                policies.append("nd")
            else:
                print("  (the Session refused --policies nd in a short real run; nd simulated only)")
        return policies

    def write(self, study, rows, meta):
        path = os.path.join(self.out, study + ".csv")
        fields = list(rows[0].keys())
        for r in rows:
            fields += [k for k in r if k not in fields]
        with open(path, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=fields)
            w.writeheader()
            w.writerows(rows)
        meta = dict(meta, study=study, date=self.date, machine=self.machine, long=self.long,
                    load_average=[self.load_at_start, os.getloadavg()[0]])
        with open(os.path.join(self.out, study + ".json"), "w") as f:
            json.dump(meta, f, indent=2)
        print(f"wrote {path}")
        plot(study, self.out)


def machine():
    cpu = platform.processor() or "cpu"
    try:
        with open("/proc/cpuinfo") as f:
            names = [l.split(":", 1)[1].strip() for l in f if l.startswith("model name")]
        if names:
            cpu = names[0]
    except OSError:
        pass
    gpu = "no GPU" if shutil.which("nvidia-smi") is None else "GPU present (not used)"
    return f"{os.cpu_count()} cores ({cpu}), {gpu}"


def plot(study, out):
    here = os.path.dirname(os.path.abspath(__file__))
    for py in dict.fromkeys([sys.executable, "python3", "/usr/bin/python3"]):
        exe = shutil.which(py) or py
        if not os.path.exists(exe):
            continue
        if subprocess.run([exe, "-c", "import matplotlib"], capture_output=True).returncode == 0:
            subprocess.run([exe, os.path.join(here, "plot.py"), study, out], check=True)
            return
    print("run.py: no python with matplotlib (apt-get install python3-matplotlib): CSV written, no PNG")


def bench_efficiency(ctx, speeds, policies, c, batch, steps, repeats):
    """antdt-bench-session --mode efficiency: RESULT lines -> {policy: (efficiency, throughput)}."""
    out = ctx.mpi(len(speeds), [ctx.bench_session, "--mode", "efficiency", "--speeds", ",".join(map(str, speeds)),
                                "--policies", ",".join(policies), "--virtual-device", c, "--global-batch", batch,
                                "--steps", steps, "--warmup", 10, "--repeats", repeats])
    res = {}
    for m in re.finditer(r"RESULT efficiency .*policy=(\S+) median_efficiency=(\S+) median_throughput=(\S+) "
                         r"median_control_fraction=(\S+)", out):
        res[m.group(1)] = (float(m.group(2)), float(m.group(3)), float(m.group(4)))
    return res


# --- heterogeneity ------------------------------------------------------------------------

def heterogeneity(ctx):
    ctx.need(ctx.sim, ctx.bench_session)
    rows = []
    # nd (default --backup-workers 1) joins where a short run of it works: in the simulated runs,
    # and in the real ones if the Session takes it.
    policies = ctx.sim_policies()
    real_policies = ctx.real_policies(policies)
    # Steps of 10-40 ms: on shared cores a sleeping slow rank waits for a core while the others
    # poll in MPI, which costs a few percent at this c, more at shorter steps (tests/apps/test_sim.py).
    c, steps, repeats = 2e-4, (150 if ctx.long else 60), (5 if ctx.long else 3)
    real_ranks = [2, 3, 4, 6, 8] if ctx.long else [2, 4, 8]
    for name, profile in PROFILES.items():
        for p in real_ranks:
            speeds = speeds_of_profile(profile, p)
            ideal = sum(speeds) / c
            for policy, (eff, thr, ctrl) in bench_efficiency(ctx, speeds, real_policies, c, 64 * p, steps,
                                                              repeats).items():
                rows.append(dict(kind="real", profile=name, ranks=p, policy=policy, efficiency=eff, throughput=thr,
                                 ideal_throughput=ideal, sum_x=ideal, static_limit=p * min(speeds) / sum(speeds),
                                 steps=steps, repeats=repeats, control_fraction=ctrl))
    sim_ranks = [10, 100, 1000, 10000] + ([100000] if ctx.long else [])
    sim_steps = 300 if ctx.long else 100
    for name, profile in PROFILES.items():
        for p in sim_ranks:
            res = ctx.sim_json("--ranks", p, "--profile", profile, "--batch-per-rank", 256, "--steps", sim_steps,
                               "--policy", *policies)
            speeds = speeds_of_profile(profile, p)
            for r in res["policies"]:
                # Settled: from the step the first plan change is in force (step 0 without one), as
                # the real dd starts from a probe's split and skips 10 warm-up steps.
                rows.append(dict(kind="simulated", profile=name, ranks=p, policy=r["policy"],
                                 efficiency=r["settled_efficiency"],
                                 throughput=r["settled_efficiency"] * r["ideal_throughput"],
                                 ideal_throughput=r["ideal_throughput"], sum_x=r["ideal_throughput"],
                                 static_limit=p * min(speeds) / sum(speeds), steps=sim_steps, repeats=1,
                                 efficiency_whole_run=r["efficiency"], settled_from_step=r["settled_from_step"]))
    for r in rows:
        assert r["efficiency"] <= 1.0 + 1e-9, f"efficiency above 1 is a measurement error: {r}"
    ctx.write("heterogeneity", rows, dict(
        real=f"antdt-bench-session --mode efficiency: virtual device c={c} s/sample (speeds EMULATED), MLP 16,32,4, "
             f"B=64 x ranks, {steps} steps (10 warm-up), median of {repeats}; 2-8 MPI ranks on this machine's cores "
             "(oversubscribed above 2)",
        simulated=f"antdt-sim: c=1e-3 s/sample, 256 samples per rank, {sim_steps} steps, default network model, "
                  "rank 0's real decision time charged; efficiency once the first plan change is in force",
        policies=policies, profiles=PROFILES))


# --- overhead -----------------------------------------------------------------------------

def overhead(ctx):
    ctx.need(ctx.bench_session)
    rows = []
    repeats, steps = (9, 300) if ctx.long else (5, 150)
    for p in [1, 2]:  # at most one rank per core: real compute
        out = ctx.mpi(p, [ctx.bench_session, "--mode", "overhead", "--repeats", repeats, "--steps", steps,
                          "--layers", "64,256,256,10", "--global-batch", 512])
        for m in re.finditer(r"^(\d+)\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)%$", out, re.M):
            rows.append(dict(kind="real", ranks=p, repeat=int(m.group(1)), bare_throughput=float(m.group(2)),
                             antdt_throughput=float(m.group(3)), ratio=float(m.group(4)),
                             control_percent=float(m.group(5))))
    ctx.write("overhead", rows, dict(
        real=f"antdt-bench-session --mode overhead: equal speeds, REAL compute (host MLP 64,256,256,10, B=512, "
             f"1 BLAS thread), {steps} steps, {repeats} alternating repeats; the Session loop against the same "
             "kernels with fixed batches and one MPI_Allreduce; at most one rank per core"))


# --- scaling ------------------------------------------------------------------------------

def scaling(ctx):
    ctx.need(ctx.sim, ctx.bench_session)
    rows = []
    c, steps, repeats = 2e-4, (150 if ctx.long else 60), (5 if ctx.long else 3)
    for p in [1, 2, 4, 8]:
        for mode, batch in (("strong", 256), ("weak", 64 * p)):
            res = bench_efficiency(ctx, [1.0] * p, ["static"], c, batch, steps, repeats)["static"]
            rows.append(dict(kind="real", mode=mode, ranks=p, global_batch=batch, throughput=res[1],
                             ideal_throughput=p / c, efficiency=res[0], speedup=None))
    sim_ranks = [1, 10, 100, 1000, 10000] + ([100000] if ctx.long else [])
    sim_steps = 60 if ctx.long else 30
    gradient = 100_000_000  # a 25M-parameter fp32 model
    for p in sim_ranks:
        for mode, batch_args in (("strong", ["--global-batch", 1 << 20]), ("weak", ["--batch-per-rank", 256])):
            r = ctx.sim_json("--ranks", p, *batch_args, "--steps", sim_steps, "--policy", "static",
                             "--gradient-bytes", gradient)["policies"][0]
            rows.append(dict(kind="simulated", mode=mode, ranks=p,
                             global_batch=(1 << 20) if mode == "strong" else 256 * p, throughput=r["throughput"],
                             ideal_throughput=r["ideal_throughput"], efficiency=r["efficiency"], speedup=None,
                             allreduce_seconds=r["allreduce_seconds"]))
    for kind in ("real", "simulated"):
        for mode in ("strong", "weak"):
            sel = [r for r in rows if r["kind"] == kind and r["mode"] == mode]
            base = min(sel, key=lambda r: r["ranks"])
            for r in sel:
                r["speedup"] = r["throughput"] / base["throughput"]
    ctx.write("scaling", rows, dict(
        real=f"antdt-bench-session --mode efficiency, equal speeds, virtual device c={c} s/sample (EMULATED), "
             f"MLP 16,32,4, {steps} steps, median of {repeats}; strong: B=256, weak: B=64 x ranks; 1-8 MPI ranks "
             "(oversubscribed above 2)",
        simulated=f"antdt-sim: equal speeds, c=1e-3 s/sample, {sim_steps} steps, gradient all-reduce of "
                  f"{gradient // 1_000_000} MB over the default network model (5 us, 10 GB/s links, the faster of "
                  "ring and tree); strong: B=2^20, weak: 256 per rank"))


# --- control ------------------------------------------------------------------------------

def control(ctx):
    ctx.need(ctx.sim, ctx.bench_dds)
    rows = []
    steps = 20000 if ctx.long else 3000
    for p in [1, 2, 4, 8]:
        out = ctx.mpi(p, [ctx.bench_dds, "--sections", "2", "--exchange-steps", steps])
        b = re.search(r"bytes received per rank per step: mean (\S+), max (\d+)", out)
        t = re.search(r"step latency with no compute: (\S+) us/step", out)
        rows.append(dict(kind="real", ranks=p, report_bytes=69, reply_bytes=int(b.group(2)),
                         reply_bytes_mean=float(b.group(1).rstrip(",")), gather_bytes_at_rank0=69 * p,
                         exchange_us=float(t.group(1)), decision_us=None))
    sim_ranks = [10, 100, 1000, 10000, 100000] + ([1000000] if ctx.long else [])
    for p in sim_ranks:
        r = ctx.sim_json("--ranks", p, "--batch-per-rank", 32, "--steps", 40 if ctx.long else 20, "--policy",
                         "static")["policies"][0]
        rows.append(dict(kind="simulated", ranks=p, report_bytes=r["report_bytes"],
                         reply_bytes=r["reply_bytes_typical"], reply_bytes_mean=None,
                         gather_bytes_at_rank0=r["gather_bytes_at_rank0"], exchange_us=1e6 * r["control_seconds_median"],
                         decision_us=1e6 * r["decision_seconds_median"],
                         dds_us=1e6 * r.get("dds_seconds_median", 0.0)))
    ctx.write("control", rows, dict(
        real=f"antdt-bench-dds section [2]: the Session's control exchange over MPI with no model, 32 samples per "
             f"rank per step, {steps} steps; latency includes everything between steps (no compute); 1-8 MPI ranks "
             "(oversubscribed above 2)",
        simulated="antdt-sim, static, 32 samples per rank: bytes are the real encoded messages (the real transport "
                  "scatters each reply in a 256-byte slot); exchange time is the modelled gather + scatter (5 us, "
                  "10 GB/s links, binomial tree); decision time is rank 0's real StepCoordinator::decide on this "
                  "machine"))


STUDIES = {"heterogeneity": heterogeneity, "overhead": overhead, "scaling": scaling, "control": control}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("study", choices=[*STUDIES, "all"])
    ap.add_argument("--long", action="store_true", help="more ranks, steps and repeats (tens of minutes)")
    ap.add_argument("--build", default=os.environ.get("ANTDT_BUILD", os.path.join(ROOT, "build")))
    ap.add_argument("--out", default=os.path.join(ROOT, "perf", "results"))
    args = ap.parse_args()
    ctx = Context(args)
    for name in (STUDIES if args.study == "all" else [args.study]):
        print(f"== {name}{' (long)' if args.long else ''}: {ctx.machine}, {ctx.date}", flush=True)
        ctx.load_at_start = os.getloadavg()[0]  # other work on the machine makes real figures noisier
        STUDIES[name](ctx)


if __name__ == "__main__":
    main()
