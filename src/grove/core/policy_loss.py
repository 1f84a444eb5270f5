"""Per-token policy-gradient losses.

A policy loss maps per-token log-probabilities under the current policy, the behaviour (old)
policy's log-probabilities and the advantages (all ``[N, R]``) to a per-token loss ``[N, R]``
plus per-token statistics. It does not reduce: reduction over tokens and sequences is the job of a
loss aggregation (:mod:`grove.core.aggregation`), so that micro-batching stays exact.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from pydantic import BaseModel, ConfigDict, Field, field_validator
from torch import Tensor

from grove.registry import POLICY_LOSSES

#: The log importance ratio is clamped to this range before ``exp`` so a stale or corrupted
#: log-prob cannot overflow to ``inf`` (``exp(20) ≈ 4.9e8``). Tokens outside the range get no
#: gradient through the ratio; with any sane clip range they are clipped anyway.
LOG_RATIO_CLAMP = 20.0


@dataclass
class PolicyLossOutput:
    """``token_loss [N, R]`` (zero outside ``loss_mask``) and detached per-token statistics.

    Every ``token_stats`` value is a float ``[N, R]`` tensor (indicators are 0/1), zero outside
    ``loss_mask``, so the trainer can average it over ``loss_mask`` across micro-batches.
    """

    token_loss: Tensor
    token_stats: dict[str, Tensor] = field(default_factory=dict)


class PPOClipParams(BaseModel):
    """Parameters of ``ppo_clip``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    clip_low: float = Field(0.2, ge=0, lt=1, description="Lower clip range: ratio >= 1 - clip_low.")
    clip_high: float = Field(
        0.2, ge=0, description="Upper clip range: ratio <= 1 + clip_high (DAPO clip-higher: e.g. 0.28)."
    )
    dual_clip_c: float | None = Field(
        None, description="Dual-clip constant c > 1: for A < 0 the loss is capped at -c * A. None: off."
    )

    @field_validator("dual_clip_c")
    @classmethod
    def _c_above_one(cls, c: float | None) -> float | None:
        if c is not None and not c > 1:
            raise ValueError(f"dual_clip_c must be > 1, got {c}")
        return c


def importance_ratio(logprobs: Tensor, old_logprobs: Tensor) -> Tensor:
    """``exp(clamp(logp - old, -20, 20))``: the per-token importance ratio pi_theta / pi_old."""
    return torch.exp((logprobs - old_logprobs).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP))


@POLICY_LOSSES.register(
    "ppo_clip",
    params=PPOClipParams,
    paper=(
        "Proximal Policy Optimization Algorithms; DAPO: An Open-Source LLM Reinforcement Learning "
        "System at Scale (clip-higher); Mastering Complex Control in MOBA Games with Deep RL (dual clip)"
    ),
    summary="PPO clipped surrogate with asymmetric (clip-higher) and optional dual clip.",
)
def ppo_clip(
    logprobs: Tensor, old_logprobs: Tensor, advantages: Tensor, loss_mask: Tensor, params: PPOClipParams
) -> PolicyLossOutput:
    """PPO clipped surrogate (Schulman et al. 2017), per token.

    ``ratio = exp(logp - old)`` (log-ratio clamped to [-20, 20]);
    ``loss = -min(ratio * A, clip(ratio, 1 - clip_low, 1 + clip_high) * A)``. Asymmetric bounds are
    DAPO's clip-higher (Yu et al. 2025). With ``dual_clip_c = c`` the loss of tokens with ``A < 0``
    is further capped, ``loss = min(loss, -c * A)`` (Ye et al. 2020, "Mastering Complex Control in
    MOBA Games with Deep Reinforcement Learning"), bounding the update from huge ratios.

    Statistics (float ``[N, R]``): ``ratio``; ``clip_low`` (ratio < 1 - clip_low and A < 0: the
    lower clip is active), ``clip_high`` (ratio > 1 + clip_high and A > 0), ``clip`` (either),
    ``dual_clip`` (the dual-clip cap is active). On-policy (``logp == old``) the ratio is 1, no
    clip is active and the gradient is ``-A * grad(logp)``.
    """
    mask = loss_mask.bool()
    ratio = importance_ratio(logprobs, old_logprobs)
    clipped_ratio = ratio.clamp(1.0 - params.clip_low, 1.0 + params.clip_high)
    loss = torch.maximum(-ratio * advantages, -clipped_ratio * advantages)
    negative = advantages < 0
    dual = torch.zeros_like(mask)
    if params.dual_clip_c is not None:
        cap = -params.dual_clip_c * advantages
        dual = negative & (loss > cap)
        loss = torch.where(dual, cap, loss)
    token_loss = torch.where(mask, loss, torch.zeros_like(loss))

    with torch.no_grad():
        r = ratio.detach()
        low = (r < 1.0 - params.clip_low) & negative
        high = (r > 1.0 + params.clip_high) & (advantages > 0)
        stats = {"ratio": r, "clip_low": low, "clip_high": high, "clip": low | high, "dual_clip": dual}
        token_stats = {k: torch.where(mask, v.to(r.dtype), torch.zeros_like(r)) for k, v in stats.items()}
    return PolicyLossOutput(token_loss=token_loss, token_stats=token_stats)
