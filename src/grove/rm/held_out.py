"""The held-out evaluation of a reward model: its loss on the held-out examples and its agreement with their
labels (:mod:`grove.rm.agreement`), computed on every rank (FSDP2 needs every rank in each forward) and reported
in ``eval.jsonl`` by rank 0."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn

from grove.batch import RolloutBatch
from grove.infra.precision import autocast
from grove.rm.agreement import pairwise_preference_report, regression_report
from grove.rm.reward_splits import Standardization
from grove.rm.score_batches import pair_rows
from grove.rm.score_update import ScoreLoss, sequence_scores

__all__ = ["HeldOutAgreement"]


@dataclass(frozen=True)
class HeldOutAgreement:
    """``__call__(model) -> record``: ``held_out_loss`` (the training loss over all held-out examples, standardised
    units) and the objective's agreement statistics. ``batches``: the held-out examples, whole examples per batch."""

    batches: tuple[RolloutBatch, ...]
    score_loss: ScoreLoss
    heads: tuple[str, ...]
    scale: Standardization
    bootstrap_samples: int
    seed: int

    def __call__(self, model: nn.Module) -> dict[str, float]:
        if not self.batches:
            return {}
        device = next(model.parameters()).device
        with torch.no_grad(), autocast(self.score_loss.precision, device):
            scores = torch.cat([sequence_scores(model, batch).float().cpu() for batch in self.batches])
        targets = torch.cat([batch.rewards for batch in self.batches])
        groups = _distinct_groups(self.batches)
        if self.score_loss.pairwise:
            count = torch.tensor(float(len(pair_rows(groups)[0])))
        else:
            count = (~torch.isnan(targets)).sum(0).float()
        loss, _ = self.score_loss.loss(scores, targets, groups, count)
        record = {"held_out_loss": float(loss), "held_out_rows": float(len(torch.unique(groups)))}
        if self.score_loss.pairwise:
            chosen, rejected = pair_rows(groups)
            record.update(pairwise_preference_report(scores[chosen, 0], scores[rejected, 0]))
            return record
        prompts = [m["prompt"] for batch in self.batches for m in batch.metadata]
        number = {p: i for i, p in enumerate(dict.fromkeys(prompts))}
        record.update(regression_report(
            self.scale.to_labels(scores.double()), self.scale.to_labels(targets.double()),
            torch.tensor([number[p] for p in prompts]), self.heads, self.bootstrap_samples, self.seed,
        ))
        return record


def _distinct_groups(batches: Sequence[RolloutBatch]) -> torch.Tensor:
    """The batches' ``group_index`` joined, each batch's examples numbered after the previous batch's."""
    offset, groups = 0, []
    for batch in batches:
        groups.append(batch.group_index + offset)
        offset += int(batch.group_index.max()) + 1
    return torch.cat(groups)
