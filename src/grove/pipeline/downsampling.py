"""D^3S down-sampling in the training pipeline: which rollouts and which tokens a step trains on.

"Learning More with Less: A Dynamic Dual-Level Down-Sampling Framework for Efficient Policy
Optimization" (D^3S). Two stages, each optional (config ``selection.samples`` / ``selection.tokens``):

* :func:`select_rollouts`, between the advantages and the update: keeps the maximum-``Var(A)``
  subset of each group (or of the batch) at this step's keep ratio. The dropped rollouts leave the
  batch before any training forward, so they cost no forward or backward pass.
* :func:`select_loss_tokens`, inside each micro-batch after the training forward: the loss mask
  shrinks to the tokens with the largest ``|A|·H`` (entropy from that forward, detached).
  :func:`selected_token_count` predicts the count beforehand, so the loss aggregation's global
  normaliser counts exactly the tokens that receive gradient (micro-batch-invariant as before).

The tensor work is in :mod:`grove.core.selection`; the schedules in :mod:`grove.core.keep_ratio_schedules`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from pydantic import BaseModel
from torch import Tensor

from grove.batch import RolloutBatch
from grove.core.advantages import AdvantageFn
from grove.core.selection import keep_count, select_samples, select_tokens, token_scores
from grove.core.token_ops import row_mean

__all__ = [
    "SampleSelection",
    "TokenSelection",
    "select_loss_tokens",
    "select_rollouts",
    "selected_token_count",
    "sequence_advantages",
    "signal_token_mask",
    "tokens_with_signal",
]


@dataclass(frozen=True)
class SampleSelection:
    scope: str = "group"  # "group" | "batch"
    recompute_advantages: bool = False
    min_per_group: int = 2


@dataclass(frozen=True)
class TokenSelection:
    scope: str = "sequence"  # "sequence" | "micro_batch" | "batch"


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
        kept = kept.replace(advantages=advantage_fn(kept, kept_scores, advantage_params))
    after = sequence_advantages(kept)
    metrics = {
        "selection/sample_keep_ratio": ratio,
        "selection/kept_samples_frac": len(rows) / max(batch.num_samples, 1),
        "selection/adv_var_before": float(adv.var(unbiased=False)) if adv.numel() else 0.0,
        "selection/adv_var_after": float(after.var(unbiased=False)) if after.numel() else 0.0,
    }
    return SelectedRollouts(kept, kept_scores, metrics, rows)


def selected_token_count(loss_mask: Tensor, selection: TokenSelection, ratio: float) -> float:
    """How many of a micro-batch's loss tokens :func:`select_loss_tokens` will keep (known before the forward)."""
    if selection.scope == "batch":
        raise ValueError("the batch scope selects before the micro-batches; its count is the selected mask's sum")
    counts = loss_mask.sum(1) if selection.scope == "sequence" else loss_mask.sum().reshape(1)
    return float(keep_count(counts, ratio, minimum=1).sum())


def select_loss_tokens(
    loss_mask: Tensor, advantages: Tensor, entropy: Tensor, selection: TokenSelection, ratio: float
) -> Tensor:
    """The micro-batch's loss mask restricted to its top ``|A|·H`` tokens (same dtype as ``loss_mask``)."""
    scope = "sequence" if selection.scope == "sequence" else "batch"  # the core's "batch" = all rows given
    return select_tokens(token_scores(advantages, entropy), loss_mask, ratio, scope=scope)


def signal_token_mask(mask: Tensor, advantages: Tensor) -> Tensor:
    """``bool``, the shape of ``mask``: loss tokens whose advantage is non-zero (the ones a policy-gradient term
    actually moves)."""
    return (mask != 0) & (advantages != 0)


def tokens_with_signal(mask: Tensor, advantages: Tensor) -> float:
    """How many loss tokens have a non-zero advantage (:func:`signal_token_mask`)."""
    return float(signal_token_mask(mask, advantages).sum())
