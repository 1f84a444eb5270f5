"""Pass@k advantages: optimise the best of k samples rather than each sample.

* ``grpo_passk``: verl's ``compute_grpo_passk_outcome_advantage``, the best-of-group estimator of
  Tang et al. 2025 (the paper verl cites, arXiv 2503.19595): only the best sample of each group gets a
  non-zero advantage, ``r_max - r_second_max`` (divided by the group std + eps by default).
* ``passk_analytic``: the closed-form group advantages of Chen et al. 2025 ("Pass@k Training for
  Adaptively Balancing Exploration and Exploitation of Large Reasoning Models") for binary rewards.
"""

from __future__ import annotations

import torch
from pydantic import BaseModel, ConfigDict, Field
from torch import Tensor

from grove.batch import RolloutBatch
from grove.core import papers
from grove.core.advantages.common import check_scores
from grove.core.segments import (
    broadcast,
    dense_index,
    segment_count,
    segment_max,
    segment_std,
    segment_sum,
)
from grove.core.token_ops import per_token
from grove.registry import ADVANTAGE_ESTIMATORS, Requires


# --------------------------------------------------------------------------- grpo_passk
class GRPOPassKParams(BaseModel):
    """Parameters of ``grpo_passk``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    norm_by_std: bool = Field(True, description="Divide by the group std + eps (verl's norm_adv_by_std_in_grpo).")
    eps: float = Field(1e-6, ge=0, description="Added to the unbiased group std.")


@ADVANTAGE_ESTIMATORS.register(
    "grpo_passk",
    params=GRPOPassKParams,
    paper=papers.PASSK_TANG,
    summary="Only the best sample of each group: r_max - r_second_max (over the group std).",
    requires=(Requires.GROUPS,),
    formula="best sample of each group: A = (r_max - r_second) / (std_g + eps), all others 0",
    reference="verl compute_grpo_passk_outcome_advantage",
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
    return per_token(advantages, batch.response_mask)


# --------------------------------------------------------------------------- passk_analytic
class PassKAnalyticParams(BaseModel):
    """Parameters of ``passk_analytic``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    k: int = Field(4, ge=1, description="The k of pass@k; at most the group size.")
    threshold: float = Field(0.5, description="A sample is correct when its score >= threshold.")

    def min_group_size(self) -> int:
        """The fewest samples per group the estimator takes (the config checks train.completions_per_prompt)."""
        return self.k


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
    paper=papers.PASSK_CHEN,
    summary="Closed-form pass@k group advantages for binary rewards.",
    requires=(Requires.GROUPS,),
    formula="R = 1 - C(N_neg,k)/C(N,k), sigma = sqrt(R(1-R)), A_pos = (1-R)/sigma, "
    "A_neg = (1 - R - C(N_neg-1,k-1)/C(N-1,k-1))/sigma",
    reference="none found; the paper's closed form by hand, and k = 1 equals GRPO with the biased std and no eps",
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
    return per_token(advantages.to(scores.dtype), batch.response_mask)
