"""Group-baseline advantage estimators: GPG, OPO and LitePPO.

All three subtract a per-group baseline from the sequence score and broadcast the result over the
response tokens (times ``response_mask``); they differ in the baseline and the scale:

* ``gpg``: group mean, times a batch-level factor ``alpha / f_norm`` (verl ``compute_gpg_outcome_advantage``);
* ``opo``: the length-weighted group mean ``sum_j l_j r_j / sum_j l_j`` (verl ``compute_opo_outcome_advantage``);
* ``lite_ppo``: group mean, divided by the std of the raw scores over the whole batch (TRL
  ``GRPOTrainer`` with ``scale_rewards="batch"``) — a :class:`~grove.core.advantages.NormConfig` setting.

Shared conventions (those of :func:`~grove.core.advantages.normalize_scores`): a single-sample group
has baseline 0 (verl), and a group whose scores are all equal gets an advantage of exactly 0.
"""

from __future__ import annotations

from typing import Literal

import torch
from pydantic import BaseModel, ConfigDict, Field
from torch import Tensor

from grove.batch import RolloutBatch
from grove.core.advantages import NormConfig, normalize_scores
from grove.core.segments import (
    broadcast,
    dense_index,
    segment_count,
    segment_max,
    segment_min,
    segment_sum,
)
from grove.registry import ADVANTAGE_ESTIMATORS, NoParams

GPG_PAPER = "GPG: A Simple and Strong Reinforcement Learning Baseline for Model Reasoning"
OPO_PAPER = "On-Policy RL with Optimal Reward Baseline"
LITE_PPO_PAPER = "Part I: Tricks or Traps? A Deep Dive into RL for LLM Reasoning"


# --------------------------------------------------------------------------- shared helpers
def check_scores(batch: RolloutBatch, scores: Tensor) -> Tensor:
    """Validate ``scores`` as ``[N]`` for ``batch`` and promote integer scores to float32."""
    if scores.shape != (batch.num_samples,):
        raise ValueError(f"scores shape {tuple(scores.shape)} != ({batch.num_samples},)")
    return scores if scores.is_floating_point() else scores.to(torch.float32)


def to_tokens(batch: RolloutBatch, advantages: Tensor) -> Tensor:
    """Broadcast sequence advantages ``[N]`` over the response tokens: ``[N, R]``, 0 outside the mask."""
    return advantages.unsqueeze(-1) * batch.response_mask.to(advantages.dtype)


def constant_group(scores: Tensor, group: Tensor, num_groups: int) -> Tensor:
    """``[N]`` bool: the sample's group has more than one member and all its scores are equal."""
    count = broadcast(segment_count(group, num_groups), group)
    same = broadcast(segment_max(scores, group, num_groups) == segment_min(scores, group, num_groups), group)
    return same & (count > 1)


# --------------------------------------------------------------------------- GPG
class GPGParams(BaseModel):
    """Parameters of ``gpg``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    f_norm: float = Field(1.0, gt=0, description="Constant divisor F_norm: A = alpha * (r - mean_g) / f_norm.")
    alpha: Literal["nonzero_reward", "nonzero_advantage", "none"] = Field(
        "nonzero_reward",
        description=(
            "Batch factor alpha = N / max(M, 1). 'nonzero_reward': M = #samples with r != 0 (verl); "
            "'nonzero_advantage': M = #samples with r - mean_g != 0 (the paper's B / (B - M_invalid)); "
            "'none': alpha = 1."
        ),
    )


@ADVANTAGE_ESTIMATORS.register(
    "gpg", params=GPGParams, paper=GPG_PAPER, summary="Group-mean baseline scaled by the valid-sample factor alpha."
)
def gpg(batch: RolloutBatch, scores: Tensor, params: GPGParams) -> Tensor:
    """GPG (Chu et al. 2025, "GPG: A Simple and Strong Reinforcement Learning Baseline for Model Reasoning").

    ``A_i = alpha * (r_i - mean_g) / f_norm`` with ``alpha = N / max(M, 1)``. The default
    ``alpha="nonzero_reward"`` counts ``M`` as the samples with a non-zero *reward*, exactly as verl's
    ``compute_gpg_outcome_advantage`` (``bsz / count_nonzero(scores).clamp(min=1)``);
    ``"nonzero_advantage"`` counts samples with a non-zero *advantage*, the paper's ``B / (B - M)``
    with ``M`` the samples that carry no gradient. Pair it with the ``pg`` policy loss and no KL.
    """
    scores = check_scores(batch, scores)
    centered = normalize_scores(scores, batch.group_index, NormConfig(std_level="none"))
    n = scores.numel()
    if params.alpha == "nonzero_reward":
        alpha = n / max(int(torch.count_nonzero(scores)), 1)
    elif params.alpha == "nonzero_advantage":
        alpha = n / max(int(torch.count_nonzero(centered)), 1)
    else:
        alpha = 1.0
    return to_tokens(batch, alpha * centered / params.f_norm)


# --------------------------------------------------------------------------- OPO
@ADVANTAGE_ESTIMATORS.register(
    "opo", params=NoParams, paper=OPO_PAPER, summary="Length-weighted group-mean baseline (optimal baseline)."
)
def opo(batch: RolloutBatch, scores: Tensor, params: NoParams) -> Tensor:
    """OPO (Hao et al. 2025, "On-Policy RL with Optimal Reward Baseline").

    ``A_i = r_i - b_g`` with ``b_g = sum_{j in g} l_j r_j / sum_{j in g} l_j`` and ``l_j`` the
    response length (``response_mask`` sum), as verl's ``compute_opo_outcome_advantage``. A
    single-sample group has ``b = 0``; a group of empty responses (``sum l = 0``, NaN in verl) has
    ``b = 0`` and its advantages are masked out anyway; a constant group gets exactly 0.
    """
    scores = check_scores(batch, scores)
    group, num_groups = dense_index(batch.group_index)
    lengths = batch.response_mask.sum(dim=-1).to(scores.dtype)
    weighted = segment_sum(lengths * scores, group, num_groups)
    total = segment_sum(lengths, group, num_groups).clamp_min(1)  # integer-valued: only 0 is changed
    baseline = broadcast(weighted / total, group)
    count = broadcast(segment_count(group, num_groups), group)
    baseline = torch.where(count > 1, baseline, torch.zeros_like(baseline))
    advantages = scores - baseline
    advantages = torch.where(constant_group(scores, group, num_groups), torch.zeros_like(advantages), advantages)
    return to_tokens(batch, advantages)


# --------------------------------------------------------------------------- LitePPO
class LitePPOParams(BaseModel):
    """Parameters of ``lite_ppo``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    eps: float = Field(1e-4, ge=0, description="Added to the batch std (TRL's 1e-4).")
    unbiased_std: bool = Field(True, description="Batch std with the n - 1 divisor (torch.std, TRL).")


@ADVANTAGE_ESTIMATORS.register(
    "lite_ppo", params=LitePPOParams, paper=LITE_PPO_PAPER, summary="Group-mean baseline, batch-std scale."
)
def lite_ppo(batch: RolloutBatch, scores: Tensor, params: LitePPOParams) -> Tensor:
    """LitePPO's advantage (Liu et al. 2025, "Part I: Tricks or Traps? A Deep Dive into RL for LLM Reasoning").

    ``A_i = (r_i - mean_g) / (std_batch(r) + eps)``: group-level mean, batch-level std of the *raw*
    scores (about the batch mean), i.e. ``NormConfig(mean_level="group", std_level="batch")``. This
    is TRL ``GRPOTrainer`` with ``scale_rewards="batch"`` (``rewards.std()``, unbiased, ``+ 1e-4``).
    LitePPO pairs it with token-level loss aggregation (``token_mean``).
    """
    scores = check_scores(batch, scores)
    cfg = NormConfig(mean_level="group", std_level="batch", eps=params.eps, unbiased_std=params.unbiased_std)
    return to_tokens(batch, normalize_scores(scores, batch.group_index, cfg))
