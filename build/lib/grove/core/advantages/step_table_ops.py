"""Shared tensor work of the step-table estimators (GiGPO, Step-GRPO): per-segment normalisation of per-step
values, first steps of trajectories, and the scatter of per-step advantages to the tokens that produced them."""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor

from grove.batch import RolloutBatch, StepTable
from grove.core.segments import segment_count, segment_max, segment_mean, segment_min, segment_std

__all__ = [
    "episode_stats",
    "first_steps",
    "moments",
    "normalize_within",
    "require_steps",
    "step_output_dtype",
    "step_stats",
    "steps_to_tokens",
]

Mode = Literal["mean_norm", "mean_std_norm"]


def require_steps(batch: RolloutBatch, name: str) -> StepTable:
    if batch.steps is None or batch.token_steps is None:
        raise ValueError(
            f"advantage estimator {name!r} needs per-step environment experience (batch.steps and "
            "batch.token_steps): use an environment experience source (agent rollouts); this batch has no step table"
        )
    return batch.steps


def normalize_within(
    values: Tensor,
    segment: Tensor,
    num: int,
    *,
    mode: Mode,
    eps: float,
    unbiased: bool,
    lone: Literal["raw", "zero"],
    members: Tensor | None = None,
) -> Tensor:
    """``values - mean`` (``mean_norm``) or ``(values - mean) / (std + eps)`` per segment.

    The statistics are taken over ``values[members]`` (all values when ``None``) and applied to every
    value of the segment. A segment with one member: ``lone="raw"`` uses mean 0 and std 1 (verl's GRPO
    and verl-agent's episode convention), ``lone="zero"`` gives 0 (verl-agent's singleton anchor group).
    A segment with several members, all equal, gives exactly 0 for its values equal to them.
    """
    stat_values, stat_segment = (values, segment) if members is None else (values[members], segment[members])
    count = segment_count(stat_segment, num)
    mean = segment_mean(stat_values, stat_segment, num)
    std = segment_std(stat_values, stat_segment, num, unbiased=unbiased)
    low = segment_min(stat_values, stat_segment, num)
    single = count == 1
    if lone == "raw":
        mean = torch.where(single, torch.zeros_like(mean), mean)
        std = torch.where(single, torch.ones_like(std), std)
    centered = values - mean[segment]
    out = centered if mode == "mean_norm" else centered / (std[segment] + eps)
    constant = (count > 1) & (segment_max(stat_values, stat_segment, num) == low)
    zero = constant[segment] & (values == low[segment])
    if lone == "zero":
        zero = zero | single[segment]
    return torch.where(zero, torch.zeros_like(out), out)


def first_steps(steps: StepTable) -> Tensor:
    """``[S]`` bool: the step with the lowest turn number of each trajectory (ties: the first in the table)."""
    perm = torch.argsort(steps.index, stable=True)
    perm = perm[torch.argsort(steps.trajectory[perm], stable=True)]
    sorted_traj = steps.trajectory[perm]
    starts = torch.ones_like(sorted_traj, dtype=torch.bool)
    starts[1:] = sorted_traj[1:] != sorted_traj[:-1]
    first = torch.zeros_like(starts)
    first[perm[starts]] = True
    return first


def steps_to_tokens(batch: RolloutBatch, per_step: Tensor, dtype: torch.dtype) -> Tensor:
    """``[N, R]``: each token gets the value of the step that produced it, 0 where ``token_steps < 0``."""
    token_steps = batch.token_steps
    out = torch.zeros(token_steps.shape, dtype=dtype, device=token_steps.device)
    if per_step.numel() == 0:
        return out
    valid = (token_steps >= 0) & batch.response_mask.bool()
    return torch.where(valid, per_step.to(dtype)[token_steps.clamp_min(0)], out)


def step_output_dtype(scores: Tensor, steps: StepTable) -> torch.dtype:
    reward = steps.reward.dtype if steps.reward.is_floating_point() else scores.dtype
    return torch.promote_types(scores.dtype, reward)


def moments(x: Tensor) -> tuple[float, float]:
    """Mean and population std of a 1-D tensor as floats (0 for an empty one)."""
    if x.numel() == 0:
        return 0.0, 0.0
    return float(x.mean()), float(x.std(correction=0))


def episode_stats(a_episode: Tensor) -> dict[str, float]:
    """Mean and std of the episode advantages."""
    mean, std = moments(a_episode)
    return {"episode_mean": mean, "episode_std": std}


def step_stats(a_step: Tensor) -> dict[str, float]:
    """Mean, std and non-zero fraction of the step advantages (GiGPO's anchor-group sizes are the experience
    source's metrics: ``anchor_group_size_mean``, ``anchor_group_size_hist/*``, ``anchor_steps_in_shared_groups``)."""
    mean, std = moments(a_step)
    nonzero = float((a_step != 0).to(torch.float64).mean()) if a_step.numel() else 0.0
    return {"step_mean": mean, "step_std": std, "step_nonzero_frac": nonzero}
