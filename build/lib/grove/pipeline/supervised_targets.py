"""The credit of demonstrations: supervised fine-tuning's targets are the demonstrated tokens themselves.

A batch of demonstrations (:func:`grove.sft.batches.sft_batch`) already holds advantages of 1 on every trained
token and no rewards, so with the ``nll`` policy loss and ``token_mean`` aggregation the update's loss is the mean
cross-entropy of the trained tokens. Nothing is gathered across ranks: each rank trains on its own examples, and
the update's token counts are summed over the ranks (:mod:`grove.pipeline.update`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from grove.pipeline.credit import ScoredExperience, StepExperience

__all__ = ["SupervisedTargets"]


@dataclass(frozen=True)
class SupervisedTargets:
    """The :class:`grove.pipeline.credit.Credit` of demonstrations: the batch passes through as it is."""

    def __call__(self, scored: ScoredExperience) -> StepExperience:
        batch = scored.batch
        return StepExperience(
            batch, torch.zeros(batch.num_samples), scored.generation_seconds, scored.generated_tokens,
            dict(scored.stats), list(scored.samples or []),
        )

    def step_metrics(self, exp: StepExperience) -> dict[str, float]:
        """The source's statistics (the epoch) are the step's record of its demonstrations."""
        return {}
