"""DAPO's dynamic sampling, for every experience source: draw rounds of groups until enough carry signal.

A group whose samples all score alike gives GRPO-style estimators no advantage. With ``algorithm.dynamic_sampling``
(``max_rounds`` > 1) a source plays rounds of ``prompts_per_step`` groups, keeps the informative ones and plays on
until it has its share of groups or the rounds run out; then the last round's uninformative groups fill the gap
(their number is logged as ``dynamic_sampling_filled_groups``). What counts as informative is the source's: the
reward combiner's signal for completions (some objective varies in the group), the episode return for agents.

With several ranks every rank draws every round (so the shared prompt or task order stays the same on all ranks)
and plays only while its own share is short; the rounds go on while any rank is short.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

import torch
from torch import Tensor

from grove.distributed.world import World

__all__ = ["GroupedRound", "InformativeRounds", "sample_informative_rounds"]


class GroupedRound(Protocol):
    """One round's samples (or trajectories), each in a group; rows can be selected."""

    def group_ids(self) -> Tensor:
        """``[n]``: each row's group (numbered past the earlier rounds' groups)."""
        ...

    def rows(self, indices: Tensor) -> GroupedRound:
        """The rows ``indices``, in that order."""
        ...


R = TypeVar("R", bound=GroupedRound)
D = TypeVar("D")


@dataclass(frozen=True)
class InformativeRounds(Generic[R]):
    """The parts kept, in order (each informative groups of a round, then the last round's fill), the rounds drawn,
    the groups filled with signal-free ones, and every round played."""

    kept: list[R]
    rounds: int
    filled: int
    played: list[R]

    def stats(self) -> dict[str, float]:
        return {"dynamic_sampling_rounds": float(self.rounds), "dynamic_sampling_filled_groups": float(self.filled)}


def sample_informative_rounds(
    draw: Callable[[], D],
    play: Callable[[D, int], R],
    informative: Callable[[R], Tensor],
    *,
    groups: int,
    max_rounds: int,
    world: World,
) -> InformativeRounds[R]:
    """Draw rounds (``draw()``: the round's prompts or tasks, on every rank) and play them (``play(drawn, round)``,
    rounds numbered from 1) until this rank keeps ``groups`` informative groups or ``max_rounds`` are drawn.

    ``informative(part)``: ``bool [n]``, per row, whether its group carries signal. With ``max_rounds == 1`` the one
    round is kept whole. The caller keeps the first ``groups`` groups of ``kept`` (the fill may hold more)."""
    kept: list[R] = []
    played: list[R] = []
    kept_groups, rounds = 0, 0
    while rounds < max_rounds and world.any(kept_groups < groups, "rollout: dynamic sampling"):
        drawn = draw()
        rounds += 1
        if kept_groups >= groups:
            continue  # this rank is full; others are still drawing rounds
        part = play(drawn, rounds)
        played.append(part)
        if max_rounds == 1:
            return InformativeRounds([part], rounds, 0, played)
        rows = informative(part).nonzero().flatten()
        if len(rows):
            kept.append(part.rows(rows))
            kept_groups += _count_groups(part.group_ids()[rows])
    filled = 0
    if kept_groups < groups:  # out of rounds: top up with the last round's uninformative groups
        last = played[-1]
        rest = (~informative(last)).nonzero().flatten()
        filled = min(groups - kept_groups, _count_groups(last.group_ids()[rest]))
        kept.append(last.rows(rest))
    return InformativeRounds(kept, rounds, filled, played)


def _count_groups(group_ids: Tensor) -> int:
    """The number of distinct groups among rows (a group may have lost rows no reward applies to)."""
    return int(torch.unique(group_ids).numel())
