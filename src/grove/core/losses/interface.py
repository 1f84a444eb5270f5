"""The policy-loss interface: one typed input, one typed output, and the helpers every loss shares.

A policy loss is ``fn(inputs: PolicyLossInput, params) -> PolicyLossOutput``. It maps per-token
log-probabilities under the current policy, the behaviour (old) policy's log-probabilities and the
advantages (all ``[N, R]``) — plus whatever optional field it needs — to a per-token loss ``[N, R]``
and named per-token statistics. It does not reduce: reduction over tokens and sequences is the job of
a loss aggregation (:mod:`grove.core.aggregation`), so that micro-batching stays exact.

The update stage fills every field it has for every loss, so a loss that needs the reference
log-probs, the entropy or the trajectory ids reads them from its input: a new loss is one file and
no edit of the update loop. (A loss that needs ``ref_logprobs`` registers ``requires=(Requires.REFERENCE_LOGPROBS,)``
so a reference model is loaded even without a KL term.)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields

import torch
from pydantic import BaseModel
from torch import Tensor

#: The log importance ratio is clamped to this range before ``exp`` so a stale or corrupted
#: log-prob cannot overflow to ``inf`` (``exp(20) ≈ 4.9e8``). Tokens outside the range get no
#: gradient through the ratio; with any sane clip range they are clipped anyway.
LOG_RATIO_CLAMP = 20.0

_PER_TOKEN = ("logprobs", "old_logprobs", "advantages", "loss_mask", "ref_logprobs", "rollout_logprobs", "entropy")
_PER_SAMPLE = ("group_index", "trajectory_index", "step_index")


@dataclass(frozen=True)
class PolicyLossInput:
    """Everything a policy loss may read for one micro-batch: ``[N, R]`` per token, ``[N]`` per sample.

    Always set:

    * ``logprobs``: log-probs of the sampled tokens under the current policy (carry the gradient);
    * ``old_logprobs``: the behaviour policy's (the denominator of the importance ratio; equal to the
      detached ``logprobs`` on-policy, so the ratio is exactly 1);
    * ``advantages``: per-token advantages;
    * ``loss_mask``: the tokens in the loss (after filtering and D^3S token selection).

    Set by the update stage when it has them (``None`` otherwise):

    * ``ref_logprobs``: the reference policy's log-probs (a reference model is loaded when ``kl.coef > 0``
      or the loss registers ``requires=(Requires.REFERENCE_LOGPROBS,)``);
    * ``rollout_logprobs``: the rollout engine's log-probs of the sampled tokens;
    * ``entropy``: the policy's per-token entropy from the training forward (carries the gradient);
    * ``group_index``, ``trajectory_index``, ``step_index``: the batch hierarchy.
    """

    logprobs: Tensor
    old_logprobs: Tensor
    advantages: Tensor
    loss_mask: Tensor
    ref_logprobs: Tensor | None = None
    rollout_logprobs: Tensor | None = None
    entropy: Tensor | None = None
    group_index: Tensor | None = None
    trajectory_index: Tensor | None = None
    step_index: Tensor | None = None

    def __post_init__(self) -> None:
        shape = self.logprobs.shape
        if len(shape) != 2:
            raise ValueError(f"logprobs must be [N, R], got {tuple(shape)}")
        for f in fields(self):
            value = getattr(self, f.name)
            expected = shape if f.name in _PER_TOKEN else shape[:1]
            if value is not None and value.shape != expected:
                kind = "[N, R]" if f.name in _PER_TOKEN else "[N]"
                raise ValueError(f"{f.name} must be {kind} = {tuple(expected)}, got {tuple(value.shape)}")

    @property
    def mask(self) -> Tensor:
        """``loss_mask`` as bool."""
        return self.loss_mask.bool()


@dataclass
class PolicyLossOutput:
    """``token_loss [N, R]`` (zero outside ``loss_mask``) and detached per-token statistics.

    Every ``token_stats`` value is a float ``[N, R]`` tensor (indicators are 0/1), zero outside
    ``loss_mask``, so the trainer can average it over ``loss_mask`` across micro-batches.
    """

    token_loss: Tensor
    token_stats: dict[str, Tensor] = field(default_factory=dict)


#: the signature of a registered policy loss
PolicyLossFn = Callable[[PolicyLossInput, BaseModel], PolicyLossOutput]


def importance_ratio(logprobs: Tensor, old_logprobs: Tensor) -> Tensor:
    """``exp(clamp(logp - old, -20, 20))``: the per-token importance ratio pi_theta / pi_old."""
    return torch.exp((logprobs - old_logprobs).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP))


def masked_token_stats(mask: Tensor, dtype: torch.dtype, **values: Tensor) -> dict[str, Tensor]:
    """Detached float ``[N, R]`` statistics of ``dtype``, zero outside ``mask`` (in the order given)."""
    zero = torch.zeros((), dtype=dtype, device=mask.device)
    return {k: torch.where(mask, v.detach().to(dtype), zero) for k, v in values.items()}


def clip_indicators(values: Tensor, advantages: Tensor, low: float, high: float) -> dict[str, Tensor]:
    """Which clip is *active* per token: ``clip_low`` (``values < low`` and ``A < 0``), ``clip_high``
    (``values > high`` and ``A > 0``) and ``clip`` (either); ``values`` is the (token or sequence) ratio
    with the bounds ``1 ± eps``, or the log ratio with log-space bounds."""
    below = (values < low) & (advantages < 0)
    above = (values > high) & (advantages > 0)
    return {"clip_low": below, "clip_high": above, "clip": below | above}
