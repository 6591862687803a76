#!/usr/bin/env python3
"""The anchor benchmark's training loop (perf/python/ddp-vs-antdt.sh): the Python example's CNN
(examples/python/train_cnn.py) on antdt-datagen's digits, one rank per core, in one of three
modes that share everything but the distribution of the work:

  --mode ddp    torch.nn.parallel.DistributedDataParallel over gloo (MASTER_ADDR 127.0.0.1),
                each rank B/P samples of every step (DistributedSampler's equal split of the
                epoch's shuffled order), the mean loss over its samples: what a PyTorch user runs;
  --mode antdt  antdt.Job and antdt.torch.Bridge (policy, emulation: every antdt option), each
                rank the samples antdt gives it, the loss summed;
  --mode speed  no distribution: this process alone computes steps of B/P samples (--share),
                to measure the core's own speed (samples/s and ms a step), as the limit of
                what balancing can gain.

The images are read once into memory by every mode, so the data path is the same tensor
indexing in each. Timing: the training loop after WARMUP steps, wall clock, on rank 0 (the
steps end together: every step ends in a collective). Prints one line, RESULT mode=... .

--parts: each rank also times every part of every timed step, in wall seconds and in the
thread's CPU seconds (what the part computed itself, whatever else ran on the core), and
prints each part's median per step (PARTS mode=... rank=... part=wall/cpu ms ...). The parts:
next_step (antdt: the end of the last step, its control exchange, the start of this one),
indices (antdt: the micro-batches' index arrays; ddp: the sampler's), zero (the gradients),
read (the samples as tensors), forward (and the loss), backward (ddp: with the all-reduce,
which DDP starts from backward's hooks and waits for at its end), gather, reduce (antdt:
Job.reduce), scatter, optimizer (SGD's step).
"""
import argparse
import os
import statistics
import sys
import time
from collections import defaultdict

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples", "python"))
from train_cnn import Cnn  # noqa: E402  the example's model, layer for layer

import antdt  # noqa: E402  (its HDF5 reader; MPI is initialised, and idle, in every mode)
import antdt.torch  # noqa: E402


def load(path):
    data = antdt.Hdf5Dataset(path)
    x, y = data.read(np.arange(len(data), dtype=np.int64))
    return torch.from_numpy(x), torch.from_numpy(y), data.sample_shape, data.num_classes


class Timers:
    """Each step's wall and thread-CPU seconds in each part (a part met several times in a step
    adds up); off, it only runs the code."""

    def __init__(self, on):
        self.on = on
        self.wall, self.cpu = defaultdict(float), defaultdict(float)
        self.walls, self.cpus = defaultdict(list), defaultdict(list)
        self.order = []

    def __call__(self, part, f, *args):
        if not self.on:
            return f(*args)
        w0, c0 = time.perf_counter(), time.thread_time()
        try:
            return f(*args)
        finally:
            self.wall[part] += time.perf_counter() - w0
            self.cpu[part] += time.thread_time() - c0
            if part not in self.order:
                self.order.append(part)

    def end_step(self, timed):
        if self.on and timed:
            for part in self.order:
                self.walls[part].append(self.wall[part])
                self.cpus[part].append(self.cpu[part])
        self.wall.clear()
        self.cpu.clear()

    def report(self, mode, rank):
        if not self.on:
            return
        med = statistics.median
        parts = " ".join(f"{p}={1e3 * med(self.walls[p]):.3f}/{1e3 * med(self.cpus[p]):.3f}" for p in self.order)
        total = sum(med(self.cpus[p]) for p in self.order)
        print(f"PARTS mode={mode} rank={rank} {parts} cpu_sum={1e3 * total:.3f} (median ms per step, wall/cpu)",
              flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mode", choices=["ddp", "antdt", "speed"], required=True)
    parser.add_argument("--data", required=True)
    parser.add_argument("--batch", type=int, default=256, help="the global batch B")
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--seconds", type=float, default=5.0, help="speed mode: how long to measure")
    parser.add_argument("--share", type=int, default=0, help="speed mode: samples a step (default B/P)")
    parser.add_argument("--parts", action="store_true", help="time each part of each step (PARTS lines)")
    args, antdt_args = parser.parse_known_args()
    torch.set_num_threads(1)
    images, labels, shape, classes = load(args.data)
    rank, size = antdt.world_rank(), antdt.world_size()
    torch.manual_seed(0)
    model = Cnn(shape, classes)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)

    if args.mode == "speed":
        share = args.share or args.batch // size
        g = torch.Generator().manual_seed(rank)
        done, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < args.seconds:
            idx = torch.randint(0, len(images), (share,), generator=g)
            optimizer.zero_grad()
            F.cross_entropy(model(images[idx]), labels[idx], reduction="sum").backward()
            optimizer.step()
            done += share
        elapsed = time.perf_counter() - t0
        print(f"RESULT mode=speed rank={rank} samples_per_s={done / elapsed:.1f} step_ms={1e3 * elapsed * share / done:.4f}",
              flush=True)
        return 0

    timed = 0
    t = Timers(args.parts)
    if args.mode == "ddp":
        import torch.distributed as dist
        dist.init_process_group("gloo", init_method="env://", rank=rank, world_size=size)
        ddp = torch.nn.parallel.DistributedDataParallel(model)
        share = args.batch // size
        sampler = torch.utils.data.distributed.DistributedSampler(range(len(images)), num_replicas=size, rank=rank,
                                                                  shuffle=True, seed=0)
        epoch, order = 0, []
        for step in range(args.steps):
            if step == args.warmup:
                t0 = time.perf_counter()
            if len(order) < share:
                sampler.set_epoch(epoch)
                order, epoch = list(sampler), epoch + 1
            idx, order = order[:share], order[share:]
            t("zero", optimizer.zero_grad)
            x, y = t("read", lambda: (images[idx], labels[idx]))
            loss = t("forward", lambda: F.cross_entropy(ddp(x), y))  # DDP averages the ranks' means
            t("backward", loss.backward)
            t("optimizer", optimizer.step)
            timed += args.batch if step >= args.warmup else 0
            t.end_step(step >= args.warmup)
        elapsed = time.perf_counter() - t0
        dist.destroy_process_group()
    else:
        bench = argparse.ArgumentParser()
        antdt.add_arguments(bench)
        options = bench.parse_args(antdt_args + ["--global-batch", str(args.batch), "--steps", str(args.steps),
                                                 "--quiet", "--progress", "never"])
        job = antdt.Job(options, dataset_size=len(images), program="cnn_bench")
        bridge = antdt.torch.Bridge(job, model, optimizer)
        grads = bridge.gradients
        job.set_probe(lambda n: F.cross_entropy(model(images[:n]), labels[:n], reduction="sum").backward())
        while t("next_step", job.next_step):
            if job.step == args.warmup:
                t0 = time.perf_counter()
            t("zero", bridge.zero_grad)
            batches = job.micro_batches()
            while (idx := t("indices", next, batches, None)) is not None:  # one at a time: nd claims as it goes
                x, y = t("read", lambda: (images[idx], labels[idx]))
                loss = t("forward", lambda: F.cross_entropy(model(x), y, reduction="sum"))
                t("backward", loss.backward)
            # bridge.step(), part by part
            t("gather", grads.gather)
            t("reduce", job.reduce, grads.array)
            t("scatter", grads.scatter)
            t("optimizer", optimizer.step)
            timed += args.batch if job.step >= args.warmup else 0
            t.end_step(job.step >= args.warmup)
        elapsed = time.perf_counter() - t0
        split = ",".join(map(str, job.split))
        job.close()
    t.report(args.mode, rank)
    if rank == 0:
        extra = f" split={split}" if args.mode == "antdt" else ""
        print(f"RESULT mode={args.mode} samples_per_s={timed / elapsed:.1f} step_ms={1e3 * elapsed / (timed / args.batch):.3f}"
              f"{extra}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(antdt.run_main(main, program="cnn_bench"))
