"""How a mini-batch is cut into micro-batches for gradient accumulation, and which samples need no forward at all."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from grove.batch import RolloutBatch
from grove.distributed.world import World
from grove.pipeline.loss_token_filter import signal_token_mask

__all__ = ["MicroBatchPlan", "largest_first", "micro_batches", "samples_with_signal", "within_budget"]


@dataclass(frozen=True)
class MicroBatchPlan:
    """A mini-batch's micro-batches (sample indices, largest first), the passes this rank adds so that every rank
    runs as many (``rank_fillers``: FSDP2 all-gathers parameters in each forward; each repeats a computed micro-batch,
    or this rank's shortest sample, with its loss multiplied by 0), and the samples left out for lack of signal."""

    computed: list[Tensor]
    rank_fillers: list[Tensor]
    left_out: Tensor

    @property
    def passes(self) -> int:
        """Forward and backward passes this rank runs (computed and fillers)."""
        return len(self.computed) + len(self.rank_fillers)


def samples_with_signal(mini: RolloutBatch) -> Tensor:
    """``bool [samples]``: which samples have a loss token with a non-zero advantage.

    The others (every completion of a group with one reward, a sample without loss tokens) contribute exactly zero
    to the gradient of a loss that is row-local and linear in its advantages, aggregated as a sum of per-row terms
    over the mini-batch's global counts (``zero_advantage_rows_skippable`` in the registries): their forward and
    backward are work for nothing. ``train.skip_zero_advantage`` leaves them out; the aggregation scale is still
    the whole mini-batch's, so every other sample's term is unchanged."""
    return signal_token_mask(mini.loss_mask, mini.advantages).any(dim=1)


def micro_batches(
    mini: RolloutBatch, forward: str, skipping: bool, size: int, world: World, max_tokens: int | None = None
) -> MicroBatchPlan:
    """The mini-batch's :class:`MicroBatchPlan`; samples carrying no signal are left out when ``skipping``
    (:func:`samples_with_signal`). A micro-batch holds at
    most ``size`` samples and, with ``max_tokens`` (``train.micro_batch_tokens``), at most that many prompt +
    completion tokens (:func:`within_budget`).

    Order: groups kept together for the prompt-sharing forwards (within a group, longest first); otherwise
    length-sorted, which wastes less compute on padding. No pass at all when no rank has a sample to compute."""
    tokens = mini.response_lengths + mini.prompt_mask.sum(1)
    order = torch.argsort(tokens, descending=True, stable=True)
    if forward != "padded":
        order = order[torch.argsort(mini.group_index[order], stable=True)]
    left_out = order[:0]
    if skipping:  # samples whose gradient is exactly zero are not computed
        signal = samples_with_signal(mini)[order]
        order, left_out = order[signal], order[~signal]
    micro = largest_first(within_budget(order, tokens, size, max_tokens), tokens)
    count = world.max_int(len(micro), "update: micro-batch count")
    filler = micro[-1:] or [torch.argsort(tokens, stable=True)[:1]]
    return MicroBatchPlan(micro, filler * (count - len(micro)), left_out)


def largest_first(micro_indices: list[Tensor], tokens: Tensor) -> list[Tensor]:
    """The micro-batches in decreasing order of their token count (``tokens [samples]``; ties keep their order).

    Why: the host allocator's heap grows to the largest working set it has served, and blocks freed by a small
    micro-batch are too small for a larger one that follows, so a growing sequence of sizes raises the
    high-water mark once per size. Largest first, every later micro-batch fits into blocks the first one freed:
    the bf16 update's peak RSS fell 3.79 → 3.57-3.63 GiB at the same update time (``benchmarks/step_memory.py``,
    docs/benchmarks.md). Gradients are sums over micro-batches, so only the summation order (float
    rounding) changes."""
    return sorted(micro_indices, key=lambda idx: -int(tokens[idx].sum()))  # sorted() is stable


def within_budget(order: Tensor, tokens: Tensor, size: int, max_tokens: int | None) -> list[Tensor]:
    """``order`` (sample indices) cut into consecutive runs of at most ``size`` samples holding at most
    ``max_tokens`` tokens together (``tokens [samples]``; ``None``: no token bound); a sample longer than the budget
    is a micro-batch of its own. The cuts are where the running token count (reset at each cut) would pass the
    budget, found on the samples' counts as integers (one pass over at most a mini-batch of numbers)."""
    if max_tokens is None:
        return [m for m in torch.split(order, size) if len(m)]
    counts = tokens[order].tolist()
    lengths: list[int] = []
    held = used = 0
    for count in counts:
        if held and (held == size or used + count > max_tokens):
            lengths.append(held)
            held = used = 0
        held += 1
        used += count
    if held:
        lengths.append(held)
    return list(torch.split(order, lengths))
