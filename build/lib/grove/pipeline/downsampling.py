"""D^3S down-sampling in the training pipeline: which rollouts and which tokens a step trains on.

"Learning More with Less: A Dynamic Dual-Level Down-Sampling Framework for Efficient Policy
Optimization" (D^3S). Two stages, each optional (config ``selection.samples`` / ``selection.tokens``):

* :func:`select_rollouts`, between the advantages and the update: keeps the maximum-``Var(A)``
  subset of each group (or of the batch) at this step's keep ratio. The dropped rollouts leave the
  batch before any training forward, so they cost no forward or backward pass.
* :class:`LossTokenSelection`, what the update asks which loss tokens it trains on: with scope ``sequence`` or
  ``micro_batch``, inside each micro-batch after the training forward, the loss mask shrinks to the tokens with the
  largest ``|A|·H`` (entropy from that forward, detached; :func:`select_loss_tokens`), and
  :func:`selected_token_count` predicts the count beforehand, so the loss aggregation's global normaliser counts
  exactly the tokens that receive gradient (micro-batch-invariant as before); with scope ``batch``, over the whole
  mini-batch (of every rank) before its micro-batches, from a no-grad pass of the same forward.

Rollout selection runs in the trainer's stages, token selection inside the update. The tensor work is in
:mod:`grove.core.selection`; the schedules in :mod:`grove.core.keep_ratio_schedules`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import torch
from pydantic import BaseModel
from torch import Tensor

from grove.batch import RolloutBatch
from grove.core.advantages import AdvantageFn, run_estimator
from grove.core.keep_ratio_schedules import KeepRatioSchedule
from grove.core.selection import keep_count, select_samples, select_tokens, token_scores
from grove.core.token_ops import row_mean
from grove.distributed.world import World
from grove.pipeline.batch_stages import StageBatch, StageContext

__all__ = [
    "LossTokenSelection",
    "RolloutDownsampling",
    "SampleSelection",
    "TokenSelection",
    "select_loss_tokens",
    "select_rollouts",
    "selected_token_count",
    "sequence_advantages",
    "signal_token_mask",
    "tokens_with_signal",
    "keep_ratio_at",
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


@dataclass(frozen=True)
class LossTokenSelection:
    """Which loss tokens an update trains on: D^3S's token level at this step's keep ratio, or every loss token
    (``selection`` ``None`` or ``ratio`` 1). The update calls it at four points: before a mini-batch's micro-batches
    (:meth:`restrict_mini_batch`, scope ``batch``), for the aggregation's token count (:meth:`scale_tokens`), inside
    each micro-batch's loss (:meth:`in_loss_mask`) and for samples left out for lack of signal
    (:meth:`left_out_mask`)."""

    selection: TokenSelection | None = None
    ratio: float = 1.0

    @property
    def active(self) -> bool:
        return self.selection is not None and self.ratio < 1.0

    @property
    def in_loss(self) -> bool:
        """Selection inside each micro-batch's loss (scopes ``sequence`` and ``micro_batch``)."""
        return self.active and self.selection.scope != "batch"

    @property
    def per_sequence(self) -> bool:
        """Each completion's kept count is known before the forward and a zero-advantage completion's kept tokens
        get a zero gradient (no selection, or scope ``sequence``): samples without signal may be left out; a
        selection across several samples would rank without them."""
        return not self.active or self.selection.scope == "sequence"

    def kept_count(self, mask: Tensor) -> float:
        """How many of ``mask``'s tokens are in the loss after the in-loss selection (known before the forward)."""
        if self.in_loss:
            return selected_token_count(mask, self.selection, self.ratio)
        return float(mask.sum())

    def scale_tokens(self, mask: Tensor, micro_indices: list[Tensor]) -> float:
        """The loss tokens of a mini-batch (``mask``) the aggregation divides by: a count per micro-batch of
        ``micro_indices`` with scope ``micro_batch``, else per row or all of them."""
        if self.in_loss and self.selection.scope == "micro_batch":
            return sum(self.kept_count(mask[i]) for i in micro_indices)
        return self.kept_count(mask)

    def in_loss_mask(self, mask: Tensor, advantages: Tensor, entropy: Tensor) -> Tensor:
        """A micro-batch's loss mask after the in-loss selection (entropy from its training forward)."""
        return select_loss_tokens(mask, advantages, entropy, self.selection, self.ratio) if self.in_loss else mask

    def left_out_mask(self, left_out: RolloutBatch) -> Tensor:
        """The loss mask of samples left out for lack of signal as their in-loss selection would make it: every
        advantage is zero, so every score ``|A|·H`` is zero and each row keeps its first tokens (the count
        :meth:`kept_count` puts in the aggregation scale)."""
        if not self.in_loss:
            return left_out.loss_mask
        zeros = torch.zeros_like(left_out.advantages, dtype=torch.float32)
        return select_loss_tokens(left_out.loss_mask, left_out.advantages, zeros, self.selection, self.ratio)

    @torch.no_grad()
    def restrict_mini_batch(
        self,
        mini: RolloutBatch,
        micro_indices: list[Tensor],
        entropy_of: Callable[[RolloutBatch], Tensor],
        world: World,
    ) -> RolloutBatch:
        """Scope ``batch``: the mini-batch with its loss mask restricted to its top ``|A|·H`` tokens over all
        sequences (of every rank), with the entropies of a no-grad pass of the same training forward
        (``entropy_of`` a trimmed micro-batch; same layout and micro-batches, so the same values the gradient pass
        computes; it costs one extra forward). Other scopes: ``mini`` as it is."""
        if not self.active or self.in_loss:
            return mini
        entropy = torch.zeros(mini.loss_mask.shape, dtype=torch.float32, device=mini.loss_mask.device)
        for idx in micro_indices:
            ent = entropy_of(mini.select(idx).trimmed())
            entropy[idx, : ent.shape[1]] = ent.float().cpu()
        if not world.distributed:
            return mini.replace(loss_mask=select_loss_tokens(mini.loss_mask, mini.advantages, entropy, self.selection,
                                                             self.ratio))
        ranks = world.gather_objects((mini.loss_mask, mini.advantages, entropy), "update: batch-scope token selection")
        width = max(t[0].shape[1] for t in ranks)
        pad = lambda t: torch.nn.functional.pad(t, (0, width - t.shape[1]))  # noqa: E731
        mask, adv, ent = (torch.cat([pad(r[i]) for r in ranks]) for i in range(3))
        selected = select_loss_tokens(mask, adv, ent, self.selection, self.ratio)
        first = sum(r[0].shape[0] for r in ranks[: world.rank])
        return mini.replace(loss_mask=selected[first : first + mini.num_samples, : mini.loss_mask.shape[1]])

    def metrics(self, trained: float, candidates: float) -> dict[str, float]:
        """``selection/*`` of an update that trained on ``trained`` of ``candidates`` loss tokens."""
        if not self.active:
            return {}
        return {"selection/token_keep_ratio": self.ratio, "selection/kept_tokens_frac": trained / max(candidates, 1.0)}
