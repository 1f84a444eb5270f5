"""Loss aggregations: per-token values ``[N, R]`` → one scalar, exactly micro-batchable.

Every aggregation divides by a *global* :class:`AggregationScale` measured once over the whole
optimizer mini-batch, never by micro-batch-local counts. Each mode is then a sum of per-sequence
terms over one global constant, so summing the aggregates of any split of the mini-batch into
micro-batches (all computed with the same scale) gives exactly the full-batch aggregate, and
gradient accumulation is unbiased whatever the micro-batch size or padding.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from grove.registry import LOSS_AGGREGATIONS

DR_GRPO_PAPER = "Understanding R1-Zero-Like Training: A Critical Perspective"
DAPO_PAPER = "DAPO: An Open-Source LLM Reinforcement Learning System at Scale"
GRPO_PAPER = "DeepSeekMath: Pushing the Limits of Mathematical Reasoning in Open Language Models"


@dataclass(frozen=True)
class AggregationScale:
    """Global normalisers of one optimizer mini-batch.

    * ``num_tokens``: total number of loss tokens (``loss_mask.sum()``), at least 1;
    * ``num_sequences``: number of sequences (rows) in the mini-batch, at least 1. Rows with no loss
      token still count (they contribute 0 to the numerator); this is verl's convention and keeps
      the normaliser independent of which samples happened to be masked out;
    * ``max_response_length``: the constant per-sequence length budget of Dr. GRPO's normaliser
      (the generation limit, not the longest response in the batch).

    Clamping the counts to 1 makes an all-masked mini-batch aggregate to 0 instead of NaN.
    """

    num_tokens: float
    num_sequences: float
    max_response_length: int

    @classmethod
    def from_mask(cls, loss_mask: Tensor, max_response_length: int | None = None) -> AggregationScale:
        """Scale of the mini-batch whose full ``loss_mask [N, R]`` is given.

        ``max_response_length`` defaults to ``R`` (the padded width); pass the generation limit.
        """
        return cls(
            num_tokens=max(float(loss_mask.sum()), 1.0),
            num_sequences=float(max(loss_mask.shape[0], 1)),
            max_response_length=int(
                loss_mask.shape[1] if max_response_length is None else max_response_length
            ),
        )


def _masked(token_values: Tensor, mask: Tensor) -> Tensor:
    """Zero outside ``mask`` (``where``, so NaN/inf in padding cannot leak)."""
    return torch.where(mask.bool(), token_values, torch.zeros_like(token_values))


@LOSS_AGGREGATIONS.register("token_mean", paper=DAPO_PAPER, summary="Sum over all loss tokens / num_tokens.")
def token_mean(token_values: Tensor, mask: Tensor, scale: AggregationScale) -> Tensor:
    """Token-level mean (DAPO, Yu et al. 2025): ``sum_{i,t} m_it x_it / num_tokens``."""
    return _masked(token_values, mask).sum() / scale.num_tokens


@LOSS_AGGREGATIONS.register("seq_mean_token_sum", summary="Per-sequence token sum, averaged over sequences.")
def seq_mean_token_sum(token_values: Tensor, mask: Tensor, scale: AggregationScale) -> Tensor:
    """``sum_i (sum_t m_it x_it) / num_sequences``."""
    return _masked(token_values, mask).sum() / scale.num_sequences


@LOSS_AGGREGATIONS.register(
    "seq_mean_token_mean", paper=GRPO_PAPER, summary="Per-sequence token mean, averaged over sequences."
)
def seq_mean_token_mean(token_values: Tensor, mask: Tensor, scale: AggregationScale) -> Tensor:
    """Original GRPO (Shao et al. 2024): ``sum_i (sum_t m_it x_it / n_i) / num_sequences``.

    ``n_i = sum_t m_it``; sequences with ``n_i = 0`` contribute 0.
    """
    per_seq_sum = _masked(token_values, mask).sum(dim=-1)
    n = mask.to(per_seq_sum.dtype).sum(dim=-1).clamp_min(1.0)
    return (per_seq_sum / n).sum() / scale.num_sequences


@LOSS_AGGREGATIONS.register(
    "seq_mean_token_sum_norm",
    paper=DR_GRPO_PAPER,
    summary="Sum over all loss tokens / (num_sequences * max_response_length).",
)
def seq_mean_token_sum_norm(token_values: Tensor, mask: Tensor, scale: AggregationScale) -> Tensor:
    """Dr. GRPO (Liu et al. 2025): ``sum_{i,t} m_it x_it / (num_sequences * max_response_length)``.

    The constant normaliser removes GRPO's length bias (no per-sequence ``1 / |o_i|``).
    """
    return _masked(token_values, mask).sum() / (scale.num_sequences * scale.max_response_length)


@LOSS_AGGREGATIONS.register(
    "micro_token_mean",
    summary="TRL's 'bnpo': token mean within each micro-batch, micro-batches weighted by their share of sequences.",
)
def micro_token_mean(token_values: Tensor, mask: Tensor, scale: AggregationScale) -> Tensor:
    """TRL ``loss_type="bnpo"``: ``(sum_{i,t} m_it x_it / sum_{i,t} m_it) · N_micro / num_sequences``.

    TRL normalises each (per-device, per-accumulation-step) micro-batch by its *own* token count and
    the Trainer averages the micro-batches. This mode reproduces that: with equal-size micro-batches
    the weight ``N_micro / num_sequences`` is ``1 / accumulation steps``. It is the one mode whose
    value depends on the micro-batch split (two micro-batches with different token counts weight
    their tokens differently); with a single micro-batch it equals ``token_mean``. TRL's ``dapo``
    loss type (normalised by the global active-token count) is ``token_mean``.
    """
    local_tokens = mask.to(token_values.dtype).sum().clamp_min(1.0)
    return _masked(token_values, mask).sum() / local_tokens * mask.shape[0] / scale.num_sequences
