"""Pass@k advantages and BNPO's Beta-normalised advantage.

* ``grpo_passk``: verl's ``compute_grpo_passk_outcome_advantage``, the best-of-group estimator of
  Tang et al. 2025 (the paper verl cites, arXiv 2503.19595): only the best sample of each group gets a
  non-zero advantage, ``r_max - r_second_max`` (divided by the group std + eps by default).
* ``passk_analytic``: the closed-form group advantages of Chen et al. 2025 ("Pass@k Training for
  Adaptively Balancing Exploration and Exploitation of Large Reasoning Models") for binary rewards.
* ``bnpo``: BNPO (Xiao et al. 2025), matched to the authors' code (changyi7231/BNPO,
  ``recipe/bnpo/src/bnpo_ray_trainer.py::compute_bnpo_outcome_advantage``).
"""

from __future__ import annotations

import torch
from pydantic import BaseModel, ConfigDict, Field, model_validator
from torch import Tensor

from grove.batch import RolloutBatch
from grove.core.advantages import NormConfig, normalize_scores
from grove.core.advantages_baselines import check_scores, to_tokens
from grove.core.segments import (
    broadcast,
    dense_index,
    segment_count,
    segment_max,
    segment_mean,
    segment_std,
    segment_sum,
)
from grove.registry import ADVANTAGE_ESTIMATORS

PASSK_TANG_PAPER = "Optimizing Language Models for Inference Time Objectives using Reinforcement Learning"
PASSK_CHEN_PAPER = (
    "Pass@k Training for Adaptively Balancing Exploration and Exploitation of Large Reasoning Models"
)
BNPO_PAPER = "BNPO: Beta Normalization Policy Optimization"


# --------------------------------------------------------------------------- grpo_passk
class GRPOPassKParams(BaseModel):
    """Parameters of ``grpo_passk``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    norm_by_std: bool = Field(True, description="Divide by the group std + eps (verl's norm_adv_by_std_in_grpo).")
    eps: float = Field(1e-6, ge=0, description="Added to the unbiased group std.")


@ADVANTAGE_ESTIMATORS.register(
    "grpo_passk",
    params=GRPOPassKParams,
    paper=PASSK_TANG_PAPER,
    summary="Only the best sample of each group: r_max - r_second_max (over the group std).",
)
def grpo_passk(batch: RolloutBatch, scores: Tensor, params: GRPOPassKParams) -> Tensor:
    """Pass@k (best-of-group) advantage, as verl's ``compute_grpo_passk_outcome_advantage``.

    Per group: the best sample gets ``(r_max - r_second_max) / (std_g + eps)`` (unbiased std; no
    division with ``norm_by_std=False``), every other sample 0. On ties for the maximum the
    advantage is 0, so which tied sample is "best" does not matter (here: the lowest index).
    Like verl, groups with fewer than 2 samples raise ``ValueError``. Derived by Tang et al. 2025
    ("Optimizing Language Models for Inference Time Objectives using Reinforcement Learning") as
    the pass@k leave-one-out gradient with k = group size.
    """
    scores = check_scores(batch, scores)
    group, num_groups = dense_index(batch.group_index)
    count = segment_count(group, num_groups)
    if bool((count < 2).any()):
        raise ValueError(f"grpo_passk needs at least 2 samples per group; smallest group has {int(count.min())}")
    n = scores.numel()
    top = segment_max(scores, group, num_groups)
    sample = torch.arange(n, device=scores.device)
    candidate = torch.where(scores == broadcast(top, group), sample, torch.full_like(sample, n))
    first = torch.full((num_groups,), n, dtype=torch.long, device=scores.device)
    first = first.scatter_reduce(0, group, candidate, reduce="amin", include_self=True)
    best = sample == broadcast(first, group)
    second = segment_max(torch.where(best, torch.full_like(scores, float("-inf")), scores), group, num_groups)
    gap = top - second
    if params.norm_by_std:
        gap = gap / (segment_std(scores, group, num_groups, unbiased=True) + params.eps)
    advantages = torch.where(best, broadcast(gap, group), torch.zeros_like(scores))
    return to_tokens(batch, advantages)


# --------------------------------------------------------------------------- passk_analytic
class PassKAnalyticParams(BaseModel):
    """Parameters of ``passk_analytic``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    k: int = Field(4, ge=1, description="The k of pass@k; at most the group size.")
    threshold: float = Field(0.5, description="A sample is correct when its score >= threshold.")


def _comb_ratio(a: Tensor, b: Tensor, k: int) -> Tensor:
    """``C(a, k) / C(b, k)`` for integer tensors ``0 <= a <= b``, ``b >= k`` (float64; 0 when ``a < k``)."""
    a64, b64 = a.to(torch.float64), b.to(torch.float64)
    log_ratio = (
        torch.lgamma(a64 + 1)
        - torch.lgamma((a64 - k).clamp_min(0) + 1)
        - torch.lgamma(b64 + 1)
        + torch.lgamma(b64 - k + 1)
    )
    return torch.where(a >= k, torch.exp(log_ratio), torch.zeros_like(log_ratio))


@ADVANTAGE_ESTIMATORS.register(
    "passk_analytic",
    params=PassKAnalyticParams,
    paper=PASSK_CHEN_PAPER,
    summary="Closed-form pass@k group advantages for binary rewards.",
)
def passk_analytic(batch: RolloutBatch, scores: Tensor, params: PassKAnalyticParams) -> Tensor:
    """Analytic Pass@k Training advantages (Chen et al. 2025, binary rewards).

    With ``N`` samples in the group, ``N_neg`` of them incorrect: ``R = 1 - C(N_neg, k) / C(N, k)``
    (the group's pass@k), ``sigma = sqrt(R (1 - R))``, ``A_pos = (1 - R) / sigma`` and
    ``A_neg = (1 - R - C(N_neg - 1, k - 1) / C(N - 1, k - 1)) / sigma``. Groups with ``sigma = 0``
    (no correct sample, or ``N_neg < k`` so every k-subset passes) get 0. With ``k = 1`` this is GRPO
    with the biased std and no eps. Groups smaller than ``k`` raise ``ValueError``.
    """
    scores = check_scores(batch, scores)
    group, num_groups = dense_index(batch.group_index)
    correct = scores >= params.threshold
    k = params.k
    total = segment_count(group, num_groups)
    if bool((total < k).any()):
        raise ValueError(f"passk_analytic with k={k} needs groups of at least k samples")
    neg = total - segment_sum(correct.to(torch.long), group, num_groups)
    pass_k = 1 - _comb_ratio(neg, total, k)
    sigma = (pass_k * (1 - pass_k)).sqrt()
    degenerate = (neg == total) | (neg < k)
    sigma = torch.where(degenerate, torch.ones_like(sigma), sigma)
    a_pos = (1 - pass_k) / sigma
    a_neg = (1 - pass_k - _comb_ratio((neg - 1).clamp_min(0), total - 1, k - 1)) / sigma
    a_pos = torch.where(degenerate, torch.zeros_like(a_pos), a_pos)
    a_neg = torch.where(degenerate, torch.zeros_like(a_neg), a_neg)
    advantages = torch.where(correct, broadcast(a_pos, group), broadcast(a_neg, group))
    return to_tokens(batch, advantages.to(scores.dtype))


# --------------------------------------------------------------------------- bnpo
class BNPOParams(BaseModel):
    """Parameters of ``bnpo``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    min_value: float = Field(0.0, description="Lowest possible score; scores are mapped to [0, 1].")
    max_value: float = Field(1.0, description="Highest possible score.")
    max_weight: float = Field(1e6, gt=0, description="Clamp of the weight 1 / Beta_pdf(p).")

    @model_validator(mode="after")
    def _range(self) -> BNPOParams:
        if self.max_value <= self.min_value:
            raise ValueError("max_value must be greater than min_value")
        return self


def beta_parameters(p: Tensor) -> tuple[Tensor, Tensor]:
    """BNPO's Beta(alpha, beta) fitted to per-group success rates ``p [G]`` (authors' code).

    Method of moments ``a = (m (1 - m) / v - 1) m``, ``b = (m (1 - m) / v - 1)(1 - m)`` with ``m`` the
    mean and ``v`` the unbiased variance of ``p``, then ``alpha = max(1 + a / 3, 1)``,
    ``beta = max(1 + b / 3, 1)``. One group: ``m = 0, v = 1`` (authors' fallback, giving Beta(1, 1)).
    Where the fit is undefined (``v = 0``; NaN in the authors' code) we use Beta(1, 1) as well.
    """
    if p.numel() > 1:
        m, v = p.mean(), p.var()
    else:
        m, v = p.new_zeros(()), p.new_ones(())
    shape = m * (1 - m) / v - 1
    alpha = torch.clamp(1 + shape * m / 3, min=1.0)
    beta = torch.clamp(1 + shape * (1 - m) / 3, min=1.0)
    ok = torch.isfinite(alpha) & torch.isfinite(beta)
    return torch.where(ok, alpha, torch.ones_like(alpha)), torch.where(ok, beta, torch.ones_like(beta))


@ADVANTAGE_ESTIMATORS.register(
    "bnpo", params=BNPOParams, paper=BNPO_PAPER, summary="Group-mean baseline weighted by 1 / Beta pdf of the pass rate."
)
def bnpo(batch: RolloutBatch, scores: Tensor, params: BNPOParams) -> Tensor:
    """BNPO (Xiao et al. 2025, "BNPO: Beta Normalization Policy Optimization").

    Scores are mapped to ``s = (r - min_value) / (max_value - min_value)``; ``p_g`` is the group
    mean of ``s`` (0 for a single-sample group, as the authors' code); a Beta(alpha, beta) is fitted
    to the batch's ``p_g`` (:func:`beta_parameters`) and ``A_i = w(p_g) (s_i - p_g)`` with
    ``w = clamp(1 / Beta_pdf(p_g; alpha, beta), 0, max_weight)``. With Beta(1, 1) this is
    ``s - p_g`` (REINFORCE with a group-mean baseline); with alpha = beta = 1.5, ``w`` is proportional to GRPO's
    ``1 / sqrt(p (1 - p))``. The authors' optional "advantage decomposition" (averaging BNPO over
    several reward components) is not implemented; ``scores`` is the already-combined reward.
    """
    scores = check_scores(batch, scores)
    s = (scores - params.min_value) / (params.max_value - params.min_value)
    group, num_groups = dense_index(batch.group_index)
    count = segment_count(group, num_groups)
    p = torch.where(count > 1, segment_mean(s, group, num_groups), s.new_zeros(num_groups))
    if bool(((p < 0) | (p > 1)).any()):
        raise ValueError("BNPO group means must lie in [0, 1]: set min_value and max_value to the score range")
    alpha, beta = beta_parameters(p)
    log_pdf = (
        torch.xlogy(alpha - 1, p)
        + torch.xlogy(beta - 1, 1 - p)
        + torch.lgamma(alpha + beta)
        - torch.lgamma(alpha)
        - torch.lgamma(beta)
    )
    weight = torch.clamp(1 / log_pdf.exp(), min=0.0, max=params.max_weight)
    centered = normalize_scores(s, batch.group_index, NormConfig(std_level="none"))
    return to_tokens(batch, broadcast(weight, group) * centered)
