"""A line now and then during a long quiet phase, wherever the output goes (a terminal, a log file, a pipe).

A step prints its line when it ends; an evaluation, a first step that compiles, or an environment evaluation of
hundreds of episodes may take many minutes without one. :class:`Heartbeat` runs a daemon thread that, once
``interval`` seconds have passed without any progress output, prints what the run is doing and for how long:
``evaluation before training: 120 of 300 episodes, 4 min 10 s``. The run names its phases
(:meth:`Heartbeat.phase`); the loops that know their progress report it with :func:`report_progress` (a no-op when
no heartbeat runs, e.g. under ``grove eval`` or in tests). Every other line the run prints (:meth:`Heartbeat.touch`)
resets the clock, so a run that prints a line per step prints no extra ones.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

__all__ = ["Heartbeat", "report_progress"]

_active: Heartbeat | None = None


def report_progress(done: int, total: int | None, unit: str) -> None:
    """Tell the running heartbeat (if any) how far the current phase is: ``done`` of ``total`` ``unit``."""
    if _active is not None:
        _active.advance(done, total, unit)


def _duration(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    if hours:
        return f"{hours} h {minutes} min"
    return f"{minutes} min {secs} s" if minutes else f"{secs} s"


class Heartbeat:
    """Prints ``write(line)`` after ``interval`` quiet seconds while a phase runs (see the module docstring);
    ``interval`` 0 turns it off. Use as a context manager around the run."""

    def __init__(self, interval: float, write: Callable[[str], None]) -> None:
        self.interval = interval
        self._write = write
        self._lock = threading.Lock()
        self._label: str | None = None
        self._started = self._last_output = time.monotonic()
        self._progress: tuple[int, int | None, str] | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> Heartbeat:
        global _active
        if self.interval > 0:
            _active = self
            self._thread = threading.Thread(target=self._beat, name="grove-heartbeat", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        global _active
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if _active is self:
            _active = None

    @contextmanager
    def phase(self, label: str) -> Iterator[None]:
        """Name what the run does until the block ends (phases nest: the outer one is named again after)."""
        with self._lock:
            outer = (self._label, self._started, self._progress)
            self._label, self._started, self._progress = label, time.monotonic(), None
        try:
            yield
        finally:
            with self._lock:
                self._label, self._started, self._progress = outer

    def advance(self, done: int, total: int | None, unit: str) -> None:
        with self._lock:
            self._progress = (done, total, unit)

    def touch(self) -> None:
        """Another line was printed: the quiet time starts again."""
        with self._lock:
            self._last_output = time.monotonic()

    def line(self) -> str | None:
        """What a beat prints now (``None`` outside a phase)."""
        with self._lock:
            if self._label is None:
                return None
            elapsed = _duration(time.monotonic() - self._started)
            if self._progress is None:
                return f"{self._label}: still running, {elapsed}"
            done, total, unit = self._progress
            return f"{self._label}: {done}{f' of {total}' if total is not None else ''} {unit}, {elapsed}"

    def _beat(self) -> None:
        while not self._stop.wait(min(1.0, self.interval)):
            with self._lock:
                quiet = time.monotonic() - self._last_output >= self.interval
            if not quiet:
                continue
            text = self.line()
            if text is not None:
                try:
                    self._write(text)
                except (OSError, ValueError):  # a closed output must not end the run
                    pass
            self.touch()
