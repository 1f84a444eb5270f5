"""Sequence-level policy losses: GSPO and GMPO.

Both compute one importance ratio per *sequence*. A policy loss returns per-token losses and the
trainer aggregates them (:mod:`grove.core.aggregation`), so the per-sequence objective is spread
over the sequence's loss tokens: every loss token of sequence ``i`` carries a loss whose
``seq_mean_token_mean`` aggregate is the paper's objective ``(1 / G) sum_i L_i``. The papers average
per sequence, so the presets pair both losses with ``seq_mean_token_mean``; other aggregations weight
sequence ``i`` by its length ``n_i`` (``token_mean``: ``sum_i n_i L_i / sum_i n_i``), a different
objective. verl 0.9.1 applies whatever aggregation it is configured with to GSPO (its default is
``token-mean``), and ignores the aggregation for GMPO (``geo_mean``: a plain mean of ``L_i`` over rows).
"""

from __future__ import annotations

import torch
from pydantic import BaseModel, ConfigDict, Field

from grove.core import papers
from grove.core.losses.interface import PolicyLossInput, PolicyLossOutput, clip_indicators, masked_token_stats
from grove.core.token_ops import masked, per_token
from grove.registry import POLICY_LOSSES

#: verl clamps GSPO's per-token log ratio (value: the sequence log ratio) to at most 10 before ``exp``.
GSPO_LOG_RATIO_MAX = 10.0
#: verl divides GMPO's sequence sums by ``n_i + 1e-8``; kept so the numbers are verl's bit for bit.
GMPO_EPS = 1e-8


class GSPOParams(BaseModel):
    """Parameters of ``gspo``. The clip range applies to the *sequence* ratio, hence tiny."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    clip_low: float = Field(
        3e-4, ge=0, lt=1, description="Sequence ratio >= 1 - clip_low (GSPO paper: 3e-4)."
    )
    clip_high: float = Field(4e-4, ge=0, description="Sequence ratio <= 1 + clip_high (GSPO paper: 4e-4).")


@POLICY_LOSSES.register(
    "gspo",
    params=GSPOParams,
    paper=papers.GSPO,
    summary="GSPO: PPO clip on the length-normalised sequence ratio (token form, verl's stop-gradients).",
    formula="s_i = exp(mean_t (logp - old)) over loss tokens; log s_it = logp - sg(logp) + sg(log s_i), clamped "
    "<= 10; max(-A s_it, -A clip(s_it, 1-clip_low, 1+clip_high))",
    reference="verl compute_policy_loss_gspo (GSPO-token form); TRL importance_sampling_level='sequence_token' "
    "up to the <= 10 clamp",
    zero_advantage_rows_skippable=True,
)
def gspo(inputs: PolicyLossInput, params: GSPOParams) -> PolicyLossOutput:
    """Group Sequence Policy Optimization (Zheng et al. 2025, arXiv:2507.18071), GSPO-token form.

    ``s_i = exp(mean_t(logp - old))`` over the loss tokens of sequence ``i`` (``n_i`` clamped to
    at least 1). Per token, as verl's ``compute_policy_loss_gspo``:
    ``log s_it = logp_it - sg(logp_it) + sg(log s_i)``, clamped to ``<= 10``, ``s_it = exp(log s_it)``
    (value ``s_i``, gradient ``s_i * grad(logp_it)``) and
    ``loss_it = max(-A_it s_it, -A_it clip(s_it, 1 - clip_low, 1 + clip_high))``.

    With a sequence-level advantage and ``seq_mean_token_mean`` this is exactly GSPO's
    ``-(1/G) sum_i min(s_i A_i, clip(s_i) A_i)`` with gradient ``s_i A_i * mean_t grad(logp_it)``
    (the ``gspo`` preset sets that aggregation; verl 0.9.1 uses the configured one, ``token-mean`` by
    default, as any other aggregation here does). The clip
    range is on the sequence ratio, which stays very close to 1: the paper uses ``3e-4 / 4e-4``,
    two orders below token-level PPO's ``0.2``. No ``±20`` clamp of the token log ratio (as verl).

    Statistics: ``ratio`` (``s_i`` on each token), ``clip_low`` (``s_i < 1 - clip_low`` and
    ``A < 0``), ``clip_high`` (``s_i > 1 + clip_high`` and ``A > 0``), ``clip`` (either).
    """
    logprobs, advantages, mask = inputs.logprobs, inputs.advantages, inputs.mask
    log_ratio = masked(logprobs - inputs.old_logprobs, mask)
    lengths = mask.sum(dim=-1).clamp(min=1)
    seq_log_ratio = log_ratio.sum(dim=-1) / lengths
    # value: the sequence log ratio; gradient: that of logp_it alone (verl's order of operations)
    token_log_ratio = logprobs - logprobs.detach() + seq_log_ratio.detach().unsqueeze(-1)
    ratio = torch.exp(token_log_ratio.clamp(max=GSPO_LOG_RATIO_MAX))
    clipped = ratio.clamp(1.0 - params.clip_low, 1.0 + params.clip_high)
    token_loss = masked(torch.maximum(-advantages * ratio, -advantages * clipped), mask)

    with torch.no_grad():
        r = ratio.detach()
        clips = clip_indicators(r, advantages, 1.0 - params.clip_low, 1.0 + params.clip_high)
        stats = masked_token_stats(mask, logprobs.dtype, ratio=r, **clips)
    return PolicyLossOutput(token_loss=token_loss, token_stats=stats)


class GMPOParams(BaseModel):
    """Parameters of ``gmpo``. The clip range is in *log* space (ratio in ``[e^-low, e^high]``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    clip_low: float = Field(0.4, ge=0, description="Token log ratio >= -clip_low (GMPO paper: 0.4).")
    clip_high: float = Field(0.4, ge=0, description="Token log ratio <= clip_high (GMPO paper: 0.4).")


@POLICY_LOSSES.register(
    "gmpo",
    params=GMPOParams,
    paper=papers.GMPO,
    summary="GMPO: geometric mean of token ratios, token-level clipping in log space (verl geo_mean).",
    formula="l'_t = sgn(A) min(sgn(A) l_t, sgn(A) clamp(l_t, -clip_low, clip_high)), l = logp - old; "
    "r_i = exp(sum_t l'_t / (n_i + 1e-8)), Abar_i = sum_t A / (n_i + 1e-8), L_i = -Abar_i r_i on each loss token",
    reference="verl compute_policy_loss_geo_mean (which ignores the aggregation and takes mean_i L_i)",
    zero_advantage_rows_skippable=True,
)
def gmpo(inputs: PolicyLossInput, params: GMPOParams) -> PolicyLossOutput:
    """Geometric-Mean Policy Optimization (Zhao et al. 2025, arXiv:2507.20673), as verl's ``geo_mean``.

    Per token ``l_t = logp - old`` (no ``±20`` clamp, as verl), clipped in log space in the
    direction that matters for the sign of ``A``:
    ``l'_t = sgn(A_t) * min(sgn(A_t) l_t, sgn(A_t) clamp(l_t, -clip_low, clip_high))``.
    Per sequence ``r_i = exp(sum_t l'_t / (n_i + 1e-8))`` (the geometric mean of the clipped
    token ratios), ``Abar_i = sum_t A_t / (n_i + 1e-8)`` and ``L_i = -Abar_i * r_i``; verl's loss is
    ``mean_i L_i`` over all rows.

    Every loss token of sequence ``i`` carries ``L_i``; with ``seq_mean_token_mean`` the trainer's
    aggregate is ``sum_i L_i / num_sequences`` = verl's value and gradient. The paper's clip range
    is ``(e^-0.4, e^0.4)``, i.e. ``clip_low = clip_high = 0.4`` here (verl reads its
    ``clip_ratio_low/high`` as these log-space bounds too).

    Statistics: ``ratio`` (``r_i`` on each token), ``clip_high`` (``l_t > clip_high`` and
    ``A > 0``: the clip is active), ``clip_low`` (``l_t < -clip_low`` and ``A < 0``), ``clip``
    (either). verl's clip fractions count ``l_t`` outside the range whatever the side; ours count
    only the active side, as ``ppo_clip`` does.
    """
    logprobs, advantages, mask = inputs.logprobs, inputs.advantages, inputs.mask
    dtype = logprobs.dtype
    log_ratio = logprobs - inputs.old_logprobs
    sign = torch.sign(advantages)
    clamped = log_ratio.clamp(-params.clip_low, params.clip_high)
    clipped_log_ratio = sign * torch.minimum(sign * log_ratio, sign * clamped)

    denom = mask.to(dtype).sum(dim=-1) + GMPO_EPS
    seq_ratio = torch.exp(masked(clipped_log_ratio, mask).sum(dim=-1) / denom)
    seq_advantage = masked(advantages.to(dtype), mask).sum(dim=-1) / denom
    token_loss = per_token(-seq_advantage * seq_ratio, mask)

    with torch.no_grad():
        clips = clip_indicators(log_ratio, advantages, -params.clip_low, params.clip_high)
        stats = masked_token_stats(mask, dtype, ratio=per_token(seq_ratio.detach(), mask), **clips)
    return PolicyLossOutput(token_loss=token_loss, token_stats=stats)
