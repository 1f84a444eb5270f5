"""One process at a time in a run directory: an exclusive lock held for a run's whole life.

Two runs writing one directory would interleave their logs (steps 1, 1, 2, 2, …), overwrite each other's config and
checkpoints, and both exit 0; a ``--resume`` started while the run still goes on would log its steps twice. Every
command that writes a run (``grove train``, ``grove sft``, ``grove rm``, ``--resume``, ``grove.train``) therefore
takes the directory with :func:`hold_run_directory` before it writes anything there, and a second one is refused
with one line naming the holder's process id.

The lock is the kernel's ``flock`` on the directory itself (no lock file is written, so a refused command changes
nothing in the directory): the kernel releases it when the holder's process ends, however it ends, so a lock left
by a killed run never blocks its ``--resume``. It is taken by the main process of a run (rank 0 under ``torchrun``)
and closes on ``exec``; grove's worker processes are spawned, so none inherits it. Where the platform has no
``flock`` (Windows), or the file system does not support it, runs are not locked.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["RunDirectoryBusy", "RunDirectoryLock", "hold_run_directory"]

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None


class RunDirectoryBusy(RuntimeError):
    """Another process holds the run directory (the command line prints it as one ``error:`` line, exit 2)."""


class RunDirectoryLock:
    """An exclusive hold on a run directory (see the module docstring); :meth:`release` (or the process's end)
    gives it up."""

    def __init__(self, run_dir: Path, descriptor: int | None) -> None:
        self.run_dir = run_dir
        self._descriptor = descriptor

    @property
    def held(self) -> bool:
        return self._descriptor is not None

    def release(self) -> None:
        if self._descriptor is not None:
            os.close(self._descriptor)  # closing the only descriptor releases the flock
            self._descriptor = None

    def __enter__(self) -> RunDirectoryLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def __del__(self) -> None:
        self.release()


def hold_run_directory(run_dir: Path) -> RunDirectoryLock:
    """Take the directory ``run_dir`` for this process, or raise :class:`RunDirectoryBusy` naming the process that
    holds it (a directory that does not exist is not held: the caller refuses it)."""
    if fcntl is None or not run_dir.is_dir():
        return RunDirectoryLock(run_dir, None)
    descriptor = os.open(run_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _holder(descriptor)
        os.close(descriptor)
        who = f"process {holder}" if holder is not None else "another process"
        raise RunDirectoryBusy(
            f"output_dir {str(run_dir)!r} is in use by {who} (a grove run writing there); wait for it to end or stop "
            "it, then --resume it, or choose another output_dir"
        ) from None
    except OSError:  # a file system without flock: the run goes on unlocked
        os.close(descriptor)
        return RunDirectoryLock(run_dir, None)
    return RunDirectoryLock(run_dir, descriptor)


def _holder(descriptor: int) -> int | None:
    """The process id holding a flock on the file of ``descriptor`` (Linux's /proc/locks), ``None`` if unknown."""
    stat = os.fstat(descriptor)
    device = f"{os.major(stat.st_dev):02x}:{os.minor(stat.st_dev):02x}:{stat.st_ino}"
    try:
        lines = Path("/proc/locks").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        fields = line.split()
        # "1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF" (a waiter's line has "->" after the number)
        if "FLOCK" in fields and device in fields:
            pid = fields[fields.index(device) - 1]
            if pid.isdigit():
                return int(pid)
    return None
