"""Dual-level down-sampling of rollouts and tokens: the tensor core of D^3S ("Learning More with
Less: A Dynamic Dual-Level Down-Sampling Framework for Efficient Policy Optimization", 2025).

* **Sample level.** Keep the subset of rollouts whose advantages have the largest variance
  ``Var(A)`` (per prompt group, or over the whole batch). The paper shows ``Var(A)`` of the kept
  set is positively correlated with an upper bound on the policy-gradient norm.
  :func:`max_variance_subset` solves this *exactly* with a sort and prefix sums, using the lemma
  that a fixed-size subset of maximum variance always consists of the ``j`` smallest and the
  ``m - j`` largest values for some ``j`` (proof in ``docs/algorithms-selection.md``; PODS, "Not
  All Rollouts are Useful: Down-Sampling Rollouts in LLM Reinforcement Learning", Xu et al. 2025,
  uses the same structure for max-variance down-sampling of rewards).
* **Token level.** Keep the tokens with the largest ``|A_{i,t}| * H_{i,t}`` (advantage magnitude
  times policy entropy): :func:`token_scores` and :func:`select_tokens`.

How many to keep comes from a keep ratio (``grove.core.keep_ratio_schedules``: D^3S's dynamic schedule starts
aggressive and relaxes). All functions are pure, vectorised over groups and sequences (sorts,
gathers, scatters; no per-sample Python loop), deterministic, and return masks.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor

from grove.core.keep_ratio_schedules import check_keep_ratio
from grove.core.segments import dense_index, segment_count

__all__ = [
    "keep_count",
    "max_variance_subset",
    "select_samples",
    "select_tokens",
    "token_scores",
]

SampleScope = Literal["group", "batch"]
TokenScope = Literal["sequence", "batch"]

# ``ratio * size`` is rounded up, but float products such as 0.3 * 10 = 3.0000000000000004 must not
# become 4: anything within this of an integer counts as that integer.
_CEIL_SLACK = 1e-9


def keep_count(size: Tensor, ratio: float, minimum: int = 2) -> Tensor:
    """How many of ``size`` items to keep at keep ratio ``ratio``: ``LongTensor`` shaped like ``size``.

    ``m = clamp(ceil(ratio * size), min(minimum, size), size)``.

    * ``ceil`` (not ``round``/``floor``) so that a positive ratio never empties a non-empty set
      and the kept fraction is never below ``ratio``; products within ``1e-9`` of an integer are
      taken as that integer (``0.3 * 10`` keeps 3, not 4).
    * ``minimum = 2`` is the default for samples: the variance of one value is 0, and a
      one-sample group has zero group-relative advantage, so keeping fewer than two rollouts of a
      group throws its signal away. Groups smaller than ``minimum`` keep everything. Tokens use
      ``minimum = 1`` (:func:`select_tokens`).
    """
    check_keep_ratio(ratio)
    if minimum < 0:
        raise ValueError(f"minimum must be >= 0, got {minimum}")
    size = torch.as_tensor(size).to(torch.long)
    if (size < 0).any():
        raise ValueError("size must be >= 0")
    m = torch.ceil(size.to(torch.float64) * ratio - _CEIL_SLACK).to(torch.long)
    return torch.minimum(torch.maximum(m, size.clamp(max=minimum)), size)


def _stable_group_sort(values: Tensor, group: Tensor) -> Tensor:
    """Permutation sorting by ``(group, value)``, ties kept in index order (two stable sorts)."""
    by_value = torch.sort(values, stable=True).indices
    by_group = torch.sort(group[by_value], stable=True).indices
    return by_value[by_group]


def _checked_groups(values: Tensor, group_index: Tensor | None) -> tuple[Tensor, int, Tensor]:
    """Dense group ids of ``values`` (one group when ``group_index`` is ``None``), their count, and the values in
    float64; errors for a shape that is not ``[N]``, mismatched ids or non-finite values."""
    if values.ndim != 1:
        raise ValueError(f"values must be [N], got shape {tuple(values.shape)}")
    if group_index is None:
        group, num_groups = torch.zeros(values.numel(), dtype=torch.long, device=values.device), 1
    else:
        if group_index.shape != values.shape:
            raise ValueError(f"group_index {tuple(group_index.shape)} must match values {tuple(values.shape)}")
        group, num_groups = dense_index(group_index)
    x = values.detach().to(torch.float64)
    if not torch.isfinite(x).all():
        raise ValueError("values must be finite (no NaN or inf)")
    return group, num_groups, x


def _keep_per_group(keep: int | Tensor, num_groups: int, size: Tensor, device: torch.device) -> Tensor:
    """``keep`` as one count per group, clipped to the group's size; errors for a wrong shape or a negative count."""
    m = torch.as_tensor(keep, device=device).to(torch.long)
    if m.ndim == 0:
        m = m.expand(num_groups)
    if m.shape != (num_groups,):
        raise ValueError(f"keep must be an int or a tensor of shape ({num_groups},), got {tuple(m.shape)}")
    if (m < 0).any():
        raise ValueError("keep must be >= 0")
    return torch.minimum(m, size)


def max_variance_subset(values: Tensor, group_index: Tensor | None, keep: int | Tensor) -> Tensor:
    """``bool [N]``: per group, the ``m`` members whose values have the largest (population) variance.

    D^3S's sample-level selection maximises ``Var(A)`` of the kept rollouts' advantages. Solved
    exactly: for a fixed size ``m`` an optimal subset is the ``j`` smallest plus the ``m - j``
    largest values of the group for some ``j in 0..m`` (the "extremes" lemma, proved in
    ``docs/algorithms-selection.md``). So values are sorted within groups (one stable sort by
    ``(group, value)``), the sums ``S`` and ``Q`` of ``x`` and ``x^2`` over every such candidate
    are read from prefix sums, and the ``j`` maximising ``m^2 Var = m Q - S^2`` is taken. Cost:
    ``O(N log N)`` for the sort plus ``O(S * (max m + 1))`` for the candidates.

    * ``group_index``: arbitrary segment ids ``[N]`` (groups may differ in size), or ``None`` to
      treat all ``N`` values as one group (batch-wide selection).
    * ``keep``: ``m``, an ``int`` for every group or a ``LongTensor[S]`` per group in dense-id order
      (ascending group id, as :func:`grove.core.segments.dense_index`); clipped to ``[0, size]``.
      A group with ``size <= m`` keeps everything; ``m = 0`` keeps nothing.
    * Determinism: computed in float64 on values shifted by a member of their group (exact for
      small integer-valued inputs such as binary rewards); among equally good ``j`` the smallest
      wins, and among equal values the lower index counts as smaller (stable sort), so the same
      input always gives the same mask. With float inputs "equally good" is up to rounding.

    Raises ``ValueError`` on non-finite values, a negative ``keep`` or mismatched shapes.
    """
    n = values.numel()
    device = values.device
    group, num_groups, x = _checked_groups(values, group_index)
    if n == 0:
        return torch.zeros(0, dtype=torch.bool, device=device)
    size = segment_count(group, num_groups)  # [S]
    m = _keep_per_group(keep, num_groups, size, device)

    order = _stable_group_sort(x, group)
    sorted_x, sorted_group = x[order], group[order]
    start = torch.cumsum(size, 0) - size  # first sorted position of each group
    position = torch.arange(n, device=device) - start[sorted_group]  # rank within the group

    # Variance is shift-invariant: shift each group by its middle element to keep sums small
    # (and integers integral), then prefix sums with a leading 0: P[k] = sum of the first k.
    middle = sorted_x[start + (size - 1).clamp(min=0) // 2]
    shifted = sorted_x - middle[sorted_group]
    zero = shifted.new_zeros(1)
    prefix = torch.cat([zero, torch.cumsum(shifted, 0)])
    prefix_sq = torch.cat([zero, torch.cumsum(shifted * shifted, 0)])

    # Candidates j = 0..max(m): the j smallest (sorted positions [0, j)) and the m - j largest
    # (positions [n - m + j, n)). j > m is invalid (masked below); clamping keeps gathers in range.
    j = torch.arange(int(m.max()) + 1, device=device)[None, :]  # [1, J]
    low_end = start[:, None] + torch.minimum(j, m[:, None])  # [S, J]
    high_start = start[:, None] + (size - m)[:, None] + torch.minimum(j, m[:, None])
    group_end = (start + size)[:, None]

    def subset_sum(p: Tensor) -> Tensor:
        return (p[low_end] - p[start][:, None]) + (p[group_end] - p[high_start])

    s, q = subset_sum(prefix), subset_sum(prefix_sq)
    score = m[:, None].to(torch.float64) * q - s * s  # m^2 * population variance
    score = score.masked_fill(j > m[:, None], float("-inf"))
    best = score.argmax(dim=1)  # first maximum: the smallest j on ties

    keep_low = best[sorted_group]
    keep_high_from = (size - m + best)[sorted_group]
    kept_sorted = (position < keep_low) | (position >= keep_high_from)
    mask = torch.empty(n, dtype=torch.bool, device=device)
    mask[order] = kept_sorted
    return mask


def select_samples(
    advantages_per_sample: Tensor,
    group_index: Tensor,
    ratio: float,
    *,
    scope: SampleScope = "group",
    minimum: int = 2,
) -> Tensor:
    """``bool [N]``: D^3S sample-level down-sampling at keep ratio ``ratio``.

    Keeps the maximum-``Var(A)`` subset of the sequence advantages ``[N]`` (for outcome
    advantages, any response token's value, e.g. ``advantages[:, 0]``):

    * ``scope="group"``: ``m_g = keep_count(n_g, ratio, minimum)`` rollouts of every prompt group
      (GRPO advantages are group-relative, so each prompt keeps its own most informative spread);
    * ``scope="batch"``: ``m = keep_count(N, ratio, minimum)`` rollouts over the whole batch,
      ignoring groups ("across groups"): groups may lose all or all but one member.
    """
    if advantages_per_sample.ndim != 1 or group_index.shape != advantages_per_sample.shape:
        raise ValueError(
            f"advantages_per_sample {tuple(advantages_per_sample.shape)} and group_index "
            f"{tuple(group_index.shape)} must both be [N]"
        )
    if scope == "group":
        group, num_groups = dense_index(group_index)
        m = keep_count(segment_count(group, num_groups), ratio, minimum)
        return max_variance_subset(advantages_per_sample, group_index, m)
    if scope == "batch":
        n = torch.tensor(advantages_per_sample.numel())
        return max_variance_subset(advantages_per_sample, None, keep_count(n, ratio, minimum))
    raise ValueError(f"scope must be 'group' or 'batch', got {scope!r}")


def token_scores(advantages: Tensor, entropy: Tensor) -> Tensor:
    """D^3S token priority ``|A_{i,t}| * H_{i,t}`` ``[N, R]``, detached (a selection key, not a loss).

    ``H_{i,t}`` is the policy entropy at the token (e.g. from
    :func:`grove.kernels.output_projection.token_logprobs_and_entropy`): tokens where the policy is both
    uncertain and carries a large advantage come first.
    """
    if advantages.shape != entropy.shape:
        raise ValueError(f"advantages {tuple(advantages.shape)} and entropy {tuple(entropy.shape)} differ")
    return advantages.detach().abs() * entropy.detach()


def _descending_rank(scores: Tensor, valid: Tensor) -> Tensor:
    """Rank of each entry along the last dim: valid entries by score descending, ties by position,
    then all invalid entries (two stable sorts, so invalid entries never outrank valid ones even at
    ``-inf``)."""
    by_score = torch.sort(scores, dim=-1, descending=True, stable=True).indices
    by_valid = torch.sort((~valid).gather(-1, by_score).to(torch.uint8), dim=-1, stable=True).indices
    order = by_score.gather(-1, by_valid)
    ranks = torch.arange(scores.shape[-1], device=scores.device).expand_as(order)
    return torch.empty_like(order).scatter_(-1, order, ranks)


def select_tokens(scores: Tensor, mask: Tensor, ratio: float, *, scope: TokenScope = "sequence") -> Tensor:
    """D^3S token-level down-sampling: a sub-mask of ``mask`` ``[N, R]`` (same dtype as ``mask``).

    Keeps the tokens with the largest ``scores`` (:func:`token_scores`) among the tokens where
    ``mask != 0``:

    * ``scope="sequence"``: the top ``k_i = keep_count(n_i, ratio, minimum=1)`` of each sequence's
      ``n_i`` mask tokens (``ceil``, so every non-empty sequence keeps at least one token);
    * ``scope="batch"``: the top ``keep_count(total, ratio, minimum=1)`` over all mask tokens.

    Exactly ``k`` tokens are kept; equal scores are broken by position (row-major for the batch
    scope: earlier sequence, then earlier token). Masked-out tokens are never selected.
    Raises ``ValueError`` on NaN scores inside the mask.
    """
    if scores.ndim != 2 or scores.shape != mask.shape:
        raise ValueError(f"scores {tuple(scores.shape)} and mask {tuple(mask.shape)} must both be [N, R]")
    check_keep_ratio(ratio)
    valid = mask != 0
    scores = scores.detach()
    if torch.isnan(scores[valid]).any():
        raise ValueError("scores contain NaN inside the mask")
    if scope == "sequence":
        k = keep_count(valid.sum(-1), ratio, minimum=1)  # [N]
        selected = _descending_rank(scores, valid) < k[:, None]
    elif scope == "batch":
        k = keep_count(valid.sum(), ratio, minimum=1)
        selected = (_descending_rank(scores.reshape(-1), valid.reshape(-1)) < k).view_as(valid)
    else:
        raise ValueError(f"scope must be 'sequence' or 'batch', got {scope!r}")
    return (selected & valid).to(mask.dtype)
