"""Covariance-based token selection: Clip-Cov and KL-Cov.

Cui et al. (2025) show that entropy falls where the covariance between a token's log-probability
and its advantage is large. Both losses centre ``A`` and ``logp`` over the loss tokens of the
tensors they are given, pick a small fraction of high-covariance tokens, and either detach them
(Clip-Cov) or add a ``|logp - old|`` penalty to them (KL-Cov). As in verl, the statistics are
those of the tensors passed in, i.e. of one micro-batch: the selection (unlike the rest of the
loss) depends on how the mini-batch is split. verl's Clip-Cov picks its tokens at random with
torch's global generator; :func:`clip_cov_loss` takes an optional explicit ``generator``.
"""

from __future__ import annotations

import torch
from pydantic import BaseModel, ConfigDict, Field, model_validator
from torch import Tensor

from grove.core import papers
from grove.core.losses.interface import PolicyLossInput, PolicyLossOutput, clip_indicators, masked_token_stats
from grove.registry import POLICY_LOSSES

#: verl's ``masked_mean`` divides by ``mask.sum() + 1e-8``; kept so the selection is verl's.
MASKED_MEAN_EPS = 1e-8


def _masked_mean(values: Tensor, mask: Tensor) -> Tensor:
    """verl's ``masked_mean`` over all elements: ``sum(mask * v) / (sum(mask) + 1e-8)``."""
    zero = torch.zeros((), dtype=values.dtype, device=values.device)
    return torch.where(mask, values, zero).sum() / (mask.to(values.dtype).sum() + MASKED_MEAN_EPS)


class ClipCovParams(BaseModel):
    """Parameters of ``clip_cov``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    clip_low: float = Field(0.2, ge=0, lt=1, description="PPO lower clip range (ratio >= 1 - clip_low).")
    clip_high: float = Field(0.2, ge=0, description="PPO upper clip range (ratio <= 1 + clip_high).")
    clip_cov_ratio: float = Field(
        2e-4, gt=0, le=1, description="Fraction of loss tokens detached (at least one); paper: 2e-4."
    )
    clip_cov_lb: float = Field(1.0, description="Only tokens with covariance > clip_cov_lb are candidates.")
    clip_cov_ub: float = Field(5.0, description="Only tokens with covariance < clip_cov_ub are candidates.")

    @model_validator(mode="after")
    def _bounds_ordered(self) -> ClipCovParams:
        if not self.clip_cov_lb < self.clip_cov_ub:
            raise ValueError(f"clip_cov_lb ({self.clip_cov_lb}) must be < clip_cov_ub ({self.clip_cov_ub})")
        return self


def clip_cov_loss(
    inputs: PolicyLossInput, params: ClipCovParams, *, generator: torch.Generator | None = None
) -> PolicyLossOutput:
    """Clip-Cov (Cui et al. 2025, arXiv:2505.22617), as verl's ``compute_policy_loss_clip_cov``.

    The PPO surrogate ``max(-A r, -A clip(r, 1 - clip_low, 1 + clip_high))`` with
    ``r = exp(logp - old)`` (no ``±20`` clamp, as verl), except that a few tokens get loss (and
    gradient) 0. Candidates are the loss tokens not already PPO-clipped whose covariance
    ``(A - mean(A)) * (logp - mean(logp))`` (masked means over all loss tokens given, the
    ``1e-8``-guarded ``masked_mean`` of verl) lies strictly in ``(clip_cov_lb, clip_cov_ub)``; of
    those, ``max(int(clip_cov_ratio * num_loss_tokens), 1)`` are picked uniformly at random.

    The random choice is verl's: the candidates in row-major order, permuted by
    ``torch.randperm(k, generator=generator)`` (no call when there is none), the first ones kept.
    With ``generator=None`` it draws from torch's global generator exactly as verl does (same seed,
    same tokens); pass a seeded ``torch.Generator`` for a choice independent of global state.

    Statistics: ``ratio``, ``clip_low`` / ``clip_high`` / ``clip`` (PPO clip active, as
    ``ppo_clip``), ``clip_cov`` (the token was detached by the covariance rule).
    """
    logprobs, advantages, mask = inputs.logprobs, inputs.advantages, inputs.mask
    zero = torch.zeros((), dtype=logprobs.dtype, device=logprobs.device)
    ratio = torch.exp(logprobs - inputs.old_logprobs)
    surrogate = -advantages * ratio
    clipped = -advantages * ratio.clamp(1.0 - params.clip_low, 1.0 + params.clip_high)
    ppo_clipped = (clipped > surrogate) & mask

    with torch.no_grad():
        logp = logprobs.detach()
        cov = (advantages - _masked_mean(advantages, mask)) * (logp - _masked_mean(logp, mask))
        candidates = (cov > params.clip_cov_lb) & (cov < params.clip_cov_ub) & mask & ~ppo_clipped
        num_select = max(int(params.clip_cov_ratio * mask.sum().item()), 1)
        index = torch.nonzero(candidates)
        if len(index) > 0:
            device = generator.device if generator is not None else torch.device("cpu")
            perm = torch.randperm(len(index), generator=generator, device=device).to(index.device)
            index = index[perm[: min(num_select, len(index))]]
        selected = torch.zeros_like(mask)
        selected[index[:, 0], index[:, 1]] = True

    loss = torch.where(selected, zero, torch.maximum(surrogate, clipped))
    token_loss = torch.where(mask, loss, zero)

    with torch.no_grad():
        r = ratio.detach()
        clips = clip_indicators(r, advantages, 1.0 - params.clip_low, 1.0 + params.clip_high)
        stats = masked_token_stats(mask, logprobs.dtype, ratio=r, **clips, clip_cov=selected)
    return PolicyLossOutput(token_loss=token_loss, token_stats=stats)


@POLICY_LOSSES.register(
    "clip_cov",
    params=ClipCovParams,
    paper=papers.ENTROPY_MECHANISM,
    summary="Clip-Cov: PPO clip plus detaching a random few high-covariance tokens (verl clip_cov).",
    formula="PPO clip surrogate with r = exp(logp - old), except max(int(ratio · n_tokens), 1) random tokens "
    "among the non-clipped loss tokens with lb < (A - mean A)(logp - mean logp) < ub get loss 0",
    reference="verl compute_policy_loss_clip_cov (same candidates, same torch.randperm draw)",
)
def clip_cov(inputs: PolicyLossInput, params: ClipCovParams) -> PolicyLossOutput:
    """Clip-Cov with torch's global generator (verl's behaviour); see :func:`clip_cov_loss`."""
    return clip_cov_loss(inputs, params)


class KLCovParams(BaseModel):
    """Parameters of ``kl_cov``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kl_cov_ratio: float = Field(
        2e-4, gt=0, le=1, description="Fraction of loss tokens penalised (at least one); paper: 2e-4."
    )
    ppo_kl_coef: float = Field(1.0, ge=0, description="Coefficient of |logp - old| on the selected tokens.")


@POLICY_LOSSES.register(
    "kl_cov",
    params=KLCovParams,
    paper=papers.ENTROPY_MECHANISM,
    summary="KL-Cov: -A r, plus coef * |logp - old| on the top-covariance tokens (verl kl_cov).",
    formula="-A r, r = exp(logp - old), plus ppo_kl_coef · |logp - old| on the top max(1, int(ratio · n_tokens)) "
    "loss tokens by covariance (A - mean A)(logp - mean logp)",
    reference="verl compute_policy_loss_kl_cov",
)
def kl_cov(inputs: PolicyLossInput, params: KLCovParams) -> PolicyLossOutput:
    """KL-Cov (Cui et al. 2025, arXiv:2505.22617), as verl's ``compute_policy_loss_kl_cov``.

    ``loss = -A r`` with ``r = exp(logp - old)`` (no clip and no ``±20`` clamp, as verl), plus
    ``ppo_kl_coef * |logp - old|`` on the ``max(1, int(kl_cov_ratio * num_loss_tokens))`` loss
    tokens of largest covariance ``(A - mean(A)) * (logp - mean(logp))``, the means plain means
    over the loss tokens given. Deterministic: the top-k (``torch.topk``, ties as torch breaks
    them) runs over the loss tokens in row-major order, as verl's.

    Statistics: ``ratio`` and ``kl_cov`` (the token carries the penalty).
    """
    logprobs, advantages, mask = inputs.logprobs, inputs.advantages, inputs.mask
    zero = torch.zeros((), dtype=logprobs.dtype, device=logprobs.device)
    log_ratio = logprobs - inputs.old_logprobs
    ratio = torch.exp(log_ratio)
    surrogate = -advantages * ratio
    penalised = surrogate + params.ppo_kl_coef * log_ratio.abs()

    with torch.no_grad():
        flat_index = torch.nonzero(mask.reshape(-1), as_tuple=True)[0]
        selected = torch.zeros_like(mask)
        if len(flat_index) > 0:
            adv = advantages.detach().reshape(-1)[flat_index]
            logp = logprobs.detach().reshape(-1)[flat_index]
            cov = (adv - adv.mean()) * (logp - logp.mean())
            k = max(1, int(len(cov) * params.kl_cov_ratio))
            top = flat_index[torch.topk(cov, k, largest=True).indices]
            selected.view(-1)[top] = True

    token_loss = torch.where(mask, torch.where(selected, penalised, surrogate), zero)
    with torch.no_grad():
        stats = masked_token_stats(mask, logprobs.dtype, ratio=ratio.detach(), kl_cov=selected)
    return PolicyLossOutput(token_loss=token_loss, token_stats=stats)
