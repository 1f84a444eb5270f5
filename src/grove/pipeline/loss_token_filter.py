"""Which loss tokens an update trains on: the :class:`LossTokenFilter` seam of the update.

The update (:class:`grove.pipeline.update.PolicyUpdate`) takes a step's filter beside its batch and coefficients and
asks it at four points: before a mini-batch's micro-batches (:meth:`LossTokenFilter.restrict_mini_batch`, a filter
that ranks the whole mini-batch), for the loss aggregation's token count (:meth:`LossTokenFilter.scale_tokens`),
inside each micro-batch's loss once the training forward's entropies are known (:meth:`LossTokenFilter.in_loss_mask`)
and for samples left out for lack of signal (:meth:`LossTokenFilter.left_out_mask`). :class:`EveryLossToken` keeps
them all; D^3S's token level (:class:`grove.pipeline.token_selection.TopScoreTokens`) keeps the largest ``|A|·H``.

A run's filter changes with the step (D^3S relaxes its keep ratio): a stage holds a :class:`TokenFilterSchedule`
whose :meth:`TokenFilterSchedule.at` gives the filter of each step.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from torch import Tensor

from grove.batch import RolloutBatch
from grove.distributed.world import World

__all__ = [
    "EVERY_LOSS_TOKEN",
    "EveryLossToken",
    "LossTokenFilter",
    "TokenFilterSchedule",
    "signal_token_mask",
    "tokens_with_signal",
]


class LossTokenFilter(Protocol):
    """The loss tokens one update trains on (see the module docstring)."""

    @property
    def selects(self) -> bool:
        """Whether it may leave loss tokens out (the update then reports which ones each row was trained on)."""
        ...

    @property
    def per_sequence(self) -> bool:
        """Each sample's kept count is known before the forward and a zero-advantage sample's kept tokens get a zero
        gradient, so samples without signal may be left out of the forward (``train.skip_zero_advantage``)."""
        ...

    def kept_count(self, mask: Tensor) -> float:
        """How many of ``mask``'s tokens are in the loss after the in-loss filtering (known before the forward)."""
        ...

    def scale_tokens(self, mask: Tensor, micro_indices: Sequence[Tensor]) -> float:
        """The loss tokens of a mini-batch (``mask``, cut into ``micro_indices``) the aggregation divides by."""
        ...

    def in_loss_mask(self, mask: Tensor, advantages: Tensor, entropy: Tensor) -> Tensor:
        """A micro-batch's loss mask after the in-loss filtering (entropy from its training forward)."""
        ...

    def left_out_mask(self, left_out: RolloutBatch) -> Tensor:
        """The loss mask of samples left out for lack of signal, as their in-loss filtering would make it."""
        ...

    def restrict_mini_batch(
        self, mini: RolloutBatch, micro_indices: Sequence[Tensor], entropy_of: Callable[[RolloutBatch], Tensor],
        world: World,
    ) -> RolloutBatch:
        """The mini-batch with its loss mask restricted before its micro-batches run (``entropy_of``: a no-grad pass
        of the training forward on a trimmed micro-batch); ``mini`` itself for a filter that works per micro-batch."""
        ...

    def metrics(self, trained: float, candidates: float) -> dict[str, float]:
        """The update's metrics of a filter that kept ``trained`` of ``candidates`` loss tokens."""
        ...


class TokenFilterSchedule(Protocol):
    """A run's loss-token filter, step by step."""

    def at(self, step: int) -> LossTokenFilter:
        """The filter of training step ``step`` (from 1)."""
        ...


class EveryLossToken:
    """Every loss token is trained on (the filter of a run without token selection, at every step)."""

    selects = False
    per_sequence = True

    def at(self, step: int) -> EveryLossToken:
        return self

    def kept_count(self, mask: Tensor) -> float:
        return float(mask.sum())

    def scale_tokens(self, mask: Tensor, micro_indices: Sequence[Tensor]) -> float:
        return float(mask.sum())

    def in_loss_mask(self, mask: Tensor, advantages: Tensor, entropy: Tensor) -> Tensor:
        return mask

    def left_out_mask(self, left_out: RolloutBatch) -> Tensor:
        return left_out.loss_mask

    def restrict_mini_batch(
        self, mini: RolloutBatch, micro_indices: Sequence[Tensor], entropy_of: Callable[[RolloutBatch], Tensor],
        world: World,
    ) -> RolloutBatch:
        return mini

    def metrics(self, trained: float, candidates: float) -> dict[str, float]:
        return {}


EVERY_LOSS_TOKEN = EveryLossToken()


def signal_token_mask(mask: Tensor, advantages: Tensor) -> Tensor:
    """``bool``, the shape of ``mask``: loss tokens whose advantage is non-zero (the ones a policy-gradient term
    actually moves)."""
    return (mask != 0) & (advantages != 0)


def tokens_with_signal(mask: Tensor, advantages: Tensor) -> float:
    """How many loss tokens have a non-zero advantage (:func:`signal_token_mask`)."""
    return float(signal_token_mask(mask, advantages).sum())
