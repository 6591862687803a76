#!/usr/bin/env python3
"""A small CNN on digit images, trained with PyTorch under antdt (docs/python.md): the Python
twin of the libtorch example (apps/examples/torch_cnn.cpp), with the same model, data, options
and maths.

    antdt-datagen --kind digits -n 20000 -o digits.h5 --eval-output digits-test.h5 --eval-samples 2000
    mpirun -np 2 python3 examples/python/train_cnn.py --data digits.h5 --test-data digits-test.h5 \\
        --global-batch 256 --epochs 2 --policy dd --checkpoint-dir ckpt

Every option of antdt's programs is here (--policy, --emulate-speed, --checkpoint-dir,
--resume, ...: --help). The lines that deal with antdt are marked "# antdt".
"""
import argparse
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

import antdt  # antdt
import antdt.torch  # antdt


class Cnn(nn.Module):
    """Two 5 x 5 convolutions (8 and 16 channels), each followed by 2 x 2 max pooling, then two
    linear layers: the libtorch example's model, layer for layer."""

    def __init__(self, shape, classes):
        super().__init__()
        side = lambda n: ((n - 4) // 2 - 4) // 2  # an image side after conv 5, pool 2, conv 5, pool 2
        self.conv1 = nn.Conv2d(shape[0], 8, 5)
        self.conv2 = nn.Conv2d(8, 16, 5)
        self.fc1 = nn.Linear(16 * side(shape[1]) * side(shape[2]), 64)
        self.fc2 = nn.Linear(64, classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


def accuracy(model, images):
    """Accuracy on held-out images, in batches of 1000."""
    correct = 0
    with torch.no_grad():
        for first in range(0, len(images), 1000):
            x, y = images.read(range(first, min(len(images), first + 1000)))
            correct += (model(x).argmax(1) == y).sum().item()
    return correct / len(images)


def main():
    parser = argparse.ArgumentParser(description="A small CNN on digit images, trained with PyTorch under antdt")
    antdt.add_arguments(parser)  # antdt: --global-batch, --epochs, --policy, --checkpoint-dir, --resume, ...
    parser.add_argument("--data", required=True, help="Training images (antdt-datagen --kind digits)")
    parser.add_argument("--test-data", help="Held-out images: their accuracy is reported at the end")
    parser.add_argument("--lr", type=float, default=0.05, help="SGD learning rate (default: 0.05)")
    parser.add_argument("--momentum", type=float, default=0.9, help="SGD momentum (default: 0.9)")
    parser.add_argument("--threads", type=int, default=1, help="PyTorch threads per rank (one rank per core: 1)")
    parser.add_argument("--model-seed", type=int, default=0, help="Seed of the model's initial weights (default: 0)")
    parser.add_argument("--device", default="cpu", help="cpu, or cuda (default: cpu)")
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    train = antdt.torch.Dataset(args.data, args.device)  # antdt: the samples as tensors
    inputs = {"--data": args.data, **({"--test-data": args.test_data} if args.test_data else {})}
    job = antdt.Job(args, dataset=train, inputs=inputs)  # antdt

    torch.manual_seed(args.model_seed)
    model = Cnn(train.sample_shape, train.num_classes).to(args.device)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
    bridge = antdt.torch.Bridge(job, model, optimizer)  # antdt

    def report(summary):  # antdt: rank 0's figures in the end-of-run summary
        summary.parameter_checksum = antdt.torch.checksum(model)
        if args.test_data:
            summary.eval_accuracy = accuracy(model, antdt.torch.Dataset(args.test_data, args.device))

    job.on_report(report)  # antdt

    while job.next_step():  # antdt
        bridge.zero_grad()  # antdt
        for idx in job.micro_batches():  # antdt: the samples antdt gave this rank
            x, y = train.read(idx)
            logits = model(x)
            loss = F.cross_entropy(logits, y, reduction="sum")  # a SUM over the samples
            loss.backward()
            job.add_loss(loss.item(), (logits.argmax(1) == y).sum().item())  # antdt
        bridge.step()  # antdt: .grad = the mean over the step's global batch; optimizer.step()
    return job.exit_code  # antdt: 0; 76 when stopped by a signal (after a checkpoint)


if __name__ == "__main__":
    sys.exit(antdt.run_main(main))  # antdt: one-line errors, the exit codes of docs/errors.md
