"""antdt's errors as Python exceptions (docs/python.md, "Errors"; docs/errors.md).

Each class is one kind of antdt error and carries the exit code antdt's programs use for it.
The message is the same one line the C++ library writes. Two flags tell how the ranks saw it:

``shared``
    every rank of the job raised this same error (the ranks agreed on it), so none is left
    waiting and the job may end normally;
``heard``
    this rank only heard of the error from another rank, which reports it: print nothing.

This module is plain Python (no MPI): the binding raises its classes.
"""

__all__ = [
    "Error", "UsageError", "FileError", "CheckpointError", "WriteError", "NonFiniteError", "StallError",
    "MpiError", "DeviceError", "EXIT_RUNTIME", "EXIT_USAGE", "EXIT_WRITE", "EXIT_NON_FINITE", "EXIT_STALLED",
    "EXIT_RESTART", "EXIT_STOPPED", "exit_code_for",
]

EXIT_RUNTIME = 1     # an MPI or device failure, or a bug
EXIT_USAGE = 2       # bad usage or input: options, data, checkpoint, output paths
EXIT_WRITE = 3       # a write under way failed (an output or a checkpoint)
EXIT_NON_FINITE = 4  # training produced a NaN or Inf (stopped before checkpointing it)
EXIT_STALLED = 5     # a rank stalled past the step timeout (every live rank stopped)
EXIT_RESTART = 75    # stopped for a kill-restart: resubmit without the nodes named, resuming
EXIT_STOPPED = 76    # stopped on a signal after a checkpoint: requeue, or rerun resuming


class Error(Exception):
    """The root of every antdt error."""

    exit_code = EXIT_RUNTIME

    def __init__(self, message="", shared=False, heard=False):
        super().__init__(message)
        self.shared = shared
        self.heard = heard


class UsageError(Error):
    """Bad usage: an invalid option, argument or combination."""

    exit_code = EXIT_USAGE


class FileError(Error):
    """A file that cannot be used: missing, unreadable, of the wrong shape or type."""

    exit_code = EXIT_USAGE


class CheckpointError(FileError):
    """A checkpoint that cannot be restored: another run's, another model's, damaged."""


class WriteError(FileError):
    """A write that failed once under way (disk full, read-only, I/O error)."""

    exit_code = EXIT_WRITE


class NonFiniteError(Error):
    """Training produced a NaN or Inf; the run stopped before the update and its checkpoint."""

    exit_code = EXIT_NON_FINITE


class StallError(Error):
    """A rank did not reach a step's reduction within the step timeout (step_timeout)."""

    exit_code = EXIT_STALLED

    @property
    def first_hand(self):
        """True on the rank that saw the stall itself (and names the ranks)."""
        return not self.heard


class MpiError(Error):
    """A failed MPI call; ``mpi_code`` is MPI's error code."""

    mpi_code = 0


class DeviceError(Error):
    """A device that was asked for but cannot be used."""


def exit_code_for(error):
    """The exit code for an exception, by docs/errors.md's table: an antdt error's own, 1 for
    any other exception, and SystemExit's code for SystemExit."""
    if isinstance(error, Error):
        return error.exit_code
    if isinstance(error, SystemExit):
        return error.code if isinstance(error.code, int) else (0 if error.code is None else 1)
    return EXIT_RUNTIME
