"""Processes for the tests that start many short runs, started in milliseconds instead of seconds.

A new interpreter spends about 5 s importing torch, transformers and grove before a tiny run's first step. The
tests that kill, stop and resume run after run (the kill fuzzer), and those that compare N ranks with one process,
start each process instead from a server that imported them once: the standard library's ``multiprocessing`` fork
server, one per test worker. Each process is a fork of that server and a process of its own: a SIGKILL or SIGTERM
reaches it alone, and its exit status is its own, or minus the signal's number, as with :mod:`subprocess`. It runs
with the given environment, working directory and log file (stdout and stderr). Settings read at import time come
from the server, whose environment is set here as the ``grove`` command line sets it before any import.

:func:`run_ranks` launches a world of N such processes the way ``torchrun --standalone`` does (``RANK``,
``LOCAL_RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``), and stops the others a grace period after one
fails.
``tests/test_distributed_cli.py`` runs torchrun itself.
"""

from __future__ import annotations

import importlib
import multiprocessing
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

__all__ = [
    "ForkedProcess", "run", "run_grove", "run_grove_ranks", "run_ranks", "run_script", "start", "start_grove",
    "start_server",
]

_CONTEXT = multiprocessing.get_context("forkserver")
# what `grove` itself sets before importing the Hugging Face libraries
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
_CONTEXT.set_forkserver_preload(["forked_processes", "grove.cli", "grove.training.trainer"])


def _child(target: str, args: tuple, env: dict[str, str], cwd: str, log: str, stderr_log: str | None) -> None:
    """The forked process: ``module:function(*args)`` in ``cwd`` with ``env``, stdout appended to ``log``, stderr
    to ``stderr_log`` (or ``log``)."""
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    for entry in reversed([p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]):
        sys.path.insert(0, entry)
    for stream, path in ((1, log), (2, stderr_log or log)):
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(fd, stream)
        os.close(fd)
    sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115 - the process's own streams
    sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
    signal.signal(signal.SIGINT, signal.default_int_handler)
    module, name = target.split(":")
    getattr(importlib.import_module(module), name)(*args)


def grove_command(*argv: str) -> None:
    """``grove ARGV``, as the command line runs it (exits with its status)."""
    sys.argv = ["grove", *argv]
    from grove.cli import main

    main()


def python_script(path: str, *argv: str) -> None:
    """``python PATH ARGV``: the script run as ``__main__``."""
    import runpy

    sys.argv = [path, *argv]
    runpy.run_path(path, run_name="__main__")


def grove_command_under_file_size_limit(soft: int, hard: int, *argv: str) -> None:
    """``grove ARGV`` under ``ulimit -f`` (``RLIMIT_FSIZE``: ``soft`` bytes, ``hard`` or -1 for unlimited)."""
    import resource

    resource.setrlimit(resource.RLIMIT_FSIZE, (soft, resource.RLIM_INFINITY if hard < 0 else hard))
    grove_command(*argv)


class ForkedProcess:
    """A running forked process (the parts of :class:`subprocess.Popen` the tests use)."""

    def __init__(self, process: multiprocessing.process.BaseProcess, log: Path) -> None:
        self._process = process
        self.pid = process.pid
        self.log = log

    def poll(self) -> int | None:
        return self._process.exitcode

    def wait(self, timeout: float | None = None) -> int:
        self._process.join(timeout)
        if self._process.exitcode is None:
            raise subprocess.TimeoutExpired([self._process.name], timeout)
        return self._process.exitcode

    def send_signal(self, sig: int) -> None:
        if self._process.exitcode is None:
            os.kill(self.pid, sig)


def start_server() -> None:
    """Start the fork server now (it imports grove), so that the next process's time leaves its start-up out."""
    probe = _CONTEXT.Process(target=os.getpid, name="fork-server-probe")
    probe.start()
    probe.join()


def start(
    target: str, args: Sequence[object], env: dict[str, str], cwd: Path, log: Path, stderr_log: Path | None = None
) -> ForkedProcess:
    """Start ``module:function(*args)`` forked from the fork server (started, importing grove, at the first call)."""
    streams = (str(log), str(stderr_log) if stderr_log else None)
    process = _CONTEXT.Process(target=_child, args=(target, tuple(args), dict(env), str(cwd), *streams), name=target)
    process.start()
    return ForkedProcess(process, log)


def start_grove(
    argv: Sequence[str], env: dict[str, str], cwd: Path, log: Path, stderr_log: Path | None = None
) -> ForkedProcess:
    """Start ``grove ARGV`` forked from the fork server."""
    return start("forked_processes:grove_command", list(argv), env, cwd, log, stderr_log)


def run(
    target: str, args: Sequence[object], env: dict[str, str], cwd: Path, logs: Path, timeout: float = 300
) -> subprocess.CompletedProcess:
    """``module:function(*args)`` to its end, as :func:`subprocess.run` with ``capture_output=True, text=True``
    reports it (its stdout and stderr also kept in ``logs/``)."""
    logs.mkdir(parents=True, exist_ok=True)
    out, err = logs / "stdout.log", logs / "stderr.log"
    for path in (out, err):
        path.write_text("")
    code = start(target, args, env, cwd, out, err).wait(timeout)
    return subprocess.CompletedProcess([target, *map(str, args)], code, out.read_text(), err.read_text())


def run_grove(
    argv: Sequence[str], env: dict[str, str], cwd: Path, logs: Path, timeout: float = 300,
    file_size_limit: tuple[int, int] | None = None,
) -> subprocess.CompletedProcess:
    """``grove ARGV`` to its end (see :func:`run`); ``file_size_limit=(soft, hard)``: under ``ulimit -f`` (hard -1:
    unlimited)."""
    if file_size_limit is None:
        return run("forked_processes:grove_command", list(argv), env, cwd, logs, timeout)
    return run("forked_processes:grove_command_under_file_size_limit", [*file_size_limit, *argv], env, cwd, logs,
               timeout)


def run_script(
    path: Path, argv: Sequence[str], env: dict[str, str], cwd: Path, logs: Path, timeout: float = 300
) -> subprocess.CompletedProcess:
    """``python PATH ARGV`` to its end (see :func:`run`)."""
    return run("forked_processes:python_script", [str(path), *argv], env, cwd, logs, timeout)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ranks(
    processes: int, target: str, args: Sequence[object], *, logs: Path, env: dict[str, str] | None = None,
    cwd: Path | None = None, timeout: float = 600, grace: float = 5.0,
) -> None:
    """Run ``module:function(*args)`` as a world of ``processes`` ranks (one plain process for 1) and wait for all;
    when one fails, the others get ``grace`` seconds to end (as torchrun gives them) before they are killed, as at
    the timeout; then fail with every rank's log (``logs/rank-N.log``)."""
    logs.mkdir(parents=True, exist_ok=True)
    base = {**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}
    if processes > 1:
        base.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()), WORLD_SIZE=str(processes),
                    LOCAL_WORLD_SIZE=str(processes))
    ranks = []
    for rank in range(processes):
        rank_env = {**base, "RANK": str(rank), "LOCAL_RANK": str(rank)} if processes > 1 else base
        ranks.append(start(target, args, rank_env, cwd or Path.cwd(), logs / f"rank-{rank}.log"))
    deadline, stop_at = time.monotonic() + timeout, None
    while any(r.poll() is None for r in ranks):
        if stop_at is None and any(r.poll() not in (None, 0) for r in ranks):
            stop_at = time.monotonic() + grace  # the others may still be writing their own error
        if time.monotonic() > min(deadline, stop_at or deadline):
            for r in ranks:
                r.send_signal(signal.SIGKILL)
        time.sleep(0.02)
    codes = [r.poll() for r in ranks]
    if any(codes):
        text = "\n".join(
            f"--- rank {i} (exit {c}):\n{r.log.read_text()[-6000:]}" for i, (r, c) in enumerate(zip(ranks, codes, strict=True))
        )
        raise AssertionError(f"{target}{tuple(args)} on {processes} process(es) failed:\n{text}")


def run_grove_ranks(processes: int, argv: Sequence[str], *, logs: Path, env: dict[str, str] | None = None,
                    cwd: Path | None = None, timeout: float = 600, grace: float = 5.0) -> None:
    """``grove ARGV`` on ``processes`` ranks (see :func:`run_ranks`)."""
    run_ranks(processes, "forked_processes:grove_command", list(argv), logs=logs, env=env, cwd=cwd, timeout=timeout,
              grace=grace)
