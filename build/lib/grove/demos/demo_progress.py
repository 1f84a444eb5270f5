"""Progress of ``grove demos``: one plain line now and then, so that a long or slow run shows it is alive.

A line is printed at most every ``every_s`` seconds, checked after every turn and every episode (every example of
a task): how many episodes are played, won and written, and where the current episode stands. Plain lines, not a
live bar, so they read the same in a terminal and in a log file. A call that hangs prints nothing until it returns
or times out (``env.step_timeout_s``).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from grove.demos.summary import DemoCounts

__all__ = ["DemoProgress"]


class DemoProgress:
    """Reports ``counts`` through ``report`` at most every ``every_s`` seconds (``report=None`` or ``every_s <= 0``:
    never); ``total``: the episodes (examples) asked for; ``kind``: ``"environment"`` or ``"task"``."""

    def __init__(self, report: Callable[[str], None] | None, every_s: float, total: int, kind: str) -> None:
        self.report = report if every_s > 0 else None
        self.every_s = every_s
        self.total = total
        self.kind = kind
        self.start = self.last = time.monotonic()

    def tick(self, counts: DemoCounts, turn: int | None = None) -> None:
        """Print a line when ``every_s`` seconds have passed since the last one; ``turn``: the turn the current
        episode has just played (``None``: between episodes)."""
        if self.report is None:
            return
        now = time.monotonic()
        if now - self.last < self.every_s:
            return
        self.last = now
        self.report(self.line(counts, turn, now - self.start))

    def line(self, counts: DemoCounts, turn: int | None, elapsed: float) -> str:
        if self.kind == "task":
            return f"demos: {counts.rows} of {self.total} gold completions written; {elapsed:.0f} s"
        text = (
            f"demos: {counts.episodes} of {self.total} episodes played, {counts.won} won, {counts.kept_episodes} "
            f"to write ({counts.rows} rows)"
        )
        if turn is not None:
            text += f"; episode {counts.episodes + 1} at turn {turn}"
        return f"{text}; {elapsed:.0f} s"
