"""Graceful stop: SIGTERM (what preemptible clusters, ``kill`` and ``torchrun`` send) and SIGINT (Ctrl-C) ask the
run to stop at the next safe point instead of dying where it stands.

The first signal only sets a flag; the training loop checks it after each step (all ranks agree on it), saves a
checkpoint and returns, and the command line says how to resume. A second Ctrl-C while the step finishes
interrupts at once (the default handler is back after the first), for when waiting is not an option.
Handlers are installed only in the main thread and restored on exit.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType

__all__ = ["StopRequests"]

_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class StopRequests:
    """``with StopRequests() as stop: ... if stop.requested: ...``; ``stop.signal_name`` names the signal."""

    def __init__(self) -> None:
        self.signal_name: str | None = None
        self._previous: dict[int, object] = {}

    @property
    def requested(self) -> bool:
        return self.signal_name is not None

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.signal_name = signal.Signals(signum).name
        signal.signal(signal.SIGINT, signal.default_int_handler)  # a second Ctrl-C interrupts at once

    def __enter__(self) -> StopRequests:
        if threading.current_thread() is threading.main_thread():
            for sig in _SIGNALS:
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()
