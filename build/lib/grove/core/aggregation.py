"""Loss aggregations (``LOSS_AGGREGATIONS``): per-token values ``[N, R]`` → one scalar, exactly micro-batchable.

An aggregation is ``fn(token_values [N, R], mask [N, R], scale: AggregationScale) -> scalar``. Every
aggregation divides by a *global* :class:`AggregationScale` measured once over the whole optimizer
mini-batch, never by micro-batch-local counts. Each mode is then a sum of per-sequence terms over one
global constant, so summing the aggregates of any split of the mini-batch into micro-batches (all
computed with the same scale) gives exactly the full-batch aggregate, and gradient accumulation is
unbiased whatever the micro-batch size or padding.

Which rows count as sequences (``sequence_count``; ``algorithm.sequence_count`` in the config) matters
only when a row has no loss token at all (DAPO overlong filtering, D^3S batch-scope token selection):

* ``all_rows`` (default): every row of the mini-batch counts, with or without loss tokens. This is
  TRL's ``GRPOTrainer`` (``.mean()`` over rows) and verl 0.9.1's PPO trainer, which passes
  ``global_batch_size = ppo_mini_batch_size × n`` (all rows of the mini-batch) to ``agg_loss``. It keeps
  the normaliser independent of which samples happened to be masked out, and leaves the loss of a
  mini-batch unchanged when an all-masked row is added or removed only up to that constant.
* ``rows_with_loss_tokens``: only rows with at least one loss token count, so a fully masked row is
  treated as absent (the remaining sequences are not diluted). This is verl 0.9.1's ``agg_loss`` called
  on a batch without global batch information (``seq_mask = (loss_mask.sum(-1) > 0)``, divided by
  ``seq_mask.sum()``), counted here over the whole mini-batch so that it stays micro-batch invariant.

The two agree whenever no row is fully masked; ``tests/test_core_aggregation.py`` checks both against hand
values with a fully masked row.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from torch import Tensor

from grove.core import papers
from grove.core.token_ops import masked
from grove.registry import LOSS_AGGREGATIONS

SequenceCount = Literal["all_rows", "rows_with_loss_tokens"]


@dataclass(frozen=True)
class AggregationScale:
    """Global normalisers of one optimizer mini-batch.

    * ``num_tokens``: total number of loss tokens (``loss_mask.sum()``), at least 1;
    * ``num_sequences``: number of sequences in the mini-batch, at least 1: all rows
      (``count_empty_rows``, the default) or only rows with at least one loss token (see the module
      docstring, ``sequence_count``);
    * ``max_response_length``: the constant per-sequence length budget of Dr. GRPO's normaliser
      (the generation limit, not the longest response in the batch);
    * ``count_empty_rows``: whether rows without loss tokens count as sequences, here and in
      :meth:`rows` (the local count ``micro_token_mean`` weights a micro-batch by).

    Clamping the counts to 1 makes an all-masked mini-batch aggregate to 0 instead of NaN.
    """

    num_tokens: float
    num_sequences: float
    max_response_length: int
    count_empty_rows: bool = True

    @classmethod
    def from_mask(
        cls, loss_mask: Tensor, max_response_length: int | None = None, *, sequence_count: SequenceCount = "all_rows"
    ) -> AggregationScale:
        """Scale of the mini-batch whose full ``loss_mask [N, R]`` is given.

        ``max_response_length`` defaults to ``R`` (the padded width); pass the generation limit.
        """
        if sequence_count not in ("all_rows", "rows_with_loss_tokens"):
            raise ValueError(f"sequence_count must be 'all_rows' or 'rows_with_loss_tokens', got {sequence_count!r}")
        count_empty_rows = sequence_count == "all_rows"
        return cls(
            num_tokens=max(float(loss_mask.sum()), 1.0),
            num_sequences=max(_count_rows(loss_mask, count_empty_rows), 1.0),
            max_response_length=int(
                loss_mask.shape[1] if max_response_length is None else max_response_length
            ),
            count_empty_rows=count_empty_rows,
        )

    def rows(self, mask: Tensor) -> float:
        """The number of sequences among the rows of ``mask``, counted as ``num_sequences`` counts them."""
        return _count_rows(mask, self.count_empty_rows)


def _count_rows(mask: Tensor, count_empty_rows: bool) -> float:
    """Rows of ``mask [N, R]``: all of them, or those with at least one set token."""
    return float(mask.shape[0]) if count_empty_rows else float((mask != 0).any(dim=-1).sum())


@LOSS_AGGREGATIONS.register(
    "token_mean",
    paper=papers.DAPO,
    summary="Sum over all loss tokens / num_tokens.",
    formula="sum_{i,t} m x / sum m (mini-batch token count)",
    reference="verl agg_loss token-mean; TRL loss_type='dapo'",
    zero_advantage_rows_skippable=True,
)
def token_mean(token_values: Tensor, mask: Tensor, scale: AggregationScale) -> Tensor:
    """Token-level mean (DAPO, Yu et al. 2025): ``sum_{i,t} m_it x_it / num_tokens``."""
    return masked(token_values, mask).sum() / scale.num_tokens


@LOSS_AGGREGATIONS.register(
    "seq_mean_token_sum",
    summary="Per-sequence token sum, averaged over sequences.",
    formula="(1/N) sum_{i,t} m x",
    reference="verl agg_loss seq-mean-token-sum",
    zero_advantage_rows_skippable=True,
)
def seq_mean_token_sum(token_values: Tensor, mask: Tensor, scale: AggregationScale) -> Tensor:
    """``sum_i (sum_t m_it x_it) / num_sequences``."""
    return masked(token_values, mask).sum() / scale.num_sequences


@LOSS_AGGREGATIONS.register(
    "seq_mean_token_mean",
    paper=papers.GRPO,
    summary="Per-sequence token mean, averaged over sequences.",
    formula="(1/N) sum_i (sum_t m x / n_i)",
    reference="verl agg_loss seq-mean-token-mean; TRL loss_type='grpo'",
    zero_advantage_rows_skippable=True,
)
def seq_mean_token_mean(token_values: Tensor, mask: Tensor, scale: AggregationScale) -> Tensor:
    """Original GRPO (Shao et al. 2024): ``sum_i (sum_t m_it x_it / n_i) / num_sequences``.

    ``n_i = sum_t m_it``; sequences with ``n_i = 0`` contribute 0.
    """
    per_seq_sum = masked(token_values, mask).sum(dim=-1)
    n = mask.to(per_seq_sum.dtype).sum(dim=-1).clamp_min(1.0)
    return (per_seq_sum / n).sum() / scale.num_sequences


@LOSS_AGGREGATIONS.register(
    "seq_mean_token_sum_norm",
    paper=papers.DR_GRPO,
    summary="Sum over all loss tokens / (num_sequences * max_response_length).",
    formula="sum_{i,t} m x / (N · L_max), L_max = rollout.max_new_tokens",
    reference="verl agg_loss seq-mean-token-sum-norm; TRL loss_type='dr_grpo'",
    zero_advantage_rows_skippable=True,
)
def seq_mean_token_sum_norm(token_values: Tensor, mask: Tensor, scale: AggregationScale) -> Tensor:
    """Dr. GRPO (Liu et al. 2025): ``sum_{i,t} m_it x_it / (num_sequences * max_response_length)``.

    The constant normaliser removes GRPO's length bias (no per-sequence ``1 / |o_i|``).
    """
    return masked(token_values, mask).sum() / (scale.num_sequences * scale.max_response_length)


@LOSS_AGGREGATIONS.register(
    "micro_token_mean",
    summary="TRL's 'bnpo': token mean within each micro-batch, micro-batches weighted by their share of sequences.",
    formula="(sum m x / sum m)_micro · N_micro / N",
    reference="TRL loss_type='bnpo'",
)
def micro_token_mean(token_values: Tensor, mask: Tensor, scale: AggregationScale) -> Tensor:
    """TRL ``loss_type="bnpo"``: ``(sum_{i,t} m_it x_it / sum_{i,t} m_it) · N_micro / num_sequences``.

    TRL normalises each (per-device, per-accumulation-step) micro-batch by its *own* token count and
    the Trainer averages the micro-batches. This mode reproduces that: with equal-size micro-batches
    the weight ``N_micro / num_sequences`` is ``1 / accumulation steps``. It is the one mode whose
    value depends on the micro-batch split (two micro-batches with different token counts weight
    their tokens differently); with a single micro-batch it equals ``token_mean``. TRL's ``dapo``
    loss type (normalised by the global active-token count) is ``token_mean``. ``N_micro`` counts rows
    as ``num_sequences`` does (:meth:`AggregationScale.rows`).
    """
    local_tokens = mask.to(token_values.dtype).sum().clamp_min(1.0)
    return masked(token_values, mask).sum() / local_tokens * scale.rows(mask) / scale.num_sequences
