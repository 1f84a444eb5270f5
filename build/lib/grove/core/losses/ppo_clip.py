"""PPO's clipped surrogate, per token, with DAPO's asymmetric (clip-higher) bounds and the dual clip."""

from __future__ import annotations

import torch
from pydantic import BaseModel, ConfigDict, Field, field_validator

from grove.core import papers
from grove.core.losses.interface import (
    PolicyLossInput,
    PolicyLossOutput,
    clip_indicators,
    importance_ratio,
    masked_token_stats,
)
from grove.registry import POLICY_LOSSES


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


@POLICY_LOSSES.register(
    "ppo_clip",
    params=PPOClipParams,
    paper=f"{papers.PPO}; clip-higher: {papers.DAPO}; dual clip: {papers.DUAL_CLIP}",
    summary="PPO clipped surrogate with asymmetric (clip-higher) and optional dual clip.",
    formula="-min(r A, clip(r, 1-clip_low, 1+clip_high) A), r = exp(clamp(logp - old, ±20)); "
    "dual clip caps A<0 losses at -c A",
    reference="verl compute_policy_loss_vanilla (verl's dual clip is always on with c = 3; here off by default)",
    zero_advantage_rows_skippable=True,
)
def ppo_clip(inputs: PolicyLossInput, params: PPOClipParams) -> PolicyLossOutput:
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
    mask, advantages = inputs.mask, inputs.advantages
    ratio = importance_ratio(inputs.logprobs, inputs.old_logprobs)
    clipped_ratio = ratio.clamp(1.0 - params.clip_low, 1.0 + params.clip_high)
    loss = torch.maximum(-ratio * advantages, -clipped_ratio * advantages)
    dual = torch.zeros_like(mask)
    if params.dual_clip_c is not None:
        cap = -params.dual_clip_c * advantages
        dual = (advantages < 0) & (loss > cap)
        loss = torch.where(dual, cap, loss)
    token_loss = torch.where(mask, loss, torch.zeros_like(loss))

    with torch.no_grad():
        r = ratio.detach()
        clips = clip_indicators(r, advantages, 1.0 - params.clip_low, 1.0 + params.clip_high)
        stats = masked_token_stats(mask, r.dtype, ratio=r, **clips, dual_clip=dual)
    return PolicyLossOutput(token_loss=token_loss, token_stats=stats)
