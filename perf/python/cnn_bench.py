#!/usr/bin/env python3
"""The anchor benchmark's training loop (perf/python/ddp-vs-antdt.sh): the Python example's CNN
(examples/python/train_cnn.py) on antdt-datagen's digits, one rank per core, in one of three
modes that share everything but the distribution of the work:

  --mode ddp    torch.nn.parallel.DistributedDataParallel over gloo (MASTER_ADDR 127.0.0.1),
                each rank B/P samples of every step (DistributedSampler's equal split of the
                epoch's shuffled order), the mean loss over its samples: what a PyTorch user runs;
  --mode antdt  antdt.Job and antdt.torch.Bridge (policy, emulation: every antdt option), each
                rank the samples antdt gives it, the loss summed;
  --mode speed  no distribution: this process alone computes steps of B/P samples, to measure
                the core's own speed (samples/s), as the limit of what balancing can gain.

The images are read once into memory by every mode, so the data path is the same tensor
indexing in each. Timing: the training loop after WARMUP steps, wall clock, on rank 0 (the
steps end together: every step ends in a collective). Prints one line, RESULT mode=... .
"""
import argparse
import os
import sys
import time

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


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mode", choices=["ddp", "antdt", "speed"], required=True)
    parser.add_argument("--data", required=True)
    parser.add_argument("--batch", type=int, default=256, help="the global batch B")
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--seconds", type=float, default=5.0, help="speed mode: how long to measure")
    args, antdt_args = parser.parse_known_args()
    torch.set_num_threads(1)
    images, labels, shape, classes = load(args.data)
    rank, size = antdt.world_rank(), antdt.world_size()
    torch.manual_seed(0)
    model = Cnn(shape, classes)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)

    if args.mode == "speed":
        share = args.batch // size
        g = torch.Generator().manual_seed(rank)
        done, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < args.seconds:
            idx = torch.randint(0, len(images), (share,), generator=g)
            optimizer.zero_grad()
            F.cross_entropy(model(images[idx]), labels[idx], reduction="sum").backward()
            optimizer.step()
            done += share
        print(f"RESULT mode=speed rank={rank} samples_per_s={done / (time.perf_counter() - t0):.1f}", flush=True)
        return 0

    timed = 0
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
            optimizer.zero_grad()
            F.cross_entropy(ddp(images[idx]), labels[idx]).backward()  # DDP averages the ranks' means
            optimizer.step()
            timed += args.batch if step >= args.warmup else 0
        elapsed = time.perf_counter() - t0
        dist.destroy_process_group()
    else:
        bench = argparse.ArgumentParser()
        antdt.add_arguments(bench)
        options = bench.parse_args(antdt_args + ["--global-batch", str(args.batch), "--steps", str(args.steps),
                                                 "--quiet", "--progress", "never"])
        job = antdt.Job(options, dataset_size=len(images), program="cnn_bench")
        bridge = antdt.torch.Bridge(job, model, optimizer)
        job.set_probe(lambda n: F.cross_entropy(model(images[:n]), labels[:n], reduction="sum").backward())
        while job.next_step():
            if job.step == args.warmup:
                t0 = time.perf_counter()
            bridge.zero_grad()
            for idx in job.micro_batches():
                F.cross_entropy(model(images[idx]), labels[idx], reduction="sum").backward()
            bridge.step()
            timed += args.batch if job.step >= args.warmup else 0
        elapsed = time.perf_counter() - t0
        split = ",".join(map(str, job.split))
        job.close()
    if rank == 0:
        extra = f" split={split}" if args.mode == "antdt" else ""
        print(f"RESULT mode={args.mode} samples_per_s={timed / elapsed:.1f} step_ms={1e3 * elapsed / (timed / args.batch):.3f}"
              f"{extra}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(antdt.run_main(main, program="cnn_bench"))
