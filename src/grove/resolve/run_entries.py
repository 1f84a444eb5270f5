"""What the front door looks up for a run (:class:`RunEntries`) and the kinds of run it resolves for (:data:`RunKind`):
the types the front door's modules share."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from grove.registry import Entry
from grove.resolve.component_lookups import Resolved

__all__ = ["RunEntries", "RunKind"]

#: the kinds of run: ``grove train`` (reinforcement learning), ``grove sft``, ``grove rm``, ``grove eval``
RunKind = Literal["train", "sft", "rm", "eval"]



@dataclass(frozen=True)
class RunEntries:
    """Every registry entry a run uses, looked up once (``None``: the run has no such component; a reward given by
    import path has ``None`` in its place)."""

    advantage: Resolved
    policy_loss: Resolved
    loss_aggregation: Entry
    kl_estimator: Entry
    reward_combiner: Resolved
    rewards: tuple[Resolved | None, ...]
    task: Resolved | None
    environment: Resolved | None
    action_parser: Resolved | None
    experience_source: Entry
    rollout_engine: Entry
    step_annotators: tuple[Entry, ...]
