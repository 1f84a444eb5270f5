"""D^3S's token level as a loss-token filter: each step trains on the loss tokens with the largest ``|A|·H``.

"Learning More with Less: A Dynamic Dual-Level Down-Sampling Framework for Efficient Policy Optimization" (D^3S),
token level (config ``selection.tokens``): the score of a loss token is ``|A_{i,t}| · H_{i,t}``, its advantage times
the entropy of the training forward's distribution at it (detached), and the update keeps the top ``ratio`` share
(:mod:`grove.core.selection`) of

* ``scope: sequence``: each completion's loss tokens (at least one per completion);
* ``scope: micro_batch``: a micro-batch's loss tokens together;
* ``scope: batch``: the whole mini-batch's, over every rank, ranked from a no-grad pass of the same training forward
  before its micro-batches run (it costs one extra forward).

With ``sequence`` and ``micro_batch`` the selection happens inside each micro-batch's loss after the forward, and
:func:`selected_token_count` predicts the count beforehand so that the loss aggregation's global normaliser counts
exactly the tokens that receive gradient (micro-batch-invariant). The keep ratio follows the relaxing schedule of
``selection.tokens.ratio`` (:mod:`grove.core.keep_ratio_schedules`): :class:`ScheduledTokenSelection` gives each
step its :class:`TopScoreTokens` filter.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

from grove.batch import RolloutBatch
from grove.core.keep_ratio_schedules import KeepRatioSchedule
from grove.core.selection import keep_count, select_tokens, token_scores
from grove.distributed.world import World
from grove.pipeline.loss_token_filter import EVERY_LOSS_TOKEN, LossTokenFilter

__all__ = ["ScheduledTokenSelection", "TokenScope", "TopScoreTokens", "select_loss_tokens", "selected_token_count"]

TokenScope = Literal["sequence", "micro_batch", "batch"]


def selected_token_count(loss_mask: Tensor, scope: TokenScope, ratio: float) -> float:
    """How many of a micro-batch's loss tokens :func:`select_loss_tokens` will keep (known before the forward)."""
    if scope == "batch":
        raise ValueError("the batch scope selects before the micro-batches; its count is the selected mask's sum")
    counts = loss_mask.sum(1) if scope == "sequence" else loss_mask.sum().reshape(1)
    return float(keep_count(counts, ratio, minimum=1).sum())


def select_loss_tokens(loss_mask: Tensor, advantages: Tensor, entropy: Tensor, scope: TokenScope, ratio: float) -> Tensor:
    """The loss mask restricted to its top ``|A|·H`` tokens (same dtype as ``loss_mask``)."""
    core_scope = "sequence" if scope == "sequence" else "batch"  # the core's "batch" = all rows given
    return select_tokens(token_scores(advantages, entropy), loss_mask, ratio, scope=core_scope)


@dataclass(frozen=True)
class TopScoreTokens:
    """The loss-token filter of one step: the top ``ratio`` of the loss tokens by ``|A|·H`` within ``scope``."""

    scope: TokenScope
    ratio: float

    selects = True

    @property
    def in_loss(self) -> bool:
        """Selection inside each micro-batch's loss (scopes ``sequence`` and ``micro_batch``)."""
        return self.scope != "batch"

    @property
    def per_sequence(self) -> bool:
        """Only scope ``sequence`` knows each completion's kept count alone; a selection across samples would rank
        without the ones left out."""
        return self.scope == "sequence"

    def kept_count(self, mask: Tensor) -> float:
        return selected_token_count(mask, self.scope, self.ratio) if self.in_loss else float(mask.sum())

    def scale_tokens(self, mask: Tensor, micro_indices: Sequence[Tensor]) -> float:
        """A count per micro-batch with scope ``micro_batch``, else per row (or the mask restricted beforehand)."""
        if self.scope == "micro_batch":
            return sum(self.kept_count(mask[i]) for i in micro_indices)
        return self.kept_count(mask)

    def in_loss_mask(self, mask: Tensor, advantages: Tensor, entropy: Tensor) -> Tensor:
        return select_loss_tokens(mask, advantages, entropy, self.scope, self.ratio) if self.in_loss else mask

    def left_out_mask(self, left_out: RolloutBatch) -> Tensor:
        """Every advantage of a left-out sample is zero, so every score ``|A|·H`` is zero and each row keeps its first
        tokens (the count :meth:`kept_count` puts in the aggregation scale)."""
        if not self.in_loss:
            return left_out.loss_mask
        zeros = torch.zeros_like(left_out.advantages, dtype=torch.float32)
        return select_loss_tokens(left_out.loss_mask, left_out.advantages, zeros, self.scope, self.ratio)

    @torch.no_grad()
    def restrict_mini_batch(
        self, mini: RolloutBatch, micro_indices: Sequence[Tensor], entropy_of: Callable[[RolloutBatch], Tensor],
        world: World,
    ) -> RolloutBatch:
        """Scope ``batch``: the mini-batch's loss mask restricted to its top ``|A|·H`` tokens over all sequences of
        every rank, with the entropies of ``entropy_of`` (same layout and micro-batches as the gradient pass, so the
        same values). Other scopes: ``mini`` as it is."""
        if self.in_loss:
            return mini
        entropy = torch.zeros(mini.loss_mask.shape, dtype=torch.float32, device=mini.loss_mask.device)
        for idx in micro_indices:
            ent = entropy_of(mini.select(idx).trimmed())
            entropy[idx, : ent.shape[1]] = ent.float().cpu()
        if not world.distributed:
            return mini.replace(
                loss_mask=select_loss_tokens(mini.loss_mask, mini.advantages, entropy, self.scope, self.ratio)
            )
        ranks = world.gather_objects((mini.loss_mask, mini.advantages, entropy), "update: batch-scope token selection")
        width = max(t[0].shape[1] for t in ranks)
        pad = lambda t: torch.nn.functional.pad(t, (0, width - t.shape[1]))  # noqa: E731
        mask, adv, ent = (torch.cat([pad(r[i]) for r in ranks]) for i in range(3))
        selected = select_loss_tokens(mask, adv, ent, self.scope, self.ratio)
        first = sum(r[0].shape[0] for r in ranks[: world.rank])
        return mini.replace(loss_mask=selected[first : first + mini.num_samples, : mini.loss_mask.shape[1]])

    def metrics(self, trained: float, candidates: float) -> dict[str, float]:
        """``selection/*``: this step's keep ratio and the share of loss tokens kept."""
        return {"selection/token_keep_ratio": self.ratio, "selection/kept_tokens_frac": trained / max(candidates, 1.0)}


@dataclass(frozen=True)
class ScheduledTokenSelection:
    """``selection.tokens``: :class:`TopScoreTokens` in ``scope`` at the keep ratio ``ratio`` gives step ``t`` of
    ``total_steps`` (schedules count steps from 0); a ratio of 1 keeps every loss token."""

    scope: TokenScope
    ratio: KeepRatioSchedule
    total_steps: int

    def at(self, step: int) -> LossTokenFilter:
        ratio = self.ratio.at(step - 1, self.total_steps)
        return TopScoreTokens(self.scope, ratio) if ratio < 1.0 else EVERY_LOSS_TOKEN
