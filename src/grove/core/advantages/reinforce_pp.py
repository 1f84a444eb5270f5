"""REINFORCE++ advantages: token-level returns whitened over the whole batch.

Paper: Hu et al. 2025, "REINFORCE++: A Simple and Efficient Approach for Aligning Large Language
Models". Both estimators follow verl (``core_algos.compute_reinforce_plus_plus_outcome_advantage`` and
``compute_reinforce_plus_plus_baseline_outcome_advantage``) and end in :func:`masked_whiten`, verl's
``torch_functional.masked_whiten`` convention: mean and **unbiased** (``n - 1``) variance over the
masked tokens of the whole batch, ``(x - mean) * rsqrt(var + 1e-8)`` (eps under the square root), the
mean is *not* added back (``shift_mean=True``). Whitening is over tokens, so a long response weighs
more in the statistics than a short one — as in verl.
"""

from __future__ import annotations

import torch
from pydantic import BaseModel, ConfigDict, Field
from torch import Tensor

from grove.batch import RolloutBatch
from grove.core import papers
from grove.core.advantages.common import check_scores
from grove.core.advantages.group_norm import NormConfig, normalize_scores
from grove.core.token_ops import per_token
from grove.registry import ADVANTAGE_ESTIMATORS, Requires


def masked_whiten(
    values: Tensor, mask: Tensor, *, shift_mean: bool = True, unbiased: bool = True, eps: float = 1e-8
) -> Tensor:
    """Whiten ``values`` with statistics over the positions where ``mask`` is set (any shape).

    ``(values - mean) * rsqrt(var + eps)`` with the masked mean and variance (``n - 1`` divisor when
    ``unbiased``, as verl's ``masked_whiten``); with ``shift_mean=False`` the mean is added back.
    Positions outside the mask are 0 (verl's callers multiply by the mask; ``where`` here also keeps
    NaN/inf in padding from leaking). Where verl raises (``n = 0``, or ``n = 1`` when unbiased) this
    returns zeros for ``n = 0`` and, for ``n = 1``, uses variance 0 (the single value becomes 0).
    """
    m = mask.bool()
    x = torch.where(m, values, torch.zeros_like(values))
    n = m.sum()
    count = n.clamp_min(1).to(values.dtype)
    mean = x.sum() / count
    centered = torch.where(m, values - mean, torch.zeros_like(values))
    divisor = ((n - 1) if unbiased else n).clamp_min(1).to(values.dtype)
    var = (centered * centered).sum() / divisor
    whitened = centered * torch.rsqrt(var + eps)
    if not shift_mean:
        whitened = whitened + mean
    return torch.where(m, whitened, torch.zeros_like(whitened))


def outcome_returns(scores: Tensor, response_mask: Tensor, gamma: float) -> Tensor:
    """Discounted returns ``[N, R]`` of an outcome reward placed on the last response token.

    Vectorised form of verl's backward loop ``G_t = r_t + gamma * G_{t+1}`` with the running return
    reset after masked positions (``G_t *= mask_t``): with ``r`` non-zero only at the last masked
    position ``T``, ``G_t = gamma^(T - t) * r`` for ``t <= T`` when no masked-out position lies in
    ``(t, T]``, else 0. Rows with an empty mask are all 0.
    """
    mask = response_mask.bool()
    width = mask.shape[1]
    if width == 0:
        return torch.zeros(mask.shape, dtype=scores.dtype, device=scores.device)
    positions = torch.arange(width, device=mask.device)
    last = torch.where(mask, positions, torch.full_like(positions, -1)).amax(dim=1)
    gaps = (~mask).to(torch.long)
    gaps_after = gaps.flip(1).cumsum(1).flip(1) - gaps  # number of masked-out positions in (t, R)
    gaps_after_last = gaps_after.gather(1, last.clamp_min(0).unsqueeze(1))
    reached = (positions.unsqueeze(0) <= last.unsqueeze(1)) & (gaps_after == gaps_after_last)
    exponent = (last.unsqueeze(1) - positions.unsqueeze(0)).clamp_min(0).to(scores.dtype)
    discount = torch.pow(torch.as_tensor(gamma, dtype=scores.dtype, device=scores.device), exponent)
    return torch.where(reached, scores.unsqueeze(1) * discount, torch.zeros_like(discount))


class ReinforcePPParams(BaseModel):
    """Parameters of ``reinforce_pp``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    gamma: float = Field(1.0, ge=0, le=1, description="Discount of the outcome reward per token before the end.")
    whiten_eps: float = Field(1e-8, ge=0, description="Added to the batch variance under the square root (verl).")


class ReinforcePPBaselineParams(BaseModel):
    """Parameters of ``reinforce_pp_baseline``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    whiten_eps: float = Field(1e-8, ge=0, description="Added to the batch variance under the square root (verl).")


@ADVANTAGE_ESTIMATORS.register(
    "reinforce_pp",
    params=ReinforcePPParams,
    paper=papers.REINFORCE_PP,
    summary="Discounted token returns of the outcome reward, whitened over the batch.",
    formula="A_{i,t} = whiten(gamma^(T_i - t) r_i) over all response tokens of the batch",
    reference="verl compute_reinforce_plus_plus_outcome_advantage + torch_functional.masked_whiten",
)
def reinforce_pp(batch: RolloutBatch, scores: Tensor, params: ReinforcePPParams) -> Tensor:
    """REINFORCE++ (Hu et al. 2025): ``A_t = whiten_batch(gamma^(T - t) * r)`` over the response tokens.

    Matches verl's ``compute_reinforce_plus_plus_outcome_advantage`` with the outcome score on the
    last response token. No group baseline: the batch whitening is the only normalisation. verl can
    fold a per-token KL penalty into the token rewards first (a KL-to-go in every return); grove has
    no per-token rewards: KL is a loss term, or (``kl_in_reward``) the sequence KL subtracted from
    the score, which then sits on the last token like the rest of the score.
    """
    scores = check_scores(batch, scores)
    returns = outcome_returns(scores, batch.response_mask, params.gamma)
    return masked_whiten(returns, batch.response_mask, eps=params.whiten_eps)


@ADVANTAGE_ESTIMATORS.register(
    "reinforce_pp_baseline",
    params=ReinforcePPBaselineParams,
    paper=papers.REINFORCE_PP,
    summary="Group-mean baseline, then whitening over the batch's tokens.",
    requires=(Requires.GROUPS,),
    formula="A_{i,t} = whiten(r_i - mean_g) over all response tokens of the batch",
    reference="verl compute_reinforce_plus_plus_baseline_outcome_advantage",
)
def reinforce_pp_baseline(batch: RolloutBatch, scores: Tensor, params: ReinforcePPBaselineParams) -> Tensor:
    """REINFORCE++-baseline (Hu et al. 2025): ``A_t = whiten_batch(r - mean_g)`` on every response token.

    Matches verl's ``compute_reinforce_plus_plus_baseline_outcome_advantage``: the group mean is
    subtracted (single-sample groups keep their raw score; constant groups give exactly 0 before
    whitening), the result is broadcast to the tokens and whitened over all masked tokens.
    """
    scores = check_scores(batch, scores)
    centered = normalize_scores(scores, batch.group_index, NormConfig(std_level="none"))
    return masked_whiten(per_token(centered, batch.response_mask), batch.response_mask, eps=params.whiten_eps)
