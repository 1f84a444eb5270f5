"""Run a reward function in its own long-lived worker process (``isolation: process``).

One :class:`RewardWorker` per configured reward. Its process is started lazily (at the first call) from a fresh
interpreter (``multiprocessing`` ``spawn``: nothing of the trainer — CUDA state, threads, the model — is
inherited), loads the reward from its pickled reference (a module-level function, a ``functools.partial`` of
one, ...: the worker imports the function's module) and then serves calls ``fn(**kwargs)`` over a pipe, one at a
time, until the trainer exits.

* A call that has not answered within its time limit is cut off: the process is killed (``SIGKILL``) and the
  next call starts a fresh one (:class:`RewardCallTimeout`).
* A process that dies during a call (a segfault in a C extension, ``os._exit``, the kernel's OOM killer) is
  detected by the broken pipe; its exit code is reported (:class:`RewardWorkerDied`) and the next call starts
  a fresh one.
* An exception raised by the reward comes back as :class:`RemoteRewardError` carrying the type name, the
  message and the worker's traceback; the worker stays up. So do ``sys.exit`` and ``KeyboardInterrupt`` in the
  reward: as in the trainer (:func:`grove.user_code.user_code`) they become a ``UserCodeExit`` naming the reward
  (the worker ignores SIGINT, so a ``KeyboardInterrupt`` there is always the reward's own).
* The worker dies with the trainer, however the trainer ends (``SIGKILL`` and the OOM killer included): on Linux
  the kernel kills it when the thread that started it exits (``prctl(PR_SET_PDEATHSIG, SIGKILL)``, armed first
  thing, then the parent is checked to be still the one that started it); everywhere a daemon thread of the
  worker ends it within :data:`PARENT_POLL_S` seconds once its parent process is gone, even while the reward hangs.
  An orphaned worker would otherwise live on (and keep ``multiprocessing``'s resource tracker alive with it).

Limits: starting a worker costs a Python interpreter start plus the imports of the reward's module (and, with
``spawn``, of the trainer's main script; this module lives outside :mod:`grove.rewards`, whose package imports
torch, so a worker whose reward does not need torch starts without it); the inputs and the returned values are
pickled across the pipe (the return value must be picklable: a list, a numpy array, a tensor); the worker is a
daemon process, so a reward
running in it cannot start processes of its own (``multiprocessing`` forbids children of daemons), and it is
terminated when the trainer exits.

Only the standard library and :mod:`grove.user_code` are used here.
"""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import pickle
import signal
import sys
import threading
import time
import traceback
import weakref
from typing import Any

from grove.user_code import grove_handles_stop_signals, user_code

__all__ = [
    "RemoteRewardError",
    "RewardCallTimeout",
    "RewardWorker",
    "RewardWorkerDied",
    "RewardWorkerError",
    "RewardWorkerStartError",
    "pickled_reward",
]

#: how long a fresh worker may take to import the reward's module and report ready
START_TIMEOUT_S = 300.0

#: how often a worker's watchdog thread checks that its parent process is still alive
PARENT_POLL_S = 0.5

_PR_SET_PDEATHSIG = 1  # linux/prctl.h


class RewardWorkerError(RuntimeError):
    """Base of the failures of a call into a reward worker."""


class RewardCallTimeout(RewardWorkerError):
    """The call did not answer within its time limit; the worker was killed."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"timed out after {seconds:g} s")
        self.seconds = seconds


class RewardWorkerDied(RewardWorkerError):
    """The worker process died during the call (segfault, ``os._exit``, killed)."""

    def __init__(self, exitcode: int | None) -> None:
        signame = ""
        if exitcode is not None and exitcode < 0:
            try:
                signame = f", {signal.Signals(-exitcode).name}"
            except ValueError:
                pass
        super().__init__(f"worker process died (exit code {exitcode}{signame})")
        self.exitcode = exitcode


class RewardWorkerStartError(RewardWorkerError):
    """The worker could not start or could not load the reward (not a failure of any sample)."""


class RemoteRewardError(RewardWorkerError):
    """The reward raised inside the worker; ``type_name``, ``message`` and the worker's ``remote_traceback``."""

    def __init__(self, type_name: str, message: str, remote_traceback: str) -> None:
        super().__init__(f"{type_name}: {message}")
        self.type_name = type_name
        self.message = message
        self.remote_traceback = remote_traceback
        self.add_note(f"traceback in the reward worker process:\n{remote_traceback.rstrip()}")


def pickled_reward(fn: Any) -> bytes:
    """``fn`` pickled for the worker (by reference for a module-level function); raises what ``pickle`` raises
    (``PicklingError``, ``TypeError``, ``AttributeError``) for a lambda, a closure or a local function."""
    return pickle.dumps(fn, protocol=pickle.HIGHEST_PROTOCOL)


def _arm_parent_death_signal() -> None:  # pragma: no cover - runs in the worker process
    """Linux: ask the kernel to ``SIGKILL`` this process when the thread that started it exits."""
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    except (OSError, AttributeError):  # no prctl: the watchdog thread alone ends an orphaned worker
        pass


def _watch_parent(parent_pid: int) -> None:  # pragma: no cover - runs in the worker process
    """End this process once its parent is gone (it is then re-parented: ``getppid()`` changes)."""
    while os.getppid() == parent_pid:
        time.sleep(PARENT_POLL_S)
    os._exit(1)


def _die_with_parent(parent_pid: int | None, death_signal: bool) -> None:  # pragma: no cover - in the worker
    """Make sure this worker does not outlive the process that started it (see the module docstring).

    ``parent_pid``: the trainer's pid (``None`` when the worker's parent is some other process, e.g. a fork
    server: then the parent seen now is watched). ``death_signal``: the trainer started the worker from its main
    thread, so the kernel's parent-death signal (sent when that *thread* exits) means the trainer ended.
    """
    if death_signal:
        _arm_parent_death_signal()
    if parent_pid is None:
        parent_pid = os.getppid()
    elif os.getppid() != parent_pid:  # the trainer died before the signal was armed
        os._exit(1)
    threading.Thread(target=_watch_parent, args=(parent_pid,), name="grove-reward-parent-watch", daemon=True).start()


def _serve(
    conn: Any, payload: bytes, name: str = "", parent_pid: int | None = None, death_signal: bool = False
) -> None:  # pragma: no cover - runs in the worker process
    """The worker's loop: load the reward, then answer ``("call", kwargs)`` messages until EOF or ``"stop"``."""
    _die_with_parent(parent_pid, death_signal)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the trainer's to handle; it then ends the worker
    try:
        fn = pickle.loads(payload)
    except BaseException:  # noqa: BLE001 - reported to the trainer
        conn.send_bytes(pickle.dumps(("load_error", traceback.format_exc())))
        return
    conn.send_bytes(pickle.dumps(("ready", None)))
    while True:
        try:
            kind, kwargs = pickle.loads(conn.recv_bytes())
        except (EOFError, OSError):
            return
        if kind == "stop":
            return
        try:
            # SIGINT is ignored here, so a KeyboardInterrupt is the reward's own: mark the span as handled by grove
            with grove_handles_stop_signals(), user_code(f"reward {name!r}"):
                value = fn(**kwargs)
            result: tuple[str, Any] = ("ok", value)
        except BaseException as e:  # noqa: BLE001 - a reward's failure goes back to the trainer
            result = ("error", (type(e).__name__, str(e), traceback.format_exc()))
        try:
            blob = pickle.dumps(result, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as e:  # noqa: BLE001
            blob = pickle.dumps(
                ("error", (
                    "TypeError",
                    f"returned a {type(result[1]).__name__}, which cannot be sent back from the worker process "
                    f"({type(e).__name__}: {e}); return a list of numbers",
                    traceback.format_exc(),
                ))
            )
        conn.send_bytes(blob)


def _kill(process: Any, conn: Any) -> None:
    """Stop a worker process at once and release its pipe (also the finaliser of a collected worker)."""
    try:
        if process.is_alive():
            process.kill()
        process.join(5)
    except Exception:  # noqa: BLE001 - best effort at shutdown
        pass
    try:
        conn.close()
    except Exception:  # noqa: BLE001
        pass


class RewardWorker:
    """One reward's worker process, started at the first :meth:`call` and restarted after a kill or a death.

    ``starts`` counts the processes started, ``restarts`` those after the first. Not thread-safe: one call at a
    time (the trainer scores from one thread).
    """

    def __init__(self, name: str, payload: bytes, *, context: str = "spawn") -> None:
        self.name = name
        self._payload = payload
        self._context = context
        self._process: Any = None
        self._conn: Any = None
        self._finalizer: weakref.finalize | None = None
        self.starts = 0

    @property
    def restarts(self) -> int:
        return max(0, self.starts - 1)

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.is_alive()

    def _start(self) -> None:
        ctx = multiprocessing.get_context(self._context)
        parent, child = ctx.Pipe(duplex=True)
        parent_pid = os.getpid() if self._context in ("spawn", "fork") else None  # else a fork server is the parent
        death_signal = threading.current_thread() is threading.main_thread()
        process = ctx.Process(
            target=_serve, args=(child, self._payload, self.name, parent_pid, death_signal),
            name=f"grove-reward-{self.name}", daemon=True,
        )
        process.start()
        child.close()  # the worker holds the only other end: its death reads as EOF here
        self.starts += 1
        try:
            if not parent.poll(START_TIMEOUT_S):
                _kill(process, parent)
                raise RewardWorkerStartError(
                    f"the worker process did not load the reward within {START_TIMEOUT_S:g} s"
                )
            kind, detail = pickle.loads(parent.recv_bytes())
        except (EOFError, OSError):
            _kill(process, parent)
            raise RewardWorkerStartError(
                f"the worker process died while loading the reward (exit code {process.exitcode}); is its module "
                f"importable in a fresh interpreter (installed, or on PYTHONPATH)?"
            ) from None
        if kind != "ready":
            _kill(process, parent)
            raise RewardWorkerStartError(f"the worker process could not load the reward:\n{detail}")
        self._process, self._conn = process, parent
        self._finalizer = weakref.finalize(self, _kill, process, parent)

    def _discard(self) -> int | None:
        """Kill (if still alive) and forget the current process; its exit code."""
        process, conn = self._process, self._conn
        self._process = self._conn = None
        if self._finalizer is not None:
            self._finalizer.detach()
            self._finalizer = None
        if process is None:
            return None
        _kill(process, conn)
        return process.exitcode

    def call(self, kwargs: dict[str, Any], timeout: float | None = None) -> Any:
        """``fn(**kwargs)`` in the worker, waiting at most ``timeout`` seconds (None: no limit).

        Raises:
            RewardCallTimeout: no answer in time (the worker is killed; the next call starts a new one).
            RewardWorkerDied: the worker died during the call (the next call starts a new one).
            RemoteRewardError: the reward raised.
            RewardWorkerStartError: the worker could not be started, or the inputs cannot be pickled.
        """
        try:
            message = pickle.dumps(("call", kwargs), protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as e:  # noqa: BLE001
            raise RewardWorkerStartError(
                f"the reward's inputs cannot be sent to the worker process ({type(e).__name__}: {e})"
            ) from e
        if self._process is None:
            self._start()
        try:
            self._conn.send_bytes(message)
            if not self._conn.poll(timeout):
                self._discard()
                raise RewardCallTimeout(float(timeout))  # type: ignore[arg-type]
            kind, payload = pickle.loads(self._conn.recv_bytes())
        except (EOFError, OSError):  # BrokenPipeError / ConnectionResetError are OSErrors
            raise RewardWorkerDied(self._discard()) from None
        if kind == "ok":
            return payload
        raise RemoteRewardError(*payload)

    def close(self) -> None:
        """Stop the worker process (a later call starts a new one)."""
        if self._conn is not None:
            try:
                self._conn.send_bytes(pickle.dumps(("stop", None)))
            except OSError:
                pass
        self._discard()
