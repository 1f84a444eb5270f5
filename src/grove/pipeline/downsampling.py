"""D^3S's rollout level in the training pipeline: which rollouts a step trains on.

"Learning More with Less: A Dynamic Dual-Level Down-Sampling Framework for Efficient Policy
Optimization" (D^3S), rollout level (config ``selection.samples``): :func:`select_rollouts`, between the
advantages and the update, keeps the maximum-``Var(A)`` subset of each group (or of the batch) at this step's keep
ratio. The dropped rollouts leave the batch before any training forward, so they cost no forward or backward pass.

Rollout selection runs in the trainer's whole-step stages (:class:`RolloutDownsampling`); the token level is a
loss-token filter of the update (:mod:`grove.pipeline.token_selection`). The tensor work is in
:mod:`grove.core.selection`; the schedules in :mod:`grove.core.keep_ratio_schedules`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from pydantic import BaseModel
from torch import Tensor

from grove.batch import RolloutBatch
from grove.core.advantages import AdvantageFn, run_estimator
from grove.core.keep_ratio_schedules import KeepRatioSchedule
from grove.core.selection import select_samples
from grove.core.token_ops import row_mean
from grove.pipeline.batch_stages import StageBatch, StageContext

__all__ = ["RolloutDownsampling", "SampleSelection", "keep_ratio_at", "select_rollouts", "sequence_advantages"]


@dataclass(frozen=True)
class SampleSelection:
    scope: str = "group"  # "group" | "batch"
    recompute_advantages: bool = False
    min_per_group: int = 2


def sequence_advantages(batch: RolloutBatch) -> Tensor:
    """``[N]``: each rollout's advantage, the mean of ``A_{i,t}`` over its loss tokens (for outcome
    estimators every token carries the same value; rows without loss tokens get 0)."""
    return row_mean(batch.advantages, batch.loss_mask)


class SelectedRollouts(NamedTuple):
    """The kept rollouts, their scores, the selection metrics and the kept rows of the input batch."""

    batch: RolloutBatch
    scores: Tensor
    metrics: dict[str, float]
    rows: Tensor


def select_rollouts(
    batch: RolloutBatch,
    scores: Tensor,
    selection: SampleSelection,
    ratio: float,
    advantage_fn: AdvantageFn,
    advantage_params: BaseModel,
) -> SelectedRollouts:
    """Keep the max-``Var(A)`` rollouts at keep ratio ``ratio``; return ``(batch, scores, metrics, rows)``.

    ``Var`` is the population variance of the per-rollout advantages (:func:`sequence_advantages`)
    over the whole batch, before and after. With ``recompute_advantages`` the estimator runs again
    on the kept rollouts (their group statistics change); otherwise they keep the values computed
    on the full groups.
    """
    adv = sequence_advantages(batch)
    keep = select_samples(adv, batch.group_index, ratio, scope=selection.scope, minimum=selection.min_per_group)
    rows = keep.nonzero().flatten()
    kept, kept_scores = batch.select(rows), scores[rows]
    if selection.recompute_advantages:
        kept = run_estimator(advantage_fn, kept, kept_scores, advantage_params).applied_to(kept)
    after = sequence_advantages(kept)
    metrics = {
        "selection/sample_keep_ratio": ratio,
        "selection/kept_samples_frac": len(rows) / max(batch.num_samples, 1),
        "selection/adv_var_before": float(adv.var(unbiased=False)) if adv.numel() else 0.0,
        "selection/adv_var_after": float(after.var(unbiased=False)) if after.numel() else 0.0,
    }
    return SelectedRollouts(kept, kept_scores, metrics, rows)


def keep_ratio_at(schedule: KeepRatioSchedule | None, step: int, total_steps: int) -> float:
    """The keep ratio of training step ``step`` (from 1) of ``total_steps``; 1.0 when the selection is off (the
    schedules count steps from 0)."""
    return 1.0 if schedule is None else schedule.at(step - 1, total_steps)


@dataclass(frozen=True)
class RolloutDownsampling:
    """The stage of ``selection.samples`` (whole step): :func:`select_rollouts` at this step's keep ratio."""

    selection: SampleSelection
    ratio: KeepRatioSchedule
    advantage_fn: AdvantageFn
    advantage_params: BaseModel

    def __call__(self, batch: StageBatch, context: StageContext) -> StageBatch:
        selected = select_rollouts(
            batch.batch, batch.scores, self.selection, keep_ratio_at(self.ratio, context.step, context.total_steps),
            self.advantage_fn, self.advantage_params,
        )
        return StageBatch(selected.batch, batch.rows[selected.rows], selected.scores, {**batch.stats, **selected.metrics})
