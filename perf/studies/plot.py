#!/usr/bin/env python3
"""Plots one study's CSV (perf/studies/run.py) into a PNG beside it, labelled with how it was
measured: `plot.py STUDY DIR` reads DIR/STUDY.csv and DIR/STUDY.json, writes DIR/STUDY.png."""
import csv
import json
import os
import sys
import textwrap

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

COLORS = {"static": "tab:gray", "dd": "tab:blue", "nd": "tab:green"}


def num(v):
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def caption(fig, meta, extra=""):
    width = int(fig.get_figwidth() * 16)  # characters of 7-point monospace across the figure
    head = f"{meta['study']}: measured {meta['date']} on {meta['machine']}" + (" (long run)" if meta["long"] else "")
    if "load_average" in meta:
        head += "; load average (1 min) at start / end: %.1f / %.1f" % tuple(meta["load_average"])
    lines = textwrap.wrap(head, width)
    for kind in ("real", "simulated"):
        if kind in meta:
            lines += textwrap.wrap(f"{kind}: {meta[kind]}", width)
    if extra:
        lines += textwrap.wrap(extra, width)
    fig.text(0.01, 0.01, "\n".join(lines), fontsize=7, va="bottom", family="monospace")
    return len(lines)


def finish(fig, meta, path, extra=""):
    n = caption(fig, meta, extra)
    fig.tight_layout(rect=(0, 0.02 + 0.022 * n, 1, 1))
    fig.savefig(path, dpi=110)
    print(f"wrote {path}")


def heterogeneity(rows, meta, path):
    profiles = list(meta["profiles"])
    fig, axes = plt.subplots(1, len(profiles), figsize=(5 * len(profiles), 4.6), sharey=True)
    for ax, prof in zip(axes, profiles):
        sel = [r for r in rows if r["profile"] == prof]
        for policy in meta["policies"]:
            for kind, marker, style in (("real", "o", "-"), ("simulated", "s", "--")):
                pts = sorted((int(r["ranks"]), num(r["efficiency"])) for r in sel
                             if r["policy"] == policy and r["kind"] == kind)
                if pts:
                    ax.plot(*zip(*pts), marker=marker, linestyle=style, color=COLORS.get(policy),
                            label=f"{policy} ({kind})")
        limit = sorted({(int(r["ranks"]), num(r["static_limit"])) for r in sel})
        ax.plot(*zip(*limit), color="black", linewidth=0.8, linestyle=":", label="static limit N·min(x)/Σx")
        ax.set_xscale("log")
        ax.set_ylim(0, 1.05)
        ax.axhline(1.0, color="black", linewidth=0.5)
        ax.set_title(f"{prof}: {meta['profiles'][prof]}", fontsize=9)
        ax.set_xlabel("ranks (2-8 real, 10+ simulated)")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("efficiency = throughput / Σxᵢ")
    axes[-1].legend(fontsize=7, loc="lower left")
    finish(fig, meta, path, "speeds EMULATED; Σxᵢ = Σ speedᵢ / c, the ideal; policies: " + ", ".join(meta["policies"]))


def overhead(rows, meta, path):
    fig, ax = plt.subplots(figsize=(6, 4.2))
    for p in sorted({int(r["ranks"]) for r in rows}):
        ratios = sorted(num(r["ratio"]) for r in rows if int(r["ranks"]) == p)
        ax.scatter([p] * len(ratios), ratios, color="tab:blue", alpha=0.6)
        med = ratios[len(ratios) // 2]
        ax.hlines(med, p - 0.2, p + 0.2, color="tab:blue", linewidth=2)
        ax.annotate(f"median {med:.3f}", (p + 0.22, med), fontsize=8, va="center")
    ax.axhline(0.97, color="tab:red", linestyle="--", linewidth=0.8, label="goal ≥ 0.97")
    ax.axhline(1.0, color="black", linewidth=0.5)
    ax.set_xticks(sorted({int(r["ranks"]) for r in rows}))
    ax.set_xlim(0.5, 2.9)
    ax.set_xlabel("MPI ranks (one per core)")
    ax.set_ylabel("antdt / bare loop throughput")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    finish(fig, meta, path, "no stragglers, no emulation")


def scaling(rows, meta, path):
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.6))
    for ax, mode in zip(axes, ("strong", "weak")):
        for kind, marker, style in (("real", "o", "-"), ("simulated", "s", "--")):
            sel = sorted((int(r["ranks"]), num(r["efficiency"])) for r in rows
                         if r["mode"] == mode and r["kind"] == kind)
            ax.plot(*zip(*sel), marker=marker, linestyle=style, label=f"{kind}")
        ax.set_xscale("log")
        ax.set_ylim(0, 1.05)
        ax.axhline(1.0, color="black", linewidth=0.5)
        ax.set_title(f"{mode} scaling" + (": fixed global batch" if mode == "strong" else ": fixed batch per rank"),
                     fontsize=9)
        ax.set_xlabel("ranks (1-8 real, 1-10,000+ simulated)")
        ax.set_ylabel("efficiency = throughput / (ranks x one rank's standalone x)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    finish(fig, meta, path, "equal speeds (no stragglers)")


def control(rows, meta, path):
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.6))
    ax = axes[0]
    for kind, marker, style in (("real", "o", "-"), ("simulated", "s", "--")):
        sel = sorted((int(r["ranks"]), r) for r in rows if r["kind"] == kind)
        xs = [p for p, _ in sel]
        ax.plot(xs, [num(r["reply_bytes"]) for _, r in sel], marker=marker, linestyle=style, color="tab:blue",
                label=f"received per rank ({kind})")
        ax.plot(xs, [num(r["report_bytes"]) for _, r in sel], marker=marker, linestyle=style, color="tab:orange",
                label=f"sent per rank ({kind})")
        ax.plot(xs, [num(r["gather_bytes_at_rank0"]) for _, r in sel], marker=marker, linestyle=style,
                color="tab:red", label=f"gathered at rank 0 ({kind})")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("ranks")
    ax.set_ylabel("control bytes per step")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    ax = axes[1]
    real = sorted((int(r["ranks"]), num(r["exchange_us"])) for r in rows if r["kind"] == "real")
    ax.plot(*zip(*real), marker="o", label="whole step, no compute (real MPI)")
    sim = sorted((int(r["ranks"]), r) for r in rows if r["kind"] == "simulated")
    ax.plot([p for p, _ in sim], [num(r["exchange_us"]) for _, r in sim], marker="s", linestyle="--",
            label="gather + scatter (simulated network)")
    ax.plot([p for p, _ in sim], [num(r["decision_us"]) for _, r in sim], marker="s", linestyle="--",
            label="rank 0 decide (real, this machine)")
    if all(num(r.get("dds_us")) is not None for _, r in sim):
        ax.plot([p for p, _ in sim], [num(r["dds_us"]) for _, r in sim], marker="s", linestyle=":",
                label="  of which DDS (real)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("ranks")
    ax.set_ylabel("µs per step")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    finish(fig, meta, path)


def main():
    study, out = sys.argv[1], sys.argv[2]
    with open(os.path.join(out, study + ".csv")) as f:
        rows = list(csv.DictReader(f))
    with open(os.path.join(out, study + ".json")) as f:
        meta = json.load(f)
    {"heterogeneity": heterogeneity, "overhead": overhead, "scaling": scaling, "control": control}[study](
        rows, meta, os.path.join(out, study + ".png"))


if __name__ == "__main__":
    main()
