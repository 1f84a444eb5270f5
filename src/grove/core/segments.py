"""Segment reductions: per-group statistics without Python loops.

A *segment index* is a ``LongTensor[N]`` assigning each of ``N`` samples to a segment (a prompt
group, a trajectory, the whole batch). Arbitrary ids (e.g. ``[7, 7, 3, 9]``) are first made dense
(``0 .. S-1``) with :func:`dense_index`; every reduction below then takes the dense index and the
number of segments ``S`` and returns one value per segment, computed with ``index_add_`` /
``scatter_reduce`` / ``bincount``. :func:`broadcast` maps per-segment values back to samples
(:func:`gather_rows`: repeated rows with a backward whose sums do not depend on thread timing).
:func:`segment_discounted_returns` is the one ordered operation: a discounted return-to-go along each
segment (a trajectory's steps ordered by turn), computed with a log-depth scan.

Empty segments (possible only when the caller passes ``num_segments`` larger than needed) get
count 0, sum 0, mean 0 and std 0.
"""

from __future__ import annotations

import torch
from torch import Tensor


def dense_index(index: Tensor) -> tuple[Tensor, int]:
    """Map arbitrary segment ids to dense ids ``0 .. S-1`` (ordered by id); return them and ``S``."""
    unique, inverse = torch.unique(index, sorted=True, return_inverse=True)
    return inverse.to(torch.long), int(unique.numel())


def segment_sum(values: Tensor, index: Tensor, num_segments: int) -> Tensor:
    """``out[s] = sum(values[i] for i with index[i] == s)``; ``values`` is ``[N, ...]``."""
    out = values.new_zeros((num_segments, *values.shape[1:]))
    return out.index_add(0, index, values)


def segment_count(index: Tensor, num_segments: int) -> Tensor:
    """Number of samples in each segment, as a ``LongTensor[S]``."""
    return torch.bincount(index, minlength=num_segments)


def segment_mean(values: Tensor, index: Tensor, num_segments: int) -> Tensor:
    """Per-segment mean of ``values[N]``; empty segments give 0."""
    count = segment_count(index, num_segments).clamp_min(1).to(values.dtype)
    return segment_sum(values, index, num_segments) / count


def segment_std(values: Tensor, index: Tensor, num_segments: int, unbiased: bool) -> Tensor:
    """Per-segment standard deviation of ``values[N]`` (two-pass: mean, then squared deviations).

    ``unbiased=True`` divides by ``n - 1`` (Bessel's correction, ``torch.std``'s default),
    ``unbiased=False`` by ``n``. A one-element segment has std **0** in both modes: its single
    deviation is 0 and the divisor is clamped to at least 1, so there is no ``0/0`` NaN (where
    ``torch.std`` of one element returns NaN). Callers that want a different convention for
    singletons (e.g. verl's std 1 for single-sample GRPO groups) apply it themselves.
    Note: the gradient of ``sqrt`` at 0 is infinite; use this under ``no_grad`` or on constants.
    """
    count = segment_count(index, num_segments)
    mean = segment_mean(values, index, num_segments)
    deviation = values - broadcast(mean, index)
    divisor = (count - 1 if unbiased else count).clamp_min(1).to(values.dtype)
    return (segment_sum(deviation * deviation, index, num_segments) / divisor).sqrt()


def segment_max(values: Tensor, index: Tensor, num_segments: int) -> Tensor:
    """Per-segment maximum of ``values[N]`` (empty segments give ``-inf``)."""
    out = values.new_full((num_segments,), float("-inf"))
    return out.scatter_reduce(0, index, values, reduce="amax", include_self=True)


def segment_min(values: Tensor, index: Tensor, num_segments: int) -> Tensor:
    """Per-segment minimum of ``values[N]`` (empty segments give ``+inf``)."""
    out = values.new_full((num_segments,), float("inf"))
    return out.scatter_reduce(0, index, values, reduce="amin", include_self=True)


def gather_rows(values: Tensor, index: Tensor) -> Tensor:
    """``values[index]`` along dim 0, with a backward that sums repeated rows in the same order on every run.

    A repeated index (a prompt's last hidden state predicts the first token of each of its G responses; a prompt's
    KV cache fanned out to its responses) turns the backward into a scatter-add. On a CPU, advanced indexing's
    backward (``index_put_(accumulate=True)``) adds the repeats with atomic float adds from several threads, in an
    order that changes from run to run (one gather of 8 spread repeats, 2 threads: 139 distinct gradients in 300
    backward passes; in training, two runs with the same seed drifted apart from the first update on),
    while ``index_select``'s backward (``index_add_``) adds them in index order. On CUDA it is the other way
    round (``index_add_`` uses atomics, advanced indexing's backward sorts: PyTorch's
    ``torch.use_deterministic_algorithms`` notes), so there the plain indexing is used."""
    if values.device.type == "cuda":
        return values[index]
    return values.index_select(0, index)


def broadcast(per_segment: Tensor, index: Tensor) -> Tensor:
    """Per-segment values ``[S, ...]`` → per-sample values ``[N, ...]`` (``per_segment[index]``, by
    :func:`gather_rows`, so a gradient through it sums each segment's samples in a fixed order)."""
    return gather_rows(per_segment, index)


def segment_discounted_returns(values: Tensor, segment: Tensor, order_key: Tensor, *, gamma: float) -> Tensor:
    """Discounted return-to-go within segments: ``R_t = r_t + gamma R_{t+1}``, ``R = r`` at a segment's end.

    ``values`` ``[S]`` are per-element rewards ``r``, ``segment`` ``[S]`` (arbitrary ids) says which
    sequence (trajectory) each element belongs to and ``order_key`` ``[S]`` its position in it (the turn
    number; distinct within a segment, gaps allowed). Elements may come in any order; the result is in
    the input order. Equivalent to, per segment sorted by ``order_key``::

        running = 0
        for t in reversed(range(T)):
            running = r[t] + gamma * running
            R[t] = running

    Computed without a loop over elements or segments: sort by (segment, descending key), so each
    element's predecessor is its successor in time, and solve the linear recurrence
    ``x_i = r_i + a_i x_{i-1}`` (``a_i = gamma`` inside a segment, 0 at its start) with a log-depth
    (Hillis-Steele) scan of the affine maps ``x -> b + a x``: ``ceil(log2(longest segment))`` passes of
    ``b_i += a_i b_{i-d}``, ``a_i *= a_{i-d}``. Every factor lies in ``[0, 1]``, so nothing is divided or
    amplified (unlike a cumulative sum of ``r gamma^-t``); ``gamma = 0`` gives ``r`` exactly and
    ``gamma = 1`` the plain suffix sums. Internally float64; returned in ``values``' dtype.
    """
    if values.ndim != 1 or segment.shape != values.shape or order_key.shape != values.shape:
        raise ValueError(
            f"values {tuple(values.shape)}, segment {tuple(segment.shape)} and order_key "
            f"{tuple(order_key.shape)} must all be [S]"
        )
    if not 0.0 <= gamma <= 1.0:
        raise ValueError(f"gamma must lie in [0, 1], got {gamma}")
    n = values.shape[0]
    out_dtype = values.dtype if values.is_floating_point() else torch.float32
    if n == 0:
        return values.to(out_dtype)
    # newest first within each segment: stable sorts by key (descending), then by segment
    perm = torch.argsort(order_key, descending=True, stable=True)
    perm = perm[torch.argsort(segment[perm], stable=True)]
    seg = segment[perm]
    key = order_key[perm]
    same = torch.zeros(n, dtype=torch.bool, device=values.device)
    same[1:] = seg[1:] == seg[:-1]
    if bool((same[1:] & (key[1:] == key[:-1])).any()):
        raise ValueError("order_key repeats within a segment: the order of its elements is ambiguous")
    b = values[perm].to(torch.float64)
    a = torch.where(same, torch.full_like(b, float(gamma)), torch.zeros_like(b))
    longest = int(torch.unique_consecutive(seg, return_counts=True)[1].max())
    d = 1
    while d < longest:
        b = torch.cat([b[:d], b[d:] + a[d:] * b[:-d]])
        a = torch.cat([a[:d], a[d:] * a[:-d]])
        d *= 2
    out = torch.empty_like(b)
    out[perm] = b
    return out.to(out_dtype)


def segment_nan_stats(values: Tensor, index: Tensor, num_segments: int, unbiased: bool) -> tuple[Tensor, Tensor, Tensor]:
    """NaN-aware per-segment ``(mean, std, count)`` of ``values [N, K]`` column by column, each ``[S, K]``.

    NaN marks a value that does not apply (a reward that returned ``None``): it is left out of its column's
    count, mean and std, like ``torch.nanmean`` per segment. A segment-column with no valid value has mean
    NaN and std NaN (count 0); with one valid value its std is NaN when ``unbiased`` (``n - 1 = 0``, as
    TRL's ``nanstd``) and 0 otherwise. Callers decide what a NaN statistic means.
    """
    valid = ~torch.isnan(values)
    zeros = torch.zeros_like(values)
    count = segment_sum(valid.to(values.dtype), index, num_segments)
    total = segment_sum(torch.where(valid, values, zeros), index, num_segments)
    nan = torch.full_like(total, float("nan"))
    mean = torch.where(count > 0, total / count.clamp_min(1), nan)
    deviation = torch.where(valid, values - broadcast(mean, index), zeros)
    divisor = count - 1 if unbiased else count
    var = segment_sum(deviation * deviation, index, num_segments) / divisor.clamp_min(1)
    std = torch.where(divisor > 0, var.sqrt(), nan)
    return mean, std, count


def segment_nan_spread(values: Tensor, index: Tensor, num_segments: int) -> Tensor:
    """Per-segment ``max - min`` of ``values [N, K]`` ignoring NaN, ``[S, K]``; 0 where fewer than 2 values apply."""
    valid = ~torch.isnan(values)
    shape = (num_segments, *values.shape[1:])
    expanded = index.view(-1, *([1] * (values.ndim - 1))).expand_as(values)
    high = values.new_full(shape, float("-inf")).scatter_reduce(
        0, expanded, torch.where(valid, values, torch.full_like(values, float("-inf"))), reduce="amax"
    )
    low = values.new_full(shape, float("inf")).scatter_reduce(
        0, expanded, torch.where(valid, values, torch.full_like(values, float("inf"))), reduce="amin"
    )
    spread = high - low
    return torch.where(torch.isfinite(spread), spread, torch.zeros_like(spread))
