"""What a demonstration file holds: :class:`DemoCounts` while it is written, :class:`DemoSummary` once it is, and
:class:`NoDemonstrationsError` when not one episode is worth writing."""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path

__all__ = ["DemoCounts", "DemoSummary", "NoDemonstrationsError", "nothing_to_write"]


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
    no_first_action: int = 0
    truncated: int = 0
    lost: int = 0
    timeouts: int = 0
    first_timeout: str = ""


class NoDemonstrationsError(ValueError):
    """Not one episode could be written (none won with ``keep="won"``, none took a turn); the message says how the
    episodes ended and what to change. Nothing is written."""


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
      sample them whole); ``completion_tokens``: trained tokens written;
    * ``no_first_action``: episodes in which the oracle had no action right after ``reset`` (counted in
      ``oracle_gave_up`` too); ``truncated``: episodes that reached ``env.max_turns``; ``lost``: episodes the
      environment ended (``done``) without a win;
    * ``timeouts``: episodes ended because an environment call (``reset``, ``step``, ``oracle_action``) did not
      return within ``env.step_timeout_s``, left out of the file; ``first_timeout``: what the first of them said.
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
    no_first_action: int = 0
    truncated: int = 0
    lost: int = 0
    timeouts: int = 0
    first_timeout: str = ""

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
            if self.timeouts:
                text += f"; {self.timeouts} episodes were left out on a timeout (the first: {self.first_timeout})"
        if self.long_actions:
            text += (
                f"; {self.long_actions} completions are longer than rollout.max_new_tokens (a rollout would cut "
                "them): raise it"
            )
        return text


def _endings(counts: DemoCounts, max_turns: int) -> list[str]:
    """How the episodes that were not won ended, in words."""
    later = counts.oracle_gave_up - counts.no_first_action
    endings = [
        (counts.no_first_action, "ended at once: oracle_action() returned None right after reset"),
        (later, "ended when oracle_action() returned None after some turns"),
        (counts.truncated, f"reached env.max_turns ({max_turns}) without a win"),
        (counts.lost, "ended (done) without a win: info['won'] was never true"),
        (counts.context_overflows, "ended when the context no longer fit the model"),
        (counts.timeouts, f"ended on a timeout, the first: {counts.first_timeout}"),
    ]
    return [f"{n} {text}" for n, text in endings if n]


def nothing_to_write(counts: DemoCounts, *, source: str, keep: str, max_turns: int) -> NoDemonstrationsError:
    """The error for a run in which no episode could be written: how they ended and what to change."""
    wanted = "was won" if keep == "won" else "took a turn"
    fixes = []
    if counts.no_first_action:
        fixes.append("make oracle_action() return the first command right after reset (see grove.envs.oracle)")
    if counts.truncated:
        fixes.append("raise env.max_turns")
    if counts.timeouts:
        fixes.append("fix the hanging call or raise env.step_timeout_s")
    if keep == "won" and counts.episodes > counts.no_first_action + counts.timeouts:
        fixes.append("write the episodes that were not won with --keep all (keep='all')")
    return NoDemonstrationsError(
        f"no demonstration to write: not one of the {counts.episodes} episodes of {source!r} {wanted} "
        f"({'; '.join(_endings(counts, max_turns)) or 'none took a turn'}), so nothing was written; "
        f"{', or '.join(fixes) or 'check the environment and its oracle on a training task'}"
    )
