"""Segment reductions: per-group statistics without Python loops.

A *segment index* is a ``LongTensor[N]`` assigning each of ``N`` samples to a segment (a prompt
group, a trajectory, the whole batch). Arbitrary ids (e.g. ``[7, 7, 3, 9]``) are first made dense
(``0 .. S-1``) with :func:`dense_index`; every reduction below then takes the dense index and the
number of segments ``S`` and returns one value per segment, computed with ``index_add_`` /
``scatter_reduce`` / ``bincount``. :func:`broadcast` maps per-segment values back to samples.

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


def broadcast(per_segment: Tensor, index: Tensor) -> Tensor:
    """Per-segment values ``[S, ...]`` → per-sample values ``[N, ...]`` (``per_segment[index]``)."""
    return per_segment.index_select(0, index)
