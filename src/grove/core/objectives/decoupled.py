"""Combiners that normalise each objective within its group before combining (GDPO, MO-GRPO).

``normalize_then_sum`` — GDPO (Liu et al., 2026): summing first makes distinct reward combinations
collapse into identical advantages; normalising each reward within the group first keeps them apart::

    z_ik = (r_ik - mean_g(r_k)) / (std_g(r_k) + eps)          per objective, within the group g of i
    s_i  = Σ_k w_k z_ik                                         objectives that apply (NaN skipped)
    A_i  = renormalise(s)                                       optional, over the batch

Two references implement it and differ; both are options of this one combiner:

* TRL 1.16 (``multi_objective_aggregation="normalize_then_sum"``): NaN-aware ``nanmean``/``nanstd``
  (``n - 1``), ``eps = 1e-4``; an objective that applies to a single sample of its group has NaN std
  and drops out of that sample's sum (``lone_value: ignore``); then per-sample batch renormalisation
  ``(s - mean(s)) / (std(s) + 1e-4)`` (``renormalize: batch``); samples no reward applies to get 0.
* verl (``adv_estimator=gdpo``): each reward through verl's GRPO (``torch.std`` ``n - 1``,
  ``eps = 1e-6``, a single-sample group has mean 0 and std 1: ``lone_value: raw``), weighted sum, then
  ``masked_whiten`` over all response tokens — ``(s - μ_tok) · rsqrt(σ²_tok + 1e-8)`` with token-weighted
  mean and unbiased variance, so longer responses weigh more (``renormalize: tokens``).

The renormalised output is the advantage itself: pair ``renormalize: batch|tokens`` with the
``score_as_advantage`` estimator (the ``gdpo`` preset does; the config refuses a normalising estimator on
top). ``renormalize: none`` returns the weighted z-sum for any estimator.

``variance_weighted`` — MO-GRPO (Ichihara et al., 2025): "reweight the reward functions automatically
according to the variances of their values" so that every objective contributes evenly. Our reading: each
objective is divided by its standard deviation (within the group by default, or over the batch with
``scope: batch``) and centred, ``s_i = Σ_k w_k (r_ik - mean(r_k)) / (std(r_k) + eps)``, and the GRPO
estimator then normalises ``s`` within the group as usual. With ``scope: group`` this is GDPO's z-sum
followed by a per-group (rather than batch) renormalisation; ``scope: batch`` keeps the scale of
within-group differences (a tiny within-group gap is not blown up to ±1).
"""

from __future__ import annotations

from typing import Literal

import torch
from pydantic import BaseModel, ConfigDict, Field
from torch import Tensor

from grove.batch import RolloutBatch
from grove.core import papers
from grove.core.objectives.combine import CombineOutput, active_objectives, weights_of
from grove.core.segments import broadcast, dense_index, segment_nan_spread, segment_nan_stats
from grove.registry import REWARD_COMBINERS, Requires


def _zscores(
    rewards: Tensor, index: Tensor, num: int, *, eps: float, unbiased: bool, lone_value: str
) -> Tensor:
    """Per-objective ``(r - mean) / (std + eps)`` within segments; NaN where ``r`` is NaN (or dropped).

    A segment-objective whose values are all equal gives exactly 0 (no float residue divided by ``eps``).
    ``lone_value``: a value alone in its segment-objective is dropped (``ignore``, NaN) or kept raw with
    mean 0 and std 1 (``raw``: ``r / (1 + eps)``, verl's single-sample group).
    """
    mean, std, count = segment_nan_stats(rewards, index, num, unbiased=unbiased)
    lone = broadcast(count == 1, index)
    if lone_value == "raw":
        mean = torch.where(count == 1, torch.zeros_like(mean), mean)
        std = torch.where(count == 1, torch.ones_like(std), std)
    z = (rewards - broadcast(mean, index)) / (broadcast(std, index) + eps)
    constant = broadcast(segment_nan_spread(rewards, index, num) == 0, index) & ~lone
    z = torch.where(constant & ~torch.isnan(rewards), torch.zeros_like(z), z)
    return z


def _weighted_sum(z: Tensor, batch: RolloutBatch) -> tuple[Tensor, Tensor]:
    """``(Σ_k w_k z_k over what applies, contributions [N, K])``; weight-0 objectives contribute nothing."""
    w = weights_of(batch)
    use = ~torch.isnan(z) & active_objectives(batch)
    contributions = torch.where(use, z * w, torch.zeros_like(z))
    return contributions.sum(dim=1), contributions


class NormalizeThenSumParams(BaseModel):
    """Parameters of ``normalize_then_sum`` (GDPO). Defaults follow TRL; verl is ``eps: 1e-6, lone_value: raw,
    renormalize: tokens``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    eps: float = Field(1e-4, ge=0, description="Added to each objective's group std (TRL 1e-4; verl 1e-6).")
    unbiased_std: bool = Field(True, description="Group std with the n - 1 divisor (TRL nanstd, torch.std).")
    lone_value: Literal["ignore", "raw"] = Field(
        "ignore",
        description="An objective that applies to one sample of its group: 'ignore' drops it from that sample's sum "
        "(TRL: its std is NaN); 'raw' uses mean 0, std 1 (verl's single-sample group).",
    )
    renormalize: Literal["batch", "tokens", "none"] = Field(
        "batch",
        description="After the weighted sum: 'batch' = (s - mean) / (std + batch_eps) over samples (TRL); 'tokens' = "
        "verl's masked_whiten over every policy token (longer responses weigh more); 'none' = the raw z-sum.",
    )
    batch_eps: float = Field(1e-4, ge=0, description="renormalize: batch — added to the batch std (TRL 1e-4).")
    whiten_eps: float = Field(1e-8, ge=0, description="renormalize: tokens — added to the variance under the sqrt (verl).")

    def produces_advantages(self) -> bool:
        """Renormalised output is the advantage (pair it with ``score_as_advantage``)."""
        return self.renormalize != "none"


@REWARD_COMBINERS.register(
    "normalize_then_sum",
    params=NormalizeThenSumParams,
    paper=papers.GDPO,
    summary="GDPO: each objective normalised within its group, weighted sum, optional batch renormalisation.",
    formula="A_i = renorm(Σ_k w_k (r_ik - mean_g r_k) / (std_g r_k + eps))",
    reference="TRL multi_objective_aggregation='normalize_then_sum' (renormalize: batch); verl gdpo (tokens)",
    requires=(Requires.GROUPS,),
)
def normalize_then_sum(batch: RolloutBatch, params: NormalizeThenSumParams) -> CombineOutput:
    """GDPO (see the module docstring for both reference conventions)."""
    group, num_groups = dense_index(batch.group_index)
    rewards = batch.rewards
    z = _zscores(rewards, group, num_groups, eps=params.eps, unbiased=params.unbiased_std, lone_value=params.lone_value)
    summed, contributions = _weighted_sum(z, batch)
    scorable = ~torch.isnan(rewards).all(dim=1)
    if params.renormalize == "batch":
        values = summed[scorable]
        mean = values.mean() if values.numel() else summed.new_zeros(())
        std = values.std() if values.numel() > 1 else summed.new_zeros(())
        scale = std + params.batch_eps
        scores = (summed - mean) / scale
        contributions = contributions / scale
    elif params.renormalize == "tokens":
        # verl's masked_whiten of the per-token broadcast: every token of sample i carries s_i, so the token
        # mean and unbiased variance are length-weighted sample statistics.
        lengths = (batch.policy_token_mask & scorable[:, None]).sum(dim=1).to(summed.dtype)
        n = lengths.sum()
        mu = (lengths * summed).sum() / n.clamp_min(1)
        var = (lengths * (summed - mu) ** 2).sum() / (n - 1).clamp_min(1)
        scale = torch.rsqrt(var + params.whiten_eps)
        scores = torch.where(lengths > 0, (summed - mu) * scale, torch.zeros_like(summed))
        contributions = contributions * scale
    else:
        scores = summed
    scores = torch.where(scorable, scores, torch.zeros_like(scores))
    signal = torch.where(active_objectives(batch), rewards, torch.full_like(rewards, float("nan")))
    return CombineOutput(scores, contributions, signal)


class VarianceWeightedParams(BaseModel):
    """Parameters of ``variance_weighted`` (MO-GRPO)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    scope: Literal["group", "batch"] = Field(
        "group", description="Each objective's std is taken within the prompt's group (MO-GRPO) or over the batch."
    )
    eps: float = Field(1e-6, ge=0, description="Added to each objective's std.")
    unbiased_std: bool = Field(True, description="Std with the n - 1 divisor.")


@REWARD_COMBINERS.register(
    "variance_weighted",
    params=VarianceWeightedParams,
    paper=papers.MO_GRPO,
    summary="MO-GRPO: each objective reweighted by 1/std of its values, then the estimator normalises the sum.",
    formula="s_i = Σ_k w_k (r_ik - mean(r_k)) / (std(r_k) + eps); std within the group (or the batch)",
    requires=(Requires.GROUPS,),
)
def variance_weighted(batch: RolloutBatch, params: VarianceWeightedParams) -> CombineOutput:
    """MO-GRPO's variance reweighting (see the module docstring for the reading)."""
    rewards = batch.rewards
    if params.scope == "group":
        index, num = dense_index(batch.group_index)
    else:
        index, num = torch.zeros_like(batch.group_index), 1
    z = _zscores(rewards, index, num, eps=params.eps, unbiased=params.unbiased_std, lone_value="ignore")
    scores, contributions = _weighted_sum(z, batch)
    signal = torch.where(active_objectives(batch), rewards, torch.full_like(rewards, float("nan")))
    return CombineOutput(scores, contributions, signal)
