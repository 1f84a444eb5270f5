"""Graceful stop: SIGTERM (what preemptible clusters, ``kill`` and ``torchrun`` send) and SIGINT (Ctrl-C) ask the
run to stop at the next safe point instead of dying where it stands.

The first signal only sets a flag (and says so on stderr); the training loop checks it after each step (all ranks
agree on it), saves a checkpoint and returns, and the command line says how to resume. A second signal of either
kind while the step finishes (a reward or an environment that hangs, or simply no time to wait) raises
:class:`grove.user_code.ImmediateStop` wherever the main thread is, so the run stops at once from its last
checkpoint; the command line says so. Handlers are installed only in the main thread and restored on exit; while
they are installed, a ``KeyboardInterrupt`` raised inside a reward or an environment is that code's own, not a
Ctrl-C (:func:`grove.user_code.user_code`).
"""

from __future__ import annotations

import signal
import sys
import threading
from contextlib import ExitStack
from types import FrameType

from grove.user_code import ImmediateStop, grove_handles_stop_signals

__all__ = ["StopRequests"]

_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class StopRequests:
    """``with StopRequests() as stop: ... if stop.requested: ...``; ``stop.signal_name`` names the signal."""

    def __init__(self) -> None:
        self.signal_name: str | None = None
        self._previous: dict[int, object] = {}
        self._marks = ExitStack()

    @property
    def requested(self) -> bool:
        return self.signal_name is not None

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        if self.signal_name is not None:  # the second signal: stop now
            raise ImmediateStop(name)
        self.signal_name = name
        try:
            sys.stderr.write(
                f"\n{name} received: the run stops after the current step, with a checkpoint "
                "(send SIGTERM or Ctrl-C again to stop at once, from the last checkpoint)\n"
            )
            sys.stderr.flush()
        except (OSError, ValueError):  # a closed stderr must not turn the stop into a crash
            pass

    def __enter__(self) -> StopRequests:
        if threading.current_thread() is threading.main_thread():
            for sig in _SIGNALS:
                self._previous[sig] = signal.signal(sig, self._handle)
            self._marks.enter_context(grove_handles_stop_signals())
        return self

    def __exit__(self, *exc) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()
        self._marks.close()
