"""Importance weights for the rollout-vs-training mismatch: truncated (TIS) and masked (MIS).

The rollout engine samples with ``pi_rollout`` (e.g. vLLM, bf16 kernels) while the loss assumes
samples from the trainer's own ``pi_old``; the per-token log ratio
``log rho = train_old_logprobs - rollout_logprobs`` measures the mismatch. Multiplying each
token's policy loss by a *detached* weight ``w`` built from ``rho`` corrects (TIS) or filters
(MIS) the off-policy samples:

* ``level="token"``: ``rho_t = exp(log rho_t)`` per token (biased, low variance);
* ``level="sequence"``: ``rho_i = exp(sum_t log rho_t)`` over the sequence's loss tokens (the
  product of the token ratios, not their geometric mean), broadcast to its tokens (unbiased, high
  variance).

The log ratio (token, or summed per sequence) is clamped to ``[-20, 20]`` before ``exp`` and
weights are 0 outside ``mask``: verl's ``rollout_corr_helper.compute_rollout_correction_weights``
exactly. TRL's ``vllm_importance_sampling_correction`` modes ``token_truncate`` /
``sequence_truncate`` are :func:`truncated_is_weights` and ``token_mask`` / ``sequence_mask`` are
:func:`masked_is_weights` (TRL applies no ``±20`` clamp, which only matters for
``|log rho| > 20``, and leaves weight 1 rather than 0 on padding, which its loss masks anyway).

References: Yao et al. (2025), "Your Efficient RL Framework Secretly Brings You Off-Policy RL
Training" (TIS); Liu et al. (2025), "When Speed Kills Stability: Demystifying RL Collapse from the
Training-Inference Mismatch" (token/sequence TIS and MIS); the two-sided mask is verl's IcePop
option (Ling Team, 2025, "Every Step Evolves: Scaling Reinforcement Learning for Trillion-Scale
Thinking Model").
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor

from grove.core.losses.interface import LOG_RATIO_CLAMP
from grove.core.token_ops import masked, per_token

Level = Literal["token", "sequence"]


def rollout_log_ratio(
    train_old_logprobs: Tensor, rollout_logprobs: Tensor, mask: Tensor, *, level: Level
) -> Tensor:
    """``[N, R]`` log ratio ``log(pi_old / pi_rollout)``, 0 outside ``mask``, clamped to ``[-20, 20]``.

    ``level="sequence"`` puts the sequence's sum over its loss tokens on each of its tokens.
    """
    if level not in ("token", "sequence"):
        raise ValueError(f"level must be 'token' or 'sequence', got {level!r}")
    log_ratio = masked(train_old_logprobs - rollout_logprobs, mask)
    if level == "sequence":
        log_ratio = per_token(log_ratio.sum(dim=-1), mask)
    return masked(log_ratio.clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP), mask)


def _raw_weights(train_old_logprobs: Tensor, rollout_logprobs: Tensor, mask: Tensor, level: Level) -> Tensor:
    log_ratio = rollout_log_ratio(train_old_logprobs, rollout_logprobs, mask, level=level)
    return masked(torch.exp(log_ratio), mask)


def truncated_is_weights(
    train_old_logprobs: Tensor, rollout_logprobs: Tensor, mask: Tensor, *, level: Level, cap: float
) -> Tensor:
    """Truncated importance sampling (TIS): ``w = min(rho, cap)``, detached, 0 outside ``mask``.

    verl ``rollout_is: token|sequence`` with a numeric ``rollout_is_threshold = cap``; TRL
    ``vllm_importance_sampling_mode: token_truncate|sequence_truncate`` with
    ``vllm_importance_sampling_cap = cap``. Weights below 1 are kept as they are.
    """
    if not cap > 0:
        raise ValueError(f"cap must be > 0, got {cap}")
    with torch.no_grad():
        weights = _raw_weights(train_old_logprobs.detach(), rollout_logprobs.detach(), mask, level)
        return weights.clamp(max=cap)


def masked_is_weights(
    train_old_logprobs: Tensor,
    rollout_logprobs: Tensor,
    mask: Tensor,
    *,
    level: Level,
    threshold: float,
    lower_threshold: float | None = None,
) -> Tensor:
    """Masked importance sampling (MIS): ``w = rho`` if ``rho <= threshold`` else 0, detached.

    With ``lower_threshold`` the kept band is ``lower_threshold <= rho <= threshold`` (verl's
    ``rollout_is_threshold: "lower_upper"``, IcePop). Outside ``mask`` the weight is 0. Without it,
    TRL's ``token_mask|sequence_mask`` with ``vllm_importance_sampling_cap = threshold``.
    """
    if not threshold > 0:
        raise ValueError(f"threshold must be > 0, got {threshold}")
    if lower_threshold is not None and not 0 < lower_threshold <= threshold:
        raise ValueError(f"lower_threshold must be in (0, threshold], got {lower_threshold}")
    with torch.no_grad():
        weights = _raw_weights(train_old_logprobs.detach(), rollout_logprobs.detach(), mask, level)
        keep = weights <= threshold
        if lower_threshold is not None:
            keep &= weights >= lower_threshold
        return torch.where(keep, weights, torch.zeros_like(weights))
