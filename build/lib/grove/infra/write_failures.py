"""Recognising why a write failed (a full disk, a file-size limit) wherever grove writes, and saying what to do.

The libraries grove writes through report the same condition in different words: Python raises
``OSError(ENOSPC)``, safetensors a ``SafetensorError`` whose text carries ``os error 28``, and ``torch.save`` a
``RuntimeError`` about an "unexpected pos" that names no cause at all. :func:`write_failure_cause` reads each of
them, and for the last looks at the file system itself (free space) and at the process's file-size limit
(``ulimit -f``). :func:`reporting_write_failures` wraps a write so that a failure comes out as a
:class:`RunWriteError` naming the file, the cause and the fix, which the command line prints as one ``error:`` line.
"""

from __future__ import annotations

import errno
import os
import resource
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = [
    "DISK_FULL",
    "SIZE_LIMIT",
    "RunWriteError",
    "describe_write_failure",
    "reporting_write_failures",
    "write_failure_cause",
]

DISK_FULL = "the disk is full"
SIZE_LIMIT = "a file reached the file-size limit (ulimit -f)"

#: below this many free bytes, a write failure that names no cause is taken for a full disk
_NEARLY_FULL_BYTES = 32 * 2**20

_FULL_TEXTS = ("no space left", "os error 28", "storagefull", "disk quota exceeded", "os error 122")
_SIZE_TEXTS = ("file too large", "os error 27", "filetoolarge")
# torch.save's stream writer reports a short write without its errno ("unexpected pos", or the C++ stream's own
# "basic_ios::clear: iostream error", depending on where in the archive the disk fills)
_UNEXPLAINED_WRITE_TEXTS = ("unexpected pos", "file write failed", "pytorchstreamwriter", "iostream error")


class RunWriteError(OSError):
    """A file of the run could not be written; the message names the file, why, what is intact and how to go on."""

    def __str__(self) -> str:  # the message alone, without OSError's "[Errno 28]" prefix
        return self.strerror or super().__str__()


def _free_bytes(path: Path) -> int | None:
    for candidate in (path, *path.parents):
        try:
            stats = os.statvfs(candidate)
        except OSError:
            continue
        return stats.f_bavail * stats.f_frsize
    return None


def _size_limited() -> bool:
    soft, _hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    return soft != resource.RLIM_INFINITY


def write_failure_cause(exc: BaseException, path: Path) -> str | None:
    """:data:`DISK_FULL`, :data:`SIZE_LIMIT`, or ``None`` (some other failure) for an exception raised while
    writing ``path``."""
    code = getattr(exc, "errno", None)
    if code in (errno.ENOSPC, errno.EDQUOT):
        return DISK_FULL
    if code == errno.EFBIG:
        return SIZE_LIMIT
    text = str(exc).lower()
    if any(t in text for t in _FULL_TEXTS):
        return DISK_FULL
    if any(t in text for t in _SIZE_TEXTS):
        return SIZE_LIMIT
    if any(t in text for t in _UNEXPLAINED_WRITE_TEXTS):
        free = _free_bytes(path)
        if free is not None and free < _NEARLY_FULL_BYTES:
            return DISK_FULL
        if _size_limited():
            return SIZE_LIMIT
    return None


def _fix(cause: str | None) -> str:
    if cause == DISK_FULL:
        return "free disk space"
    if cause == SIZE_LIMIT:
        return "raise the file-size limit (ulimit -f)"
    return "fix that"


def describe_write_failure(exc: BaseException, path: Path, what: str, resume_hint: str) -> str:
    """``could not write <what> <path>: <cause> (<error>); <fix>, then <resume_hint>``."""
    cause = write_failure_cause(exc, path)
    reason = f"{cause} ({_error_text(exc)})" if cause else _error_text(exc)
    return f"could not write {what} {path}: {reason}; {_fix(cause)}, then {resume_hint}"


def _error_text(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return " ".join(str(exc).split()) or type(exc).__name__


@contextmanager
def reporting_write_failures(path: Path, what: str, resume_hint: str) -> Iterator[None]:
    """Turn a failed write of ``path`` (any ``OSError``, or another library's error that :func:`write_failure_cause`
    recognises) into a :class:`RunWriteError` saying what failed and ``resume_hint`` (e.g. ``"continue with
    --resume RUN"``). Other exceptions (bugs) pass through unchanged."""
    try:
        yield
    except RunWriteError:
        raise
    except Exception as exc:
        if not isinstance(exc, OSError) and write_failure_cause(exc, path) is None:
            raise
        cause = write_failure_cause(exc, path)
        code = errno.ENOSPC if cause == DISK_FULL else errno.EFBIG if cause == SIZE_LIMIT else errno.EIO
        raise RunWriteError(code, describe_write_failure(exc, path, what, resume_hint)) from exc
