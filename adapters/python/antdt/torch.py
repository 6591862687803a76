"""antdt for PyTorch (docs/python.md): train a torch.nn.Module with any torch.optim optimizer
under an antdt.Job, in place of DistributedDataParallel.

    job = antdt.Job(args, dataset=data)
    bridge = antdt.torch.Bridge(job, model, optimizer)   # before the first next_step
    while job.next_step():
        bridge.zero_grad()
        for idx in job.micro_batches():                   # this rank's part of the step
            x, y = data.read(idx)
            loss = F.cross_entropy(model(x), y, reduction="sum")   # a SUM over the samples
            loss.backward()
            job.add_loss(loss.item())
        bridge.step()      # every .grad = the mean over the step's global batch; optimizer.step()

The loss must be a sum over the samples (reduction="sum"; a mean over a micro-batch of n
samples becomes a sum with loss * n): under dd a slow rank trains fewer samples than a fast one,
and a mean of per-rank means would weigh each of the slow rank's samples more.

Gradients: every float32 parameter's .grad is a view of one flat float32 buffer, so backward
accumulates straight into the buffer antdt reduces, in place. float16 and bfloat16 gradients
are reduced in float32 (copied in, the mean cast back); float64 parameters are refused. A
model on a GPU is reduced through a host copy of the buffer.
"""

import json

import numpy as np
import torch

from . import CheckpointError, Hdf5Dataset, UsageError

__all__ = ["Bridge", "Gradients", "Dataset", "StepBatches", "checksum", "save_optimizer", "load_optimizer", "add_state"]


def _describe(t):
    return f"{str(t.dtype).replace('torch.', '')} {list(t.shape)}"


def _trainable(parameters):
    """The parameters that need a gradient, each once (a shared one appears under every name)."""
    out, seen = [], set()
    for p in parameters:
        if p.requires_grad and id(p) not in seen:
            seen.add(id(p))
            out.append(p)
    return out


def _same_memory(a, b):
    return a.data_ptr() == b.data_ptr() and a.shape == b.shape and a.stride() == b.stride() and a.dtype == b.dtype


class Gradients:
    """The gradients of some parameters on one flat float32 buffer (local: no collective call).

    ``buffer`` holds every parameter's gradient, one after another (``array``: the same memory
    as a NumPy array, what Job.reduce takes). A float32 CPU parameter's .grad is a view of it;
    float16 and bfloat16 gradients, and those of a model on a GPU, are staged: copied into the
    buffer before the reduction and back after."""

    def __init__(self, parameters):
        self.parameters = _trainable(parameters)
        device = None
        self._slots = []  # (parameter, offset, view of the buffer or None when staged)
        total = 0
        for i, p in enumerate(self.parameters):
            if p.dtype == torch.float64:
                raise UsageError(f"antdt reduces gradients in float32, and parameter {i} ({_describe(p)}) is float64: "
                                 "convert the model with model.float()")
            if p.dtype not in (torch.float32, torch.float16, torch.bfloat16):
                raise UsageError(f"parameter {i} ({_describe(p)}) is not a float32, float16 or bfloat16 tensor: "
                                 "antdt cannot reduce its gradient")
            if device is not None and p.device != device:
                raise UsageError(f"the parameters are on {device} and {p.device}: put the whole model on one device "
                                 "before the bridge is made")
            device = p.device
            self._slots.append([p, total, None])
            total += p.numel()
        self.device = device or torch.device("cpu")
        self.buffer = torch.zeros(total, dtype=torch.float32)
        self.array = self.buffer.numpy()  # the same memory, as Job.reduce takes it without a lookup
        with torch.no_grad():
            for slot in self._slots:
                p, offset, _ = slot
                if p.dtype != torch.float32 or p.device.type != "cpu" or not p.is_contiguous():
                    continue  # staged
                view = self.buffer[offset:offset + p.numel()].view(p.shape)
                if p.grad is not None:
                    view.copy_(p.grad)
                p.grad = view
                slot[2] = view
        # Per step, in the common case, each .grad is still the very tensor set here (`is`: no
        # attribute lookups), and nothing is staged (scatter does nothing).
        self._on_buffer = [(p, view) for p, _, view in self._slots if view is not None]
        self._staged = [(p, offset) for p, offset, view in self._slots if view is None]

    @property
    def staged(self):
        """How many parameters' gradients are copied in and out rather than on the buffer."""
        return len(self._staged)

    def zero(self):
        """Zeroes every gradient, as optimizer.zero_grad() would, and puts a .grad that
        something replaced or removed (zero_grad(set_to_none=True)) back on the buffer."""
        self.buffer.zero_()
        for p, view in self._on_buffer:
            g = p.grad
            if g is not view and (g is None or not _same_memory(g, view)):
                p.grad = view
        for p, _ in self._staged:
            if p.grad is not None:
                p.grad.zero_()

    def gather(self):
        """Before the reduction: the buffer then holds every gradient. One that is no longer on
        the buffer is copied in and put back; a missing one counts as zero."""
        if not self._staged and all(p.grad is view for p, view in self._on_buffer):
            return  # backward accumulated into the buffer: nothing to do
        with torch.no_grad():
            for p, view in self._on_buffer:
                g = p.grad
                if g is view:
                    continue  # backward accumulated into the buffer
                if g is None:
                    view.zero_()
                    p.grad = view
                elif not _same_memory(g, view):
                    view.copy_(g)
                    p.grad = view
            for p, offset in self._staged:
                g = p.grad
                target = self.buffer[offset:offset + p.numel()]
                if g is None:
                    target.zero_()
                else:
                    target.copy_(g.detach().reshape(-1).to(device="cpu", dtype=torch.float32))

    def scatter(self):
        """After the reduction: staged gradients get the buffer's values."""
        if not self._staged:
            return
        with torch.no_grad():
            for p, offset in self._staged:
                mean = self.buffer[offset:offset + p.numel()].view(p.shape).to(device=p.device, dtype=p.dtype)
                if p.grad is None:
                    p.grad = mean
                else:
                    p.grad.copy_(mean)


_OPTIMIZER_MAGIC = b"antdt-optimizer 1\n"
_STATE_MAGIC = b"antdt-state 1\n"


def _encode(value, tensors, what="the optimizer's state"):
    """Plain data for json: a tensor becomes {"t": its index in tensors}, the rest keeps its type."""
    if isinstance(value, torch.Tensor):
        tensors.append(value.detach().to("cpu").contiguous())
        return {"t": len(tensors) - 1}
    if isinstance(value, dict):
        return {"d": [[_encode(k, tensors, what), _encode(v, tensors, what)] for k, v in value.items()]}
    if isinstance(value, tuple):
        return {"tuple": [_encode(v, tensors, what) for v in value]}
    if isinstance(value, list):
        return {"list": [_encode(v, tensors, what) for v in value]}
    if value is None or isinstance(value, (bool, int, float, str)):
        return {"v": value}
    raise UsageError(f"{what} holds a {type(value).__name__}, which a checkpoint cannot store "
                     "(tensors, numbers, strings, lists, tuples and dicts only)")


def _decode(node, tensors):
    if not isinstance(node, dict) or len(node) != 1:
        raise ValueError("malformed entry")
    (kind, body), = node.items()
    if kind == "t":
        return tensors[body]
    if kind == "d":
        return {_decode(k, tensors): _decode(v, tensors) for k, v in body}
    if kind == "tuple":
        return tuple(_decode(v, tensors) for v in body)
    if kind == "list":
        return [_decode(v, tensors) for v in body]
    if kind == "v" and (body is None or isinstance(body, (bool, int, float, str))):
        return body
    raise ValueError(f"unknown entry {kind!r}")


def _dtype(name):
    dtype = getattr(torch, name, None) if isinstance(name, str) else None
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"unknown dtype {name!r}")
    return dtype


def _save_state(state, magic, what):
    """A state_dict as bytes: a json header of plain data and each tensor's dtype and shape, then
    the tensors' raw bytes. No pickle: loading it runs no code."""
    tensors = []
    tree = _encode(state, tensors, what)
    meta = [{"dtype": str(t.dtype).replace("torch.", ""), "shape": list(t.shape)} for t in tensors]
    header = json.dumps({"state": tree, "tensors": meta}).encode()
    raw = [t.reshape(-1).view(torch.uint8).numpy().tobytes() for t in tensors]
    return b"".join([magic, len(header).to_bytes(8, "little"), header, *raw])


def save_optimizer(optimizer):
    """An optimizer's state (its moments, step counts and each group's options) as bytes: a json
    header of plain data and each tensor's dtype and shape, then the tensors' raw bytes. No
    pickle: loading it runs no code, whatever a damaged or planted checkpoint holds."""
    return _save_state(optimizer.state_dict(), _OPTIMIZER_MAGIC, "the optimizer's state")


def _parse_state(data, magic):
    data = bytes(data)
    if not data.startswith(magic):
        raise ValueError("not antdt's format (a checkpoint of an older antdt, or damaged)")
    at = len(magic)
    size = int.from_bytes(data[at:at + 8], "little")
    at += 8
    head = json.loads(data[at:at + size].decode())
    at += size
    tensors = []
    for m in head["tensors"]:
        dtype, shape = _dtype(m["dtype"]), [int(n) for n in m["shape"]]
        nbytes = int(np.prod(shape, dtype=np.int64)) * torch.empty((), dtype=dtype).element_size()
        if nbytes < 0 or at + nbytes > len(data):
            raise ValueError("the tensors are cut short")
        flat = torch.frombuffer(bytearray(data[at:at + nbytes]), dtype=torch.uint8) if nbytes else \
            torch.empty(0, dtype=torch.uint8)
        tensors.append(flat.view(dtype).reshape(shape).clone())
        at += nbytes
    if at != len(data):
        raise ValueError("bytes left over after the tensors")
    return _decode(head["state"], tensors)


def _load_state(obj, data, magic, what, misfit):
    """The state _save_state wrote, back into obj with load_state_dict(); a CheckpointError
    naming `what` if it cannot be read, and `misfit` (with {e}) if it does not fit obj."""
    try:
        state = _parse_state(data, magic)
    except (ValueError, KeyError, TypeError, IndexError, UnicodeDecodeError, RuntimeError) as e:
        raise CheckpointError(f"the checkpoint's {what} cannot be read ({e})") from None
    try:
        obj.load_state_dict(state)
    except (ValueError, KeyError, TypeError, RuntimeError) as e:
        raise CheckpointError(f"the checkpoint's {what} " + misfit.format(e=e)) from None


def load_optimizer(optimizer, data):
    """The state save_optimizer wrote, back into an optimizer with the same parameter groups."""
    _load_state(optimizer, data, _OPTIMIZER_MAGIC, "optimizer state",
                "does not fit this optimizer ({e}): resume with the same model and optimizer")


def add_state(job, name, obj):
    """Puts ``obj.state_dict()`` in the job's checkpoints under ``name`` (before the first
    next_step), and on a resume gives it back with ``obj.load_state_dict()``: an LR scheduler, a
    GradScaler, anything whose state is tensors and plain data (numbers, strings, lists, tuples,
    dicts). Stored without pickle, as the optimizer's state is: a resume runs no code."""
    what = f"state of {name!r} ({type(obj).__name__})"
    job.add_state(name, save=lambda: _save_state(obj.state_dict(), _STATE_MAGIC, "the " + what),
                  load=lambda data: _load_state(obj, data, _STATE_MAGIC, what, "does not fit this program's ({e})"))


def _layout(model, optimizer):
    lines = [f"parameter {n} {_describe(p)}" for n, p in model.named_parameters()]
    lines += [f"buffer {n} {_describe(b)}" for n, b in model.named_buffers()]
    lines.append(f"optimizer {type(optimizer).__name__}")
    return "\n".join(lines) + "\n"


def _first_difference(saved, here):
    a, b = saved.splitlines(), here.splitlines()
    for la, lb in zip(a, b):
        if la != lb:
            return f'the checkpoint\'s model has "{la}" where this one has "{lb}"'
    if len(a) > len(b):
        return f'the checkpoint\'s model has "{a[len(b)]}", this one has nothing there'
    return f'this model has "{b[len(a)]}", the checkpoint\'s has nothing there'


def _in_place(t):
    """A NumPy view of a CPU tensor's memory, or None where the checkpoint needs a copy."""
    if t.device.type != "cpu" or not t.is_contiguous() or t.dtype not in (torch.float32, torch.float64, torch.int64):
        return None
    return t.detach().numpy()


def _add_tensor_state(job, name, t):
    view = _in_place(t)
    if view is not None:
        job.add_state(name, view)  # written and restored in place: no copy
        return

    def save():
        return t.detach().to("cpu").contiguous().numpy().tobytes()

    def load(data):
        host = torch.frombuffer(bytearray(data), dtype=t.dtype) if len(data) else torch.empty(0, dtype=t.dtype)
        if host.numel() != t.numel():
            raise CheckpointError(f"the checkpoint holds {len(data)} bytes for {name} ({_describe(t)}): it is the "
                                  "checkpoint of another model")
        with torch.no_grad():
            t.copy_(host.view(t.shape))

    job.add_state(name, save=save, load=load)


def _broadcast(job, t):
    """Rank 0's tensor on every rank."""
    with torch.no_grad():
        view = None if t.device.type != "cpu" or not t.is_contiguous() else t.detach().numpy()
        if view is not None and view.dtype != np.bool_:
            job.broadcast(view)
            return
        host = t.detach().to("cpu").contiguous().view(torch.uint8).numpy().copy()
        job.broadcast(host)
        t.copy_(torch.from_numpy(host).view(t.dtype).view(t.shape))


class Bridge:
    """The bridge between a model, its optimizer and a Job. Every call is made by every rank.

    Made before the job's first next_step (collective): it lays the parameters' gradients on
    one buffer (Gradients), registers the model's parameters and buffers and the optimizer's
    state with the job's checkpoints (a resume loads them on any number of ranks), and unless
    ``broadcast_initial=False`` gives every rank rank 0's parameters and buffers. The optimizer
    must optimise parameters of ``model`` only. Checkpoint entries: <prefix>/layout (names,
    types, shapes, the optimizer's class: a resume into another model is refused, naming the
    first difference), <prefix>/parameters/<name>, <prefix>/buffers/<name>, <prefix>/optimizer.
    """

    def __init__(self, job, model, optimizer, *, prefix="torch", broadcast_initial=True):
        self.job, self.model, self.optimizer = job, model, optimizer
        in_model = {id(p) for p in model.parameters()}
        for group in optimizer.param_groups:
            for p in group["params"]:
                if id(p) not in in_model:
                    raise UsageError(f"the optimizer holds a parameter ({_describe(p)}) that is not one of the "
                                     "model's: give the bridge the model the optimizer optimises")
        self.gradients = Gradients(model.parameters())
        if broadcast_initial and job.size > 1:
            for t in list(model.parameters()) + list(model.buffers()):
                _broadcast(job, t)
        layout = _layout(model, optimizer)

        def check_layout(data):
            saved = bytes(data).decode("utf-8", "replace")
            if saved != layout:
                raise CheckpointError("the checkpoint is of another model or optimizer: " +
                                      _first_difference(saved, layout))

        job.add_state(prefix + "/layout", save=lambda: layout.encode(), load=check_layout)
        for name, p in model.named_parameters():
            _add_tensor_state(job, f"{prefix}/parameters/{name}", p)
        for name, b in model.named_buffers():
            _add_tensor_state(job, f"{prefix}/buffers/{name}", b)
        job.add_state(prefix + "/optimizer", save=lambda: save_optimizer(optimizer),
                      load=lambda data: load_optimizer(optimizer, data))
        # The report's backend is the model's device (the Job knows only where it reduced).
        backend = "cuda" if any(p.is_cuda for p in model.parameters()) else "host"
        job.on_report(lambda summary: setattr(summary, "backend", backend))

    def zero_grad(self):
        """Local: zeroes the gradients before a step's first backward (optimizer.zero_grad() and
        model.zero_grad(), with or without set_to_none, are safe too)."""
        self.gradients.zero()

    def reduce(self):
        """Collective, after the step's last backward: sums every rank's gradient sums and
        divides by the step's sample count B, exact at any split, so that each .grad holds the
        mean over the step's global batch. Returns B."""
        self.gradients.gather()
        samples = self.job.reduce(self.gradients.array)
        self.gradients.scatter()
        return samples

    def step(self):
        """reduce(), then optimizer.step(). Returns B."""
        samples = self.reduce()
        self.optimizer.step()
        return samples


class StepBatches(torch.utils.data.Sampler):
    """This rank's micro-batches of the step under way, as lists of sample indices, for a
    DataLoader over any map-style torch Dataset:

        loader = DataLoader(dataset, batch_sampler=antdt.torch.StepBatches(job))
        while job.next_step():
            for x, y in loader:          # the step's micro-batches, then the loop ends
                ...

    Under a pooled policy (nd) each micro-batch is claimed as the loader asks for it; keep
    num_workers=0 there, or the loader's prefetching claims chunks before they are computed
    (still trained within the step, but by this rank rather than a faster one)."""

    def __init__(self, job):
        super().__init__(None)
        self.job = job

    def __iter__(self):
        for idx in self.job.micro_batches():
            yield idx.tolist()


class Dataset(torch.utils.data.Dataset):
    """An antdt data set (antdt-datagen's HDF5, docs/data.md) as tensors: features float32 in the
    file's sample shape ([C, H, W] for images), labels int64. ``read(indices)`` reads a whole
    micro-batch in one call per run of consecutive indices; ``dataset[i]`` and len() make it a
    map-style torch Dataset for a DataLoader."""

    def __init__(self, data, device=None):
        self.data = Hdf5Dataset(str(data)) if not isinstance(data, Hdf5Dataset) else data
        self.device = torch.device(device) if device is not None else None
        self.sample_shape = list(self.data.sample_shape)
        self.num_classes = self.data.num_classes

    def __len__(self):
        return len(self.data)

    def read(self, indices):
        x, y = self.data.read(np.asarray(indices, dtype=np.int64))
        x, y = torch.from_numpy(x), torch.from_numpy(y)
        if self.device is not None and self.device.type != "cpu":
            x, y = x.to(self.device), y.to(self.device)
        return x, y

    def __getitem__(self, i):
        x, y = self.read([int(i)])
        return x[0], y[0]


def checksum(model):
    """FNV-1a 64 over the bytes of every parameter and then every buffer of ``model`` (16 hex
    digits), the libtorch adapter's torch_checksum: equal strings, bit-identical models."""
    h = 0xCBF29CE484222325
    for t in list(model.parameters()) + list(model.buffers()):
        for byte in t.detach().to("cpu").contiguous().view(-1).view(torch.uint8).numpy().tobytes():
            h = ((h ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"
