"""Calling a turn's environment copies: directly, or concurrently with a time limit (``env.step_timeout_s``).

Every call runs inside :func:`grove.user_code.user_code`, so an environment that calls ``sys.exit`` (or raises
``KeyboardInterrupt`` while grove handles the stop signals) fails like one that raises, whichever thread it runs in.

Without a limit the calls are made one after another in the caller's thread. With a limit each environment copy
gets a daemon worker thread of its own, created on its first call: a turn's calls are handed to their copies'
workers at once and waited for together, each until its own deadline, so a turn in which several copies hang costs
about one timeout, not one per copy. A copy's own calls stay one at a time and in order (one worker each), and
the results are returned in the order the calls were given, so what the rollout does with them does not depend on
the threads' timing. A thread cannot be killed: a call still running at its deadline is abandoned with its worker
(told to end once the call returns; the copy's trajectory ends, so it gets no further calls). Daemon threads, not a
``ThreadPoolExecutor``, whose threads are joined at interpreter exit: a hung environment would keep the trainer
from exiting.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, wait
from typing import Any

from grove.user_code import user_code

__all__ = ["EnvironmentCalls", "EnvironmentTimeout"]

#: one call: (environment copy, "reset" or "step", function, arguments)
Call = tuple[int, str, Callable[..., Any], tuple[Any, ...]]


class EnvironmentTimeout(TimeoutError):
    """An environment's ``reset`` or ``step`` did not return within ``env.step_timeout_s``."""


def _in_user_code(label: str, fn: Callable[..., Any], args: tuple[Any, ...]) -> Any:
    with user_code(label):
        return fn(*args)


def _serve(calls: queue.SimpleQueue) -> None:
    """A worker thread's loop: run ``(future, fn, args)`` items until ``None``."""
    while (item := calls.get()) is not None:
        future, fn, args = item
        if future.set_running_or_notify_cancel():
            try:
                future.set_result(fn(*args))
            except BaseException as exc:  # noqa: BLE001 - handed to the waiting caller
                future.set_exception(exc)


class EnvironmentCalls:
    """Runs batches of environment calls; ``timeout_s=None`` calls directly, in the caller's thread."""

    def __init__(self, env_name: str, timeout_s: float | None) -> None:
        self.env_name = env_name
        self.timeout_s = timeout_s
        self._workers: dict[int, queue.SimpleQueue] = {}

    def _label(self, what: str) -> str:
        return f"environment {self.env_name!r} {what}"

    def run(self, calls: Sequence[Call]) -> list[tuple[Any, Exception | None]]:
        """``(result, None)`` or ``(None, exception)`` per call, in the order of ``calls``. An ``Exception`` the
        environment raised (a ``sys.exit`` becomes :class:`grove.user_code.UserCodeExit`) or an
        :class:`EnvironmentTimeout` is returned; anything else (a real Ctrl-C) propagates."""
        if self.timeout_s is None:
            out: list[tuple[Any, Exception | None]] = []
            for _, what, fn, args in calls:
                try:
                    out.append((_in_user_code(self._label(what), fn, args), None))
                except Exception as exc:  # noqa: BLE001 - an environment failure ends only its own trajectory
                    out.append((None, exc))
            return out
        pending = []
        for key, what, fn, args in calls:
            future: Future = Future()
            self._worker(key).put((future, _in_user_code, (self._label(what), fn, args)))
            pending.append((key, what, future, time.monotonic() + self.timeout_s))
        return [self._outcome(key, what, future, deadline) for key, what, future, deadline in pending]

    def _outcome(self, key: int, what: str, future: Future, deadline: float) -> tuple[Any, Exception | None]:
        wait([future], timeout=max(0.0, deadline - time.monotonic()))
        if not future.done():
            self._abandon(key)
            return None, EnvironmentTimeout(
                f"{what} did not return within {self.timeout_s:g} s (env.step_timeout_s); the trajectory ends here"
            )
        exc = future.exception()
        if exc is None:
            return future.result(), None
        if not isinstance(exc, Exception):
            raise exc
        return None, exc

    def _worker(self, key: int) -> queue.SimpleQueue:
        calls = self._workers.get(key)
        if calls is None:
            calls = self._workers[key] = queue.SimpleQueue()
            threading.Thread(target=_serve, args=(calls,), name=f"grove-env-{key}", daemon=True).start()
        return calls

    def _abandon(self, key: int) -> None:
        calls = self._workers.pop(key, None)
        if calls is not None:
            calls.put(None)  # the worker ends when (if) its hung call returns

    def close(self) -> None:
        """Tell every worker to end (each after the call it is running, if any)."""
        for key in list(self._workers):
            self._abandon(key)
