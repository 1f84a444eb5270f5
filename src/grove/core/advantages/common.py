"""What every advantage estimator shares: the score check and the constant-group test.

An estimator is ``fn(batch: RolloutBatch, scores: Tensor[N], params) -> Tensor[N, R]``: sequence
scores in, per-token advantages out (0 outside ``batch.response_mask``; a sequence-level value is
broadcast with :func:`grove.core.token_ops.per_token`). It may instead return an
:class:`AdvantageOutput`, the advantages plus named statistics for the step's metrics (GiGPO reports
its episode and step parts separately).

For agent experience, ``scores[i]`` is the *episode score* of sample ``i``'s trajectory (the sum of its
environment rewards minus the penalties charged to the steps the sample holds), and the per-step
rewards, penalties, turn numbers and anchor groups are in ``batch.steps`` (estimators that read them
register with ``requires=(Requires.STEPS,)``). An estimator that compares each sample with the other samples of its group
registers with ``"groups"`` in ``requires``; the config refuses ``train.completions_per_prompt: 1`` for it (a lone
sample has nothing to be compared with).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from pydantic import BaseModel
from torch import Tensor

from grove.batch import RolloutBatch
from grove.core.segments import broadcast, segment_count, segment_max, segment_min

__all__ = ["AdvantageFn", "AdvantageOutput", "check_scores", "constant_group", "run_estimator"]


@dataclass(frozen=True)
class AdvantageOutput:
    """An estimator's advantages ``[N, R]`` and statistics to log (names without a prefix).

    ``step_parts``: for a step-level estimator, the named parts its per-step advantage is the sum of, ``[S]`` each,
    one value per row of the step table (GiGPO: ``episode`` = A^E and ``step`` = ω·A^S). The credit assignment adds
    them to the step table as ``advantage_<name>`` columns, so the per-token records and ``grove view`` show each
    part of every turn's advantage."""

    advantages: Tensor
    stats: dict[str, float] = field(default_factory=dict)
    step_parts: dict[str, Tensor] = field(default_factory=dict)

    def applied_to(self, batch: RolloutBatch) -> RolloutBatch:
        """``batch`` with these advantages, and the step parts as ``advantage_<name>`` step-table columns."""
        batch = batch.replace(advantages=self.advantages)
        if self.step_parts and batch.steps is not None:
            parts = {f"advantage_{name}": part.to(torch.float32) for name, part in self.step_parts.items()}
            batch = batch.replace(steps=batch.steps.with_columns(**parts))
        return batch


#: the signature of a registered advantage estimator
AdvantageFn = Callable[[RolloutBatch, Tensor, BaseModel], "Tensor | AdvantageOutput"]


def run_estimator(fn: AdvantageFn, batch: RolloutBatch, scores: Tensor, params: BaseModel) -> AdvantageOutput:
    """Call an estimator and normalise its result to an :class:`AdvantageOutput`."""
    out = fn(batch, scores, params)
    return out if isinstance(out, AdvantageOutput) else AdvantageOutput(out)


def check_scores(batch: RolloutBatch, scores: Tensor) -> Tensor:
    """Validate ``scores`` as ``[N]`` for ``batch`` and promote integer scores to float32."""
    if scores.shape != (batch.num_samples,):
        raise ValueError(f"scores shape {tuple(scores.shape)} != ({batch.num_samples},)")
    return scores if scores.is_floating_point() else scores.to(torch.float32)


def constant_group(scores: Tensor, group: Tensor, num_groups: int) -> Tensor:
    """``[N]`` bool: the sample's segment has more than one member and all its scores are equal.

    Estimators give these samples an advantage of exactly 0: ``r - mean`` is mathematically 0 there,
    but floating-point residue of the mean would survive a division by a tiny ``std + eps``.
    """
    count = broadcast(segment_count(group, num_groups), group)
    same = broadcast(segment_max(scores, group, num_groups) == segment_min(scores, group, num_groups), group)
    return same & (count > 1)
