"""antdt from Python: exact, balanced data-parallel steps for ranks that run at different speeds.

A training script launched with ``mpirun`` or ``srun`` makes one :class:`Job`; antdt decides
which samples each rank trains on each step (``policy="dd"`` sizes each rank's share to its
speed, ``"nd"`` lets the ranks claim chunks of the step until it is done) and averages the
ranks' gradient sums exactly over the step's global batch. docs/python.md has the whole story;
``antdt.torch`` is the PyTorch side.

    import sys, antdt

    def main():
        job = antdt.Job(dataset_size=len(data), global_batch=256, epochs=3, policy="dd")
        job.add_state("w", weights)                 # a NumPy array, saved in every checkpoint
        while job.next_step():
            sums[:] = 0
            for idx in job.micro_batches():         # this rank's part of the step
                sums += gradient_sum(weights, data[idx])
            job.reduce(sums)                        # now the mean over the step's B samples
            weights -= lr * sums
        return job.exit_code                        # 0, 75 (kill-restart) or 76 (stopped)

    sys.exit(antdt.run_main(main))

Importing antdt initialises MPI (MPI_Init_thread) unless something else has, mpi4py say, in
either order; antdt finalises MPI at exit only if it initialised it.
"""

import os
import sys
import threading
import time
import traceback

from . import errors
from .errors import (EXIT_NON_FINITE, EXIT_RESTART, EXIT_RUNTIME, EXIT_STALLED, EXIT_STOPPED, EXIT_USAGE,
                     EXIT_WRITE, CheckpointError, DeviceError, Error, FileError, MpiError, NonFiniteError,
                     StallError, UsageError, WriteError, exit_code_for)
from . import _antdt
from ._antdt import Hdf5Dataset, Report, StepSummary, policy_names, world_rank, world_size

__version__ = "0.1.0"

__all__ = [
    "Job", "Hdf5Dataset", "StepSummary", "Report", "run_main", "add_arguments", "option_names", "policy_names",
    "world_rank", "world_size", "abort", "exit_code_for", "Error", "UsageError", "FileError", "CheckpointError",
    "WriteError", "NonFiniteError", "StallError", "MpiError", "DeviceError", "EXIT_RUNTIME", "EXIT_USAGE",
    "EXIT_WRITE", "EXIT_NON_FINITE", "EXIT_STALLED", "EXIT_RESTART", "EXIT_STOPPED",
]

# Option keywords whose values add_arguments() put on an argparse namespace.
_ARGPARSE_MARK = "_antdt_options"


def option_names():
    """Every option's keyword (global_batch, policy, checkpoint_dir, ...), as Job takes them."""
    return [row[0] for row in _antdt.option_table()]


def _program_name():
    return os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "python"


class Job(_antdt.Job):
    """A training run's whole life (docs/python.md): the options, the steps, the exact
    reduction, checkpoints and resume on any number of ranks, stop signals, the reports.

    ``Job(dataset_size=N, global_batch=256, epochs=3, policy="dd", checkpoint_dir="ckpt")``:
    every option of antdt's command line, as a keyword (``--global-batch`` is ``global_batch``;
    a list such as ``emulate_speed=[1, 0.5]`` is the comma list). Options not given come from
    the ``ANTDT_*`` environment variables (``ANTDT_GLOBAL_BATCH=512``), then the defaults.
    ``Job(args, dataset_size=N)`` takes them from an argparse namespace that
    :func:`add_arguments` prepared (messages then name the flags the user typed).

    Other keywords: ``dataset`` (anything with len(), instead of dataset_size), ``program``
    (the name in messages; default: the script's), ``identity`` (``{"model": "cnn"}``: what
    makes this run's checkpoints its own, checked on resume), ``inputs`` (``{"--data": path}``:
    files no output may overwrite), ``comm`` (an mpi4py communicator; default: every rank).

    Every method is collective (every rank calls it, in the same order) unless it says local.
    Construction is collective too: it checks every option and output path on every rank and
    raises the same UsageError (or FileError) everywhere.
    """

    def __init__(self, args=None, *, dataset_size=None, dataset=None, program=None, identity=None, inputs=None,
                 comm=None, **options):
        flags_style = False
        if args is not None:
            keywords = getattr(args, _ARGPARSE_MARK, None)
            if keywords is None:
                raise UsageError("Job(args): args is not a namespace parsed by a parser that antdt.add_arguments "
                                 "prepared; pass the options as keywords instead")
            from_args = {k: getattr(args, k) for k in keywords if getattr(args, k, None) is not None}
            from_args.update(options)
            options = from_args
            flags_style = True
        if dataset_size is None and dataset is not None:
            dataset_size = len(dataset)
        if dataset_size is None:
            raise UsageError("Job: give dataset_size= (the number of training samples) or dataset=")
        handle = 0
        if comm is not None:
            from mpi4py import MPI  # only where the caller already uses mpi4py
            handle = MPI._handleof(comm)
        super().__init__(options, int(dataset_size), program or _program_name(), list((identity or {}).items()),
                         list((inputs or {}).items()), flags_style, handle)

    def add_state(self, name, array=None, *, save=None, load=None):
        """Registers this program's own state (before the first next_step): saved by rank 0 in
        every checkpoint, and on a resume written back on every rank, whatever their number.

        ``add_state("w", array)``: a float32, float64 or int64 NumPy array (or a CPU tensor),
        restored in place; it must stay alive and keep its size. ``add_state("opt", save=f,
        load=g)``: anything else, as bytes from ``f()``; ``g(bytes)`` gets them back."""
        if array is not None:
            if save is not None or load is not None:
                raise UsageError(f"Job.add_state('{name}'): give an array, or save= and load=, not both")
            self._add_state_array(name, array)
        else:
            if save is None or load is None:
                raise UsageError(f"Job.add_state('{name}'): give an array, or both save= and load=")
            self._add_state_bytes(name, save, load)

    def micro_batches(self):
        """Local: this rank's micro-batches of the step under way, as NumPy int64 arrays of sample
        indices, until the step has none left. Under a pooled policy (nd) each is claimed as the
        loop asks for it, so compute one before asking for the next."""
        while True:
            idx = self.next_micro_batch()
            if len(idx) == 0:
                return
            yield idx

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if exc[0] is None:
            self.close()
        return False


def add_arguments(parser, group_prefix="antdt: "):
    """Adds every Job option to an argparse parser as the flags antdt's programs have
    (--global-batch, --policy, --checkpoint-dir, --resume, ...), one argument group per kind,
    with their help and defaults. Parse, then pass the namespace: ``antdt.Job(args, ...)``.
    An option not given stays None, so its ANTDT_* environment variable or default applies."""
    import argparse

    groups = {}
    keywords = []
    for keyword, key, description, group, is_flag, negated, default, env in _antdt.option_table():
        if key == "config":
            group = "Options"
        g = groups.get(group)
        if g is None:
            g = groups[group] = parser.add_argument_group(group_prefix + group)
        text = description.replace("%", "%%")
        if default and not is_flag:
            text += f" (default: {default})"
        if env:
            text += f" [{env}]"
        if is_flag:
            g.add_argument("--" + key, dest=keyword, action="store_const", const=True, default=None, help=text)
            if negated:
                g.add_argument("--" + negated, dest=keyword, action="store_const", const=False, default=None,
                               help=argparse.SUPPRESS)
        else:
            g.add_argument("--" + key, dest=keyword, default=None, metavar=key.upper().replace("-", "_"),
                           help=text)
        keywords.append(keyword)
    parser.set_defaults(**{_ARGPARSE_MARK: keywords})
    _antdt.set_option_names("flags")
    return parser


def abort(code=EXIT_RUNTIME):
    """Ends every rank of the job at once with this exit code (MPI_Abort)."""
    _antdt.abort(int(code))


def _report(program, error):
    rank, size = world_rank(), world_size()
    line = " ".join(str(error).splitlines())
    where = f" (rank {rank})" if size > 1 and rank != 0 else ""
    print(f"{program}: error{where}: {line}", file=sys.stderr, flush=True)


def _end(error, program):
    """What run_main and the excepthook do with an exception: one line (from the rank that saw
    it first-hand), then the exit code; the job ends at once (MPI_Abort) when other ranks may be
    left waiting: a stall, or a failure not every rank raised. Returns the exit code."""
    code = exit_code_for(error)
    size = world_size()
    if isinstance(error, Error):
        if not error.heard:
            _report(program, error)
        if size > 1 and (isinstance(error, StallError) or not error.shared):
            if error.heard:
                time.sleep(2)  # the rank that saw it first-hand (and names a stalled one) prints first
            abort(code)
        return code
    traceback.print_exception(type(error), error, error.__traceback__, file=sys.stderr)
    _report(program, f"{type(error).__name__}: {error}")
    if size > 1:
        abort(code)  # the other ranks would wait for this one forever
    return code


def run_main(fn, *args, program=None, **kwargs):
    """Runs ``fn(*args, **kwargs)`` and returns its exit code (None counts as 0), for
    ``sys.exit(antdt.run_main(main))``. An antdt error becomes one line on stderr,
    ``<program>: error: <message>``, from the rank that saw it first-hand, and the exit code of
    docs/errors.md, the same on every rank: 2 usage or input, 3 a failed write, 4 a NaN or Inf,
    5 a stalled rank, 1 anything else (with its traceback). A failure that some ranks did not
    see ends the whole job (MPI_Abort) rather than leave them waiting."""
    program = program or _program_name()
    try:
        code = fn(*args, **kwargs)
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as e:  # noqa: B902 - every failure gets its line and code
        return _end(e, program)
    return 0 if code is None else int(code)


def _excepthook(kind, value, tb):
    """An uncaught exception outside run_main: an antdt error ends as run_main would end it;
    any other prints its traceback and, with other ranks, ends the job (they would wait)."""
    if isinstance(value, Error):
        code = _end(value, _program_name())
        sys.stdout.flush()
        sys.stderr.flush()
        _antdt.finalize()
        os._exit(code)
    sys.__excepthook__(kind, value, tb)
    if world_size() > 1 and issubclass(kind, Exception):
        abort(EXIT_RUNTIME)


if sys.excepthook is sys.__excepthook__ and threading.current_thread() is threading.main_thread():
    sys.excepthook = _excepthook
