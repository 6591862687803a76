"""Exact (python.exact.Exact): under mpirun -np 1 to 4, each step's update by antdt.torch equals,
to 1e-5 relative, plain PyTorch on the step's whole global batch in one process.

Each rank trains a small CNN on in-memory images with antdt.torch.Bridge: static with several
micro-batches per rank, static with a fixed uneven split, dd with emulated uneven speeds (its
split follows them), nd with pooled chunks. At every step the ranks share the indices each one
trained (broadcasts), and every rank recomputes the step as plain PyTorch would: the model and
the optimizer as they were before the step, the mean cross-entropy over the whole global batch,
backward, optimizer.step(). The reduced gradient and the update (parameters after minus before)
must equal the reference's: max |antdt - reference| <= 1e-5 * max |reference|, where the update
is the optimizer's step in float64 from each side's gradient and the state before the step (the
float32 subtraction after - before would add the rounding of the stored parameters, up to 1e-5 of
a small step by itself); and the float32 parameters after the step must agree to 1e-5 of their
largest value.

Same maths under every policy: the same 30-step SGD run under static (micro-batches), dd
(emulated uneven speeds: its split moves) and nd (pooled chunks) trains the same samples at every
step (a step's global batch is fixed by the data order, docs/dds.md) and ends with the same
parameters, to 1e-5 relative, as the other two and as plain PyTorch replaying those steps in one
process.
"""
import sys
import unittest

from support import BUILD, PY, SOURCE, mpirun, require

N, B = 240, 48
TOLERANCE = 1e-5


def uneven(size):
    """A fixed split of B that is far from equal: rank 0 gets 5, the rest share the others."""
    if size == 1:
        return [B]
    rest = [(B - 5) // (size - 1)] * (size - 1)
    rest[-1] += B - 5 - sum(rest)
    return [5] + rest


def rank_main():
    import copy

    import numpy as np
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    import antdt
    import antdt.torch

    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(5)
    images, labels = torch.rand(N, 1, 12, 12, generator=g), torch.randint(0, 10, (N,), generator=g)
    size = antdt.world_size()
    speeds = [1.0] + [0.3 + 0.2 * r for r in range(1, size)]
    cases = [
        ("static, micro-batches of at most 5", dict(policy="static", micro_batch_cap=5), "sgd"),
        ("static, fixed split " + ",".join(map(str, uneven(size))), dict(policy="static", fixed_split=uneven(size)),
         "adam"),
        ("dd, emulated speeds " + ",".join(f"{s:g}" for s in speeds),
         dict(policy="dd", emulate_speed=speeds, virtual_device=0.0005, min_interval=2, micro_batch_cap=8), "sgd"),
        ("nd, pooled chunks", dict(policy="nd", nd_chunks=3, backup_workers=0, emulate_speed=speeds,
                                   virtual_device=0.0002), "sgd"),
    ]

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(1, 4, 3)
            self.fc1 = nn.Linear(4 * 5 * 5, 16)
            self.fc2 = nn.Linear(16, 10)

        def forward(self, x):
            x = F.max_pool2d(F.relu(self.conv(x)), 2)
            return self.fc2(F.relu(self.fc1(x.flatten(1))))

    def every_rank(job, idx):
        """Each rank's indices of the step (broadcasts on the job's ranks)."""
        out = []
        for r in range(job.size):
            n = np.array([len(idx)], np.int64)
            job.broadcast(n, root=r)
            buf = np.array(idx, np.int64) if r == job.rank else np.zeros(n[0], np.int64)
            job.broadcast(buf, root=r)
            out.append(buf)
        return out

    def relative(a, b):
        """max |a - b| / max |b| over lists of tensors."""
        a, b = torch.cat([t.reshape(-1).double() for t in a]), torch.cat([t.reshape(-1).double() for t in b])
        return ((a - b).abs().max() / b.abs().max()).item()

    def update64(before, grads, optimizer_before, make):
        """The optimizer's step from `grads` and the state before it, in float64."""
        m = Net().double()
        m.load_state_dict({k: v.double() for k, v in before.items()})
        for p, g in zip(m.parameters(), grads):
            p.grad = g.detach().double()
        o = make(m.parameters())
        o.load_state_dict(optimizer_before)  # (state cast to the parameters' float64)
        o.step()
        return [p.detach() - before[n].double() for n, p in m.named_parameters()]

    def run(name, options, kind):
        torch.manual_seed(1)
        model = Net()
        make = (lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, weight_decay=1e-3)) if kind == "sgd" else \
            (lambda p: torch.optim.Adam(p, lr=0.01))
        optimizer = make(model.parameters())
        job = antdt.Job(dataset_size=N, global_batch=B, steps=8, quiet=True, **options)
        job.set_probe(lambda n: None)
        bridge = antdt.torch.Bridge(job, model, optimizer)
        worst_grad = worst_update = worst_params = 0.0
        splits = set()
        while job.next_step():
            before = copy.deepcopy(model.state_dict())
            optimizer_before = copy.deepcopy(optimizer.state_dict())
            bridge.zero_grad()
            mine = []
            for idx in job.micro_batches():
                loss = F.cross_entropy(model(images[idx]), labels[idx], reduction="sum")
                loss.backward()
                mine.extend(idx.tolist())
            samples = bridge.step()
            assert samples == B, samples
            parts = every_rank(job, mine)
            every = np.concatenate(parts)
            assert len(every) == B, every
            splits.add(tuple(len(p) for p in parts))  # the samples each rank trained

            reference = Net()
            reference.load_state_dict(before)
            ref_optimizer = make(reference.parameters())
            ref_optimizer.load_state_dict(optimizer_before)
            ref_optimizer.zero_grad()
            F.cross_entropy(reference(images[every]), labels[every]).backward()  # the mean over B
            ref_optimizer.step()
            grads = [p.grad for p in model.parameters()]
            ref_grads = [p.grad for p in reference.parameters()]
            worst_grad = max(worst_grad, relative(grads, ref_grads))
            worst_update = max(worst_update, relative(update64(before, grads, optimizer_before, make),
                                                      update64(before, ref_grads, optimizer_before, make)))
            worst_params = max(worst_params, relative([p.detach() for p in model.parameters()],
                                                      [p.detach() for p in reference.parameters()]))
        code = job.exit_code
        job.close()
        if job_rank == 0:
            print(f"{size} ranks, {name}: {len(splits)} split(s) {sorted(splits)[:3]}, gradient within "
                  f"{worst_grad:.1e}, update within {worst_update:.1e}, parameters within {worst_params:.1e} of plain PyTorch "
                  "on the global batch",
                  flush=True)
        ok = max(worst_grad, worst_update, worst_params) <= TOLERANCE and code == 0
        if "fixed split" in name and size > 1:
            ok = ok and splits == {tuple(uneven(size))}
        if name.startswith("dd") and size > 1:
            ok = ok and any(len(set(s)) > 1 for s in splits)  # the speeds moved the split
        return ok

    def same_maths(steps=30):
        """The same run (seeds, data, SGD) under static, dd with emulated uneven speeds and nd with
        chunks: a step's global batch is fixed by the data order, so each trains on the same
        samples at every step and ends with the same parameters as the others, and as plain
        PyTorch replaying those steps in one process, to 1e-5."""
        make = lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, weight_decay=1e-3)
        runs = {}
        for name, options, kind in cases:
            if kind != "sgd":  # (static with micro-batches, dd, nd)
                continue
            policy = options["policy"]
            torch.manual_seed(1)
            model = Net()
            optimizer = make(model.parameters())
            job = antdt.Job(dataset_size=N, global_batch=B, steps=steps, quiet=True, **options)
            job.set_probe(lambda n: None)
            bridge = antdt.torch.Bridge(job, model, optimizer)
            batches, splits, most = [], set(), 0
            while job.next_step():
                bridge.zero_grad()
                mine, micro = [], 0
                for idx in job.micro_batches():
                    F.cross_entropy(model(images[idx]), labels[idx], reduction="sum").backward()
                    mine.extend(idx.tolist())
                    micro += 1
                bridge.step()
                parts = every_rank(job, mine)
                batches.append(sorted(np.concatenate(parts).tolist()))
                splits.add(tuple(len(p) for p in parts))
                most = max(most, micro)
            code = job.exit_code
            job.close()
            runs[policy] = ([p.detach().clone() for p in model.parameters()], batches, splits, most, code)
        torch.manual_seed(1)
        plain = Net()
        initial = [p.detach().clone() for p in plain.parameters()]
        optimizer = make(plain.parameters())
        for samples in runs["static"][1]:
            optimizer.zero_grad()
            F.cross_entropy(plain(images[samples]), labels[samples]).backward()
            optimizer.step()
        expected = [p.detach() for p in plain.parameters()]
        ok = True
        for policy, (params, batches, splits, most, code) in runs.items():
            to_static, to_plain = relative(params, runs["static"][0]), relative(params, expected)
            if job_rank == 0:
                print(f"{size} ranks, same maths, {policy}: {len(batches)} steps, {len(splits)} split(s) "
                      f"{sorted(splits)[:2]}, up to {most} micro-batches a rank; parameters within {to_static:.1e} "
                      f"of static's, {to_plain:.1e} of plain PyTorch's", flush=True)
            ok = ok and code == 0 and len(batches) == steps and batches == runs["static"][1]
            ok = ok and max(to_static, to_plain) <= TOLERANCE
            if size > 1 and policy == "dd":
                ok = ok and any(len(set(s)) > 1 for s in splits)  # the speeds moved the split
            if size > 1 and policy == "nd":
                ok = ok and most >= 2  # a rank claimed several chunks
        ok = ok and sorted(runs) == ["dd", "nd", "static"]
        return ok and relative(expected, initial) > 1e-2  # the parameters moved: the comparison shows something

    job_rank = antdt.world_rank()
    failed = [name for name, options, kind in cases if not run(name, options, kind)]
    if not same_maths():
        failed.append("same maths under static, dd and nd")
    if failed:
        print("FAILED:", failed, flush=True)
        sys.exit(1)
    print("exact OK", flush=True)


STEPS = 150


def small_mlp():
    """SitOut's and LrSchedule's data (the images of rank_main) and a small MLP, seeded alike."""
    import torch
    import torch.nn as nn

    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(5)
    images, labels = torch.rand(N, 1, 12, 12, generator=g), torch.randint(0, 10, (N,), generator=g)
    torch.manual_seed(1)
    return images, labels, nn.Sequential(nn.Flatten(), nn.Linear(144, 32), nn.ReLU(), nn.Linear(32, 10))


def sit_out_main(policy, out):
    """One run of SitOut's: 3 ranks, rank 2 emulated at 0.02 of the others' speed (virtual
    device); every rank saves its final parameters to OUT.RANK.npy."""
    import numpy as np
    import torch
    import torch.nn.functional as F

    import antdt
    import antdt.torch

    images, labels, model = small_mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9)  # (at 0.1 rounding grows to 1e-5)
    slow = dict(emulate_speed=[1, 1, 0.02], virtual_device=0.0002, rejoin_after=0.2) if policy == "dd" else {}
    job = antdt.Job(dataset_size=N, global_batch=B, steps=STEPS, policy=policy, min_interval=5, quiet=True,
                    summary_json=out + ".json", **slow)
    bridge = antdt.torch.Bridge(job, model, optimizer)
    while job.next_step():
        bridge.zero_grad()
        for idx in job.micro_batches():
            F.cross_entropy(model(images[idx]), labels[idx], reduction="sum").backward()
        bridge.step()
    np.save(f"{out}.{job.rank}.npy", torch.cat([p.detach().reshape(-1) for p in model.parameters()]).numpy())
    return job.exit_code


class SitOut(unittest.TestCase):
    def test_a_rank_that_sits_out_and_rejoins_leaves_the_bridges_model_as_static_trains_it(self):
        """Backup workers under the Python bridge: rank 2 sits out (it costs more than it gives),
        rejoins for trials and takes rank 0's model and optimizer state each time; every rank
        ends with the parameters of static, which trained the same samples at every step."""
        import json
        import tempfile

        import numpy as np

        out = tempfile.mkdtemp(prefix="antdt-sit-out-")
        params = {}
        for policy in ("static", "dd"):
            r = mpirun(3, PY, __file__, BUILD, SOURCE, "--sit-out", policy, f"{out}/{policy}", timeout=400)
            self.assertEqual(r.returncode, 0, r.stdout[-3000:] + r.stderr[-3000:])
            params[policy] = [np.load(f"{out}/{policy}.{rank}.npy") for rank in range(3)]
        with open(f"{out}/dd.json") as f:
            s = json.load(f)
        print(f"sit-outs {s['sit_outs']}, rejoins {s['rejoins']}", file=sys.stderr)
        self.assertGreaterEqual(s["sit_outs"], 2, s["plans"])
        self.assertGreaterEqual(s["rejoins"], 1, s["plans"])
        self.assertEqual((s["duplicated_samples"], s["missing_samples"]), (0, 0))
        static = params["static"][0]
        scale = np.abs(static).max()
        worst = max(np.abs(params["dd"][rank] - static).max() for rank in range(3)) / scale
        print(f"parameters within {worst:.1e} of static's on every rank", file=sys.stderr)
        for rank in range(3):
            self.assertEqual(params["static"][rank].tobytes(), static.tobytes())
            self.assertLessEqual(np.abs(params["dd"][rank] - static).max(), TOLERANCE * scale, f"rank {rank}")


def schedule_main(out, ckpt, stop_at, keep_scheduler):
    """LrSchedule's run: 2 ranks, static, 12 steps of SGD with a StepLR and gradient clipping
    between the reduction and the optimizer's step; stops (exit 76) after step STOP_AT unless it is
    -1, resumes when CKPT holds a checkpoint. Rank 0 writes the learning rate and parameters."""
    import os

    import numpy as np
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    import antdt
    import antdt.torch

    images, labels, model = small_mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=3, gamma=0.5)
    resume = os.path.isdir(ckpt) and bool(os.listdir(ckpt))
    job = antdt.Job(dataset_size=N, global_batch=B, steps=12, policy="static", quiet=True, checkpoint_dir=ckpt,
                    resume=resume)
    bridge = antdt.torch.Bridge(job, model, optimizer)
    if keep_scheduler == "1":
        antdt.torch.add_state(job, "scheduler", scheduler)
    while job.next_step():
        bridge.zero_grad()
        for idx in job.micro_batches():
            F.cross_entropy(model(images[idx]), labels[idx], reduction="sum").backward()
        bridge.reduce()  # .grad: the mean over the step's global batch
        nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        optimizer.step()
        scheduler.step()
        if job.step == int(stop_at):
            job.request_stop()
    if job.rank == 0:
        np.save(out, np.concatenate([[optimizer.param_groups[0]["lr"]]] +
                                    [p.detach().double().reshape(-1).numpy() for p in model.parameters()]))
    return job.exit_code


class LrSchedule(unittest.TestCase):
    def test_a_scheduler_added_to_the_state_resumes_where_it_stood(self):
        """antdt.torch.add_state: a StepLR's state goes into the checkpoint, so a run stopped
        after step 7 and resumed ends bit-identical to the uninterrupted one, at lr 0.1 x 0.5^4;
        without it the resumed scheduler starts again at 0.1, and the run differs."""
        import tempfile

        import numpy as np

        d = tempfile.mkdtemp(prefix="antdt-schedule-")

        def run(name, stop_at, keep, code):
            r = mpirun(2, PY, __file__, BUILD, SOURCE, "--schedule", f"{d}/{name}.npy", f"{d}/{name}",
                       stop_at, keep, timeout=300)
            self.assertEqual(r.returncode, code, r.stdout[-3000:] + r.stderr[-3000:])

        run("whole", -1, "1", 0)
        for keep in ("1", "0"):
            run(f"stopped{keep}", 7, keep, 76)
            run(f"stopped{keep}", -1, keep, 0)
        whole, kept, lost = (np.load(f"{d}/{n}.npy") for n in ("whole", "stopped1", "stopped0"))
        self.assertAlmostEqual(whole[0], 0.1 * 0.5 ** 4)
        self.assertEqual(kept.tobytes(), whole.tobytes())
        self.assertNotEqual(lost[0], whole[0])
        self.assertGreater(np.abs(lost[1:] - whole[1:]).max(), 0.0)


class Exact(unittest.TestCase):
    def test_each_step_equals_plain_pytorch_on_the_global_batch(self):
        for np_ in (1, 2, 3, 4):
            with self.subTest(ranks=np_):
                r = mpirun(np_, PY, __file__, BUILD, SOURCE, "--ranks", timeout=400)
                print(r.ranks[0], file=sys.stderr, end="")
                self.assertEqual(r.returncode, 0, r.stdout[-3000:] + r.stderr[-3000:])
                self.assertIn("exact OK", r.ranks[0])


if __name__ == "__main__":
    require("numpy", "torch")
    if sys.argv[-1] == "--ranks":
        rank_main()
    elif len(sys.argv) > 5 and sys.argv[-5] == "--schedule":
        import antdt
        sys.exit(antdt.run_main(schedule_main, *sys.argv[-4:]))
    elif len(sys.argv) > 3 and sys.argv[-3] == "--sit-out":
        import antdt
        sys.exit(antdt.run_main(sit_out_main, sys.argv[-2], sys.argv[-1]))
    else:
        unittest.main()
