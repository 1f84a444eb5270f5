"""Token-level losses that weight the policy gradient instead of clipping the surrogate.

``cispo`` (clipped, detached IS weight times ``A * logp``), ``sapo`` (a smooth sigmoid gate of
the ratio instead of the hard clip) and ``reinforce`` (plain ``-A * logp``). All are per-token
losses: any aggregation applies; the reference implementations' defaults are noted per loss.
"""

from __future__ import annotations

import torch
from pydantic import BaseModel, ConfigDict, Field

from grove.core import papers
from grove.core.losses.interface import (
    PolicyLossInput,
    PolicyLossOutput,
    importance_ratio,
    masked_token_stats,
)
from grove.core.token_ops import masked
from grove.registry import POLICY_LOSSES, NoParams


class CISPOParams(BaseModel):
    """Parameters of ``cispo``: the IS weight is clipped to ``[1 - clip_low, 1 + clip_high]``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    clip_low: float | None = Field(
        None,
        ge=0,
        le=1,
        description="Weight >= 1 - clip_low; null: no lower bound (MiniMax-M1 imposes none).",
    )
    clip_high: float = Field(
        4.0, ge=0, description="Weight <= 1 + clip_high (default 4: TRL's cap 5.0; verl's default is 0.2)."
    )


@POLICY_LOSSES.register(
    "cispo",
    params=CISPOParams,
    paper=papers.CISPO,
    summary="CISPO: -sg(clip(ratio)) * A * logp; clipped tokens keep their gradient.",
    formula="-sg(clip(r, 1-clip_low, 1+clip_high)) A logp, r = exp(clamp(logp - old, ±20)); clip_low: null = no lower bound",
    reference="verl compute_policy_loss_cispo; TRL loss_type='cispo' (clip_low: null, clip_high = epsilon_high - 1)",
    zero_advantage_rows_skippable=True,
)
def cispo(inputs: PolicyLossInput, params: CISPOParams) -> PolicyLossOutput:
    """CISPO (MiniMax-M1, arXiv:2506.13585), as verl's ``compute_policy_loss_cispo``.

    ``ratio = exp(clamp(logp - old, -20, 20))``; ``w = sg(clip(ratio, 1 - clip_low, 1 + clip_high))``
    (no lower bound when ``clip_low`` is null); ``loss = -w * A * logp``. The gradient is
    ``-w * A * grad(logp)``: clipping bounds the weight but never drops a token's gradient (PPO
    zeroes it). Equals TRL's ``loss_type="cispo"`` (``clamp(ratio, max=epsilon_high)``) with
    ``clip_low: null`` and ``clip_high = epsilon_high - 1``. verl and TRL default to the
    ``token_mean`` aggregation (MiniMax-M1 normalises by the total token count too).

    Statistics: ``ratio``; ``clip_high`` (ratio above ``1 + clip_high``), ``clip_low`` (ratio
    below ``1 - clip_low``), ``clip`` (either: the weight differs from the ratio), whatever the
    sign of ``A`` (the weight is clipped for every token).
    """
    logprobs, mask = inputs.logprobs, inputs.mask
    ratio = importance_ratio(logprobs, inputs.old_logprobs)
    low_bound = None if params.clip_low is None else 1.0 - params.clip_low
    clipped = ratio.clamp(low_bound, 1.0 + params.clip_high)
    token_loss = masked(-clipped.detach() * inputs.advantages * logprobs, mask)

    with torch.no_grad():
        r = ratio.detach()
        high = r > 1.0 + params.clip_high
        low = torch.zeros_like(high) if low_bound is None else r < low_bound
        stats = masked_token_stats(mask, logprobs.dtype, ratio=r, clip_low=low, clip_high=high, clip=low | high)
    return PolicyLossOutput(token_loss=token_loss, token_stats=stats)


class SAPOParams(BaseModel):
    """Parameters of ``sapo``: gate temperatures for positive and non-positive advantages."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tau_pos: float = Field(1.0, gt=0, description="Gate temperature where A > 0 (SAPO paper: 1.0).")
    tau_neg: float = Field(1.05, gt=0, description="Gate temperature where A <= 0 (SAPO paper: 1.05).")


@POLICY_LOSSES.register(
    "sapo",
    params=SAPOParams,
    paper=papers.SAPO,
    summary="SAPO: -(4/tau) sigmoid(tau (ratio - 1)) * A, a soft trust region instead of the hard clip.",
    formula="-(4/tau) sigmoid(tau (r - 1)) A, r = exp(clamp(logp - old, ±20)), tau = tau_pos if A > 0 else tau_neg",
    reference="verl compute_policy_loss_sapo (which always aggregates seq-mean-token-mean); TRL loss_type='sapo'",
    zero_advantage_rows_skippable=True,
)
def sapo(inputs: PolicyLossInput, params: SAPOParams) -> PolicyLossOutput:
    """Soft Adaptive Policy Optimization (Gao et al. 2025, arXiv:2511.20347), as verl's ``sapo``.

    ``ratio = exp(clamp(logp - old, -20, 20))``; ``tau = tau_pos if A > 0 else tau_neg``;
    ``gate = sigmoid(tau * (ratio - 1)) * 4 / tau``; ``loss = -gate * A`` (TRL's
    ``loss_type="sapo"`` is the same gate). The gradient is ``-w * A * ratio * grad(logp)`` with
    ``w = 4 sigmoid(x) (1 - sigmoid(x))``, ``x = tau (ratio - 1)``: ``w = 1`` on-policy (so the
    gradient is the plain ``-A grad(logp)`` there) and it decays smoothly as the ratio leaves 1.
    verl hard-codes ``seq_mean_token_mean`` for SAPO and TRL uses its per-sequence GRPO mean: use
    the ``seq_mean_token_mean`` aggregation to match them.

    Statistics: ``ratio`` and ``gate_weight`` (``w`` above, in ``(0, 1]``).
    """
    logprobs, advantages, mask = inputs.logprobs, inputs.advantages, inputs.mask
    ratio = importance_ratio(logprobs, inputs.old_logprobs)
    tau_pos = torch.as_tensor(params.tau_pos, dtype=advantages.dtype, device=advantages.device)
    tau_neg = torch.as_tensor(params.tau_neg, dtype=advantages.dtype, device=advantages.device)
    taus = torch.where(advantages > 0, tau_pos, tau_neg)
    gates = torch.sigmoid(taus * (ratio - 1.0)) * (4.0 / taus)
    token_loss = masked(-gates * advantages, mask)

    with torch.no_grad():
        r = ratio.detach()
        sig = torch.sigmoid(taus * (r - 1.0))
        stats = masked_token_stats(mask, logprobs.dtype, ratio=r, gate_weight=4.0 * sig * (1.0 - sig))
    return PolicyLossOutput(token_loss=token_loss, token_stats=stats)


@POLICY_LOSSES.register(
    "reinforce",
    params=NoParams,
    paper=f"{papers.REINFORCE}; {papers.GPG}",
    summary="Plain policy gradient -A * logp (verl gpg); no ratio, on-policy only.",
    formula="-A logp",
    reference="verl compute_policy_loss_gpg",
    zero_advantage_rows_skippable=True,
)
def reinforce(inputs: PolicyLossInput, params: NoParams) -> PolicyLossOutput:
    """REINFORCE (Williams 1992) / GPG (Chu et al. 2025): ``loss = -A * logp``, as verl's ``gpg``.

    The gradient is ``-A * grad(logp)``. No importance ratio is applied, so it is only correct
    on-policy (one epoch, one mini-batch); ``old_logprobs`` is used for the ``ratio`` statistic
    only (``exp(clamp(logp - old, -20, 20))``, 1 on-policy). verl defaults to ``token_mean``.
    """
    logprobs, mask = inputs.logprobs, inputs.mask
    token_loss = masked(-logprobs * inputs.advantages, mask)
    with torch.no_grad():
        ratio = importance_ratio(logprobs, inputs.old_logprobs)
        stats = masked_token_stats(mask, logprobs.dtype, ratio=ratio)
    return PolicyLossOutput(token_loss=token_loss, token_stats=stats)
