"""Reward shaping and group filters used by DAPO ("DAPO: An Open-Source LLM Reinforcement Learning
System at Scale", Yu et al., 2025): soft overlong punishment and the non-zero-variance group filter
behind dynamic sampling. Pure tensor functions.
"""

from __future__ import annotations

import torch
from torch import Tensor

from grove.core.segments import broadcast, dense_index, segment_max, segment_min


def soft_overlong_penalty(lengths: Tensor, *, max_length: int, cache_length: int, max_penalty: float = 1.0) -> Tensor:
    """DAPO's length-aware penalty ``R_length(y)`` (their eq. 13), scaled by ``max_penalty``.

    ``0`` while ``|y| <= L_max - L_cache``; ``((L_max - L_cache) - |y|) / L_cache`` inside the cache
    interval (a linear ramp from 0 to -1); ``-1`` beyond ``L_max``. Our ``L_max`` is the generation
    limit, so a completion cut at the limit gets ``-max_penalty``.
    """
    if not 0 < cache_length <= max_length:
        raise ValueError(f"cache_length must be in (0, max_length={max_length}], got {cache_length}")
    expected = max_length - cache_length
    lengths = lengths.to(torch.float32)
    ramp = (expected - lengths) / cache_length
    penalty = torch.where(lengths <= expected, torch.zeros_like(lengths), ramp.clamp(min=-1.0))
    penalty = torch.where(lengths > max_length, torch.full_like(lengths, -1.0), penalty)
    return penalty * max_penalty


def group_reward_spread(scores: Tensor, group_index: Tensor) -> tuple[Tensor, Tensor]:
    """``(spread per group = max - min, dense group id per sample)``."""
    group, num_groups = dense_index(group_index)
    return segment_max(scores, group, num_groups) - segment_min(scores, group, num_groups), group


def informative_groups(scores: Tensor, group_index: Tensor) -> Tensor:
    """``bool [N]``: the sample's group has non-zero reward variance (not all scores equal).

    DAPO's dynamic sampling keeps only these groups: a group whose members all got the same
    reward has zero group-normalised advantage and contributes no policy gradient.
    """
    spread, group = group_reward_spread(scores, group_index)
    return broadcast(spread > 0, group)
