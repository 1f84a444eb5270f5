"""What a demonstration file holds: :class:`DemoCounts` while it is written, :class:`DemoSummary` once it is."""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path

__all__ = ["DemoCounts", "DemoSummary"]


@dataclass
class DemoCounts:
    """Running counts of one demonstration file (see :class:`DemoSummary` for their meaning)."""

    rows: int = 0
    episodes: int = 0
    won: int = 0
    kept_episodes: int = 0
    oracle_actions: int = 0
    other_actions: int = 0
    turns: int = 0
    oracle_gave_up: int = 0
    context_overflows: int = 0
    long_actions: int = 0
    completion_tokens: int = 0


@dataclass(frozen=True)
class DemoSummary:
    """A written demonstration file.

    * ``rows``: lines written (training samples); ``episodes``: episodes played (examples taken, for a task);
    * ``won``: episodes that succeeded (every gold completion of a task); ``kept_episodes``: episodes written
      (``keep: won`` leaves out the others; an episode that took no turn has no row);
    * ``oracle_actions`` / ``other_actions``: the actions taken in the kept episodes, the oracle's and the random
      ones ``noise`` put in their place;
    * ``source``: the environment's or task's name; ``out``: the file; ``kind``: ``"environment"`` or ``"task"``;
    * ``turns``: turns of the kept episodes; ``oracle_gave_up``: episodes ended because the oracle had no action
      (``None``); ``context_overflows``: episodes ended because the next context would not fit the model;
    * ``long_actions``: kept actions or completions longer than ``rollout.max_new_tokens`` (a rollout could not
      sample them whole); ``completion_tokens``: trained tokens written.
    """

    rows: int
    episodes: int
    won: int
    kept_episodes: int
    oracle_actions: int
    other_actions: int
    source: str
    out: Path
    kind: str = "environment"
    turns: int = 0
    oracle_gave_up: int = 0
    context_overflows: int = 0
    long_actions: int = 0
    completion_tokens: int = 0

    @classmethod
    def of(cls, counts: DemoCounts, *, source: str, out: Path, kind: str) -> DemoSummary:
        return cls(source=source, out=out, kind=kind, **{f.name: getattr(counts, f.name) for f in fields(counts)})

    def describe(self) -> str:
        """One paragraph for the command line."""
        if self.kind == "task":
            text = f"{self.rows} gold completions of task {self.source!r} written to {self.out}"
        else:
            actions = self.oracle_actions + self.other_actions
            text = (
                f"{self.episodes} episodes of {self.source!r}: {self.won} won; {self.kept_episodes} written to "
                f"{self.out} as {self.rows} rows ({self.turns} turns, {actions} actions: {self.oracle_actions} "
                f"oracle, {self.other_actions} random)"
            )
            if self.oracle_gave_up:
                text += f"; the oracle had no action in {self.oracle_gave_up} episodes"
            if self.context_overflows:
                text += f"; {self.context_overflows} episodes ended when their context did not fit the model"
        if self.long_actions:
            text += (
                f"; {self.long_actions} completions are longer than rollout.max_new_tokens (a rollout would cut "
                "them): raise it"
            )
        return text
