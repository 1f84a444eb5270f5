"""Group-relative advantage estimators.

All estimators here are settings of one normaliser, :func:`normalize_scores` (in the style of
AReaL's ``NormConfig``)::

    A_i = (r_i - baseline_i) / (std_i + eps)

with the baseline a group mean, a batch mean, a leave-one-out mean or 0, and the scale a group
std, a batch std or 1. A sequence-level score is then broadcast over the response tokens.

Conventions (chosen to match verl's ``core_algos.compute_grpo_outcome_advantage``):

* the std is ``torch.std``'s unbiased (``n - 1``) estimate by default, and the scale is
  ``std + eps`` with ``eps = 1e-6`` (added to the std, not under the square root);
* a *single-sample group* uses mean 0 and std 1 at group level, so its advantage is
  ``r / (1 + eps)``, i.e. the raw score (verl's convention). Under leave-one-out it gets 0, since
  there is no other member to form a baseline;
* a group whose scores are all equal (and whose baseline is taken over that group) gets an
  advantage of *exactly* zero: it is detected with a per-group max == min test, so the
  ``(r - mean) / eps`` blow-up of floating-point residue cannot leak through.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from pydantic import BaseModel, ConfigDict, Field, model_validator
from torch import Tensor

from grove.batch import RolloutBatch
from grove.core import papers
from grove.core.advantages.common import check_scores, constant_group
from grove.core.segments import (
    broadcast,
    dense_index,
    segment_count,
    segment_mean,
    segment_std,
    segment_sum,
)
from grove.core.token_ops import per_token
from grove.registry import ADVANTAGE_ESTIMATORS, NoParams, Requires

Level = Literal["group", "batch", "none"]


@dataclass(frozen=True)
class NormConfig:
    """How to turn sequence scores into advantages: ``(r - baseline) / (std + eps)``.

    * ``mean_level``: baseline is the group mean, the batch mean, or 0 (``"none"``);
    * ``std_level``: scale is the group std, the batch std (of the raw scores about their own
      mean at that level), or 1 (``"none"``: no division and no ``eps``);
    * ``leave_one_out``: baseline is the mean of the *other* members of the sample's
      ``mean_level`` segment (RLOO); segments of size 1 get advantage 0. Needs a mean level;
    * ``unbiased_std``: ``n - 1`` (torch.std default, verl) or ``n`` divisor.
    """

    mean_level: Level = "group"
    std_level: Level = "group"
    leave_one_out: bool = False
    eps: float = 1e-6
    unbiased_std: bool = True

    def __post_init__(self) -> None:
        if self.leave_one_out and self.mean_level == "none":
            raise ValueError("leave_one_out needs mean_level 'group' or 'batch', not 'none'")
        if self.eps < 0:
            raise ValueError(f"eps must be >= 0, got {self.eps}")


def _level_index(level: Level, group: Tensor, num_groups: int) -> tuple[Tensor, int]:
    """The dense segment index of a level: the groups, or one segment holding the whole batch."""
    if level == "group":
        return group, num_groups
    return torch.zeros_like(group), 1


def _center(scores: Tensor, group: Tensor, num_groups: int, cfg: NormConfig) -> tuple[Tensor, Tensor]:
    """``r - baseline`` and a mask of samples whose advantage is exactly 0 by definition.

    The mask holds members of constant segments (size > 1, max == min) of the mean level, where
    ``r - baseline`` is mathematically 0 but floating-point residue would survive division by a
    tiny ``std + eps``, and lone samples under leave-one-out.
    """
    if cfg.mean_level == "none":
        return scores, torch.zeros_like(scores, dtype=torch.bool)
    index, num = _level_index(cfg.mean_level, group, num_groups)
    count = broadcast(segment_count(index, num), index)
    if cfg.leave_one_out:
        # RLOO (Ahmadian et al. 2024): baseline_i = (sum_j r_j - r_i) / (n - 1).
        total = broadcast(segment_sum(scores, index, num), index)
        baseline = (total - scores) / (count - 1).clamp_min(1).to(scores.dtype)
    else:
        baseline = broadcast(segment_mean(scores, index, num), index)
        # verl: a single-sample group has mean 0 (its advantage is the raw score).
        baseline = torch.where(count == 1, torch.zeros_like(baseline), baseline)
    zero = constant_group(scores, index, num)
    if cfg.leave_one_out:
        zero = zero | (count == 1)  # a lone sample has no leave-one-out baseline
    return scores - baseline, zero


def _scale(scores: Tensor, group: Tensor, num_groups: int, cfg: NormConfig) -> Tensor:
    """``std + eps`` at the std level (1 for ``"none"``); single-sample groups use std 1 (verl)."""
    if cfg.std_level == "none":
        return torch.ones_like(scores)
    index, num = _level_index(cfg.std_level, group, num_groups)
    std = broadcast(segment_std(scores, index, num, unbiased=cfg.unbiased_std), index)
    if cfg.std_level == "group":
        count = broadcast(segment_count(index, num), index)
        std = torch.where(count == 1, torch.ones_like(std), std)
    return std + cfg.eps


def normalize_scores(scores: Tensor, group_index: Tensor, cfg: NormConfig) -> Tensor:
    """Group-relative advantages ``A = (r - baseline) / (std + eps)`` of sequence scores ``[N]``.

    GRPO (Shao et al. 2024, "DeepSeekMath: Pushing the Limits of Mathematical Reasoning in Open
    Language Models") is ``NormConfig()``: ``A_i = (r_i - mean_g) / (std_g + eps)`` with the
    unbiased group std and ``eps = 1e-6``, exactly as verl's ``compute_grpo_outcome_advantage``.
    A group with a single sample uses mean 0 and std 1, so its advantage is ``r / (1 + eps)``
    (the raw score; verl's convention). A group with all-equal scores gets exactly 0.
    Dr. GRPO (Liu et al. 2025) is ``std_level="none"``; RLOO (Ahmadian et al. 2024) is
    ``leave_one_out=True, std_level="none"``, with 0 for groups of size 1.

    ``group_index`` may hold arbitrary ids (not necessarily ``0..G-1`` or contiguous).
    """
    if scores.ndim != 1 or group_index.shape != scores.shape:
        raise ValueError(
            f"scores {tuple(scores.shape)} and group_index {tuple(group_index.shape)} must both be [N]"
        )
    if not scores.is_floating_point():
        scores = scores.to(torch.float32)
    group, num_groups = dense_index(group_index)
    centered, zero = _center(scores, group, num_groups, cfg)
    advantages = centered / _scale(scores, group, num_groups, cfg)
    return torch.where(zero, torch.zeros_like(advantages), advantages)


def _per_token(batch: RolloutBatch, scores: Tensor, cfg: NormConfig) -> Tensor:
    """Normalise ``scores [N]`` over ``batch.group_index`` and broadcast over the response ``[N, R]``."""
    return per_token(normalize_scores(check_scores(batch, scores), batch.group_index, cfg), batch.response_mask)


# --------------------------------------------------------------------------- parameter models
class GRPOParams(BaseModel):
    """Parameters of ``grpo``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    eps: float = Field(1e-6, ge=0, description="Added to the group std: A = (r - mean) / (std + eps).")
    unbiased_std: bool = Field(True, description="Group std with the n - 1 divisor (torch.std, verl).")


class GroupNormParams(BaseModel):
    """Parameters of ``group_norm``: every :class:`NormConfig` knob."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    mean_level: Level = Field("group", description="Baseline: group mean, batch mean, or none (0).")
    std_level: Level = Field("group", description="Scale: group std, batch std, or none (1, no eps).")
    leave_one_out: bool = Field(
        False, description="Baseline is the mean of the other members of the mean-level segment (RLOO)."
    )
    eps: float = Field(1e-6, ge=0, description="Added to the std before dividing.")
    unbiased_std: bool = Field(True, description="Std with the n - 1 divisor (torch.std, verl).")

    @model_validator(mode="after")
    def _loo_needs_mean(self) -> GroupNormParams:
        if self.leave_one_out and self.mean_level == "none":
            raise ValueError("leave_one_out needs mean_level 'group' or 'batch', not 'none'")
        return self

    def norm_config(self) -> NormConfig:
        return NormConfig(**self.model_dump())


class LitePPOParams(BaseModel):
    """Parameters of ``lite_ppo``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    eps: float = Field(1e-4, ge=0, description="Added to the batch std (TRL's 1e-4).")
    unbiased_std: bool = Field(True, description="Batch std with the n - 1 divisor (torch.std, TRL).")


# --------------------------------------------------------------------------- estimators
@ADVANTAGE_ESTIMATORS.register(
    "grpo",
    params=GRPOParams,
    paper=papers.GRPO,
    summary="Group mean and std normalised score.",
    requires=(Requires.GROUPS,),
    formula="A_i = (r_i - mean_g) / (std_g + eps)",
    reference="verl compute_grpo_outcome_advantage (norm_adv_by_std_in_grpo=True)",
)
def grpo(batch: RolloutBatch, scores: Tensor, params: GRPOParams) -> Tensor:
    """GRPO (Shao et al. 2024, DeepSeekMath): ``A_i = (r_i - mean_g) / (std_g + eps)``."""
    return _per_token(batch, scores, NormConfig(eps=params.eps, unbiased_std=params.unbiased_std))


@ADVANTAGE_ESTIMATORS.register(
    "dr_grpo",
    params=NoParams,
    paper=papers.DR_GRPO,
    summary="Group-mean baseline, no std division.",
    requires=(Requires.GROUPS,),
    formula="A_i = r_i - mean_g",
    reference="verl compute_grpo_outcome_advantage (norm_adv_by_std_in_grpo=False)",
)
def dr_grpo(batch: RolloutBatch, scores: Tensor, params: NoParams) -> Tensor:
    """Dr. GRPO (Liu et al. 2025, "Understanding R1-Zero-Like Training"): ``A_i = r_i - mean_g``."""
    return _per_token(batch, scores, NormConfig(std_level="none"))


@ADVANTAGE_ESTIMATORS.register(
    "rloo",
    params=NoParams,
    paper=papers.RLOO,
    summary="Leave-one-out group-mean baseline.",
    requires=(Requires.GROUPS,),
    formula="A_i = r_i - mean_{j in g, j != i} r_j",
    reference="verl compute_rloo_outcome_advantage",
)
def rloo(batch: RolloutBatch, scores: Tensor, params: NoParams) -> Tensor:
    """RLOO (Ahmadian et al. 2024, "Back to Basics"): ``A_i = r_i - mean_{j != i} r_j``."""
    return _per_token(batch, scores, NormConfig(std_level="none", leave_one_out=True))


@ADVANTAGE_ESTIMATORS.register(
    "group_norm",
    params=GroupNormParams,
    paper=papers.GRPO,
    summary="Configurable normaliser: group/batch/none mean and std, leave-one-out.",
    requires=(Requires.GROUPS,),
    formula="A_i = (r_i - baseline_i) / (std_i + eps); baseline: group/batch/leave-one-out mean or 0; std: group, batch or 1",
    reference="the settings of grpo, dr_grpo, rloo; std_level: batch is TRL scale_rewards='batch'",
)
def group_norm(batch: RolloutBatch, scores: Tensor, params: GroupNormParams) -> Tensor:
    """General ``(r - baseline) / (std + eps)`` (see :func:`normalize_scores`; GRPO, Dr. GRPO, RLOO)."""
    return _per_token(batch, scores, params.norm_config())


@ADVANTAGE_ESTIMATORS.register(
    "lite_ppo",
    params=LitePPOParams,
    paper=papers.LITE_PPO,
    summary="Group-mean baseline, batch-std scale.",
    requires=(Requires.GROUPS,),
    formula="A_i = (r_i - mean_g) / (std_batch(r) + eps)",
    reference="TRL GRPOTrainer advantages with scale_rewards='batch'",
)
def lite_ppo(batch: RolloutBatch, scores: Tensor, params: LitePPOParams) -> Tensor:
    """LitePPO's advantage (Liu et al. 2025, "Part I: Tricks or Traps? A Deep Dive into RL for LLM Reasoning").

    ``A_i = (r_i - mean_g) / (std_batch(r) + eps)``: group-level mean, batch-level std of the *raw*
    scores (about the batch mean), i.e. ``NormConfig(mean_level="group", std_level="batch")``. This
    is TRL ``GRPOTrainer`` with ``scale_rewards="batch"`` (``rewards.std()``, unbiased, ``+ 1e-4``).
    LitePPO pairs it with token-level loss aggregation (``token_mean``).
    """
    cfg = NormConfig(mean_level="group", std_level="batch", eps=params.eps, unbiased_std=params.unbiased_std)
    return _per_token(batch, scores, cfg)
