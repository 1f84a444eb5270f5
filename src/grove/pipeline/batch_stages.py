"""The stages between credit and the update: an ordered list of typed batch stages, built once from the config.

A step reads ``collect → credit → stages → update``. The stages of the whole step's batch run first on every rank
(D^3S's rollout selection, trajectory weights: they see the batch of every rank, so each rank selects alike); then
each rank keeps the rows it generated, and the stages of this rank's rows run (the old policy's log-probs
recomputed by the training forward, the rollout correction's importance weights). A new stage is one class with a
``__call__(batch, context)``, added where :func:`grove.resolve.run_components.resolve_batch_stages` builds the list.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import torch
from torch import Tensor

from grove.batch import RolloutBatch
from grove.distributed.world import World
from grove.pipeline.credit import StepExperience

__all__ = ["BatchStage", "BatchStages", "OldLogprobRecompute", "StageBatch", "StageContext"]


@dataclass(frozen=True)
class StageBatch:
    """A step's batch on its way to the update: the batch, each of its rows' index in the step's collected batch,
    the scores of those rows, and the statistics the stages report (logged with the step's metrics)."""

    batch: RolloutBatch
    rows: Tensor
    scores: Tensor
    stats: dict[str, float] = field(default_factory=dict)

    @classmethod
    def of(cls, exp: StepExperience) -> StageBatch:
        """The whole step's batch after credit, every row kept."""
        return cls(exp.batch, torch.arange(exp.batch.num_samples), exp.scores)

    def select(self, keep: Tensor) -> StageBatch:
        """The rows ``keep`` of this batch."""
        return dataclasses.replace(self, batch=self.batch.select(keep), rows=self.rows[keep], scores=self.scores[keep])

    def with_batch(self, batch: RolloutBatch, stats: dict[str, float] | None = None) -> StageBatch:
        """The same rows with a changed batch (new weights, log-probs), and the stage's statistics added."""
        return dataclasses.replace(self, batch=batch, stats={**self.stats, **(stats or {})})


@dataclass(frozen=True)
class StageContext:
    """What a stage may use: the step (from 1) of ``total_steps``, the world, and the no-grad training-forward
    log-probs of a batch under the run's precision (the policy as it is before the update)."""

    step: int
    total_steps: int
    world: World
    logprobs: Callable[[RolloutBatch], Tensor]


class BatchStage(Protocol):
    """One stage: the batch in, the batch out (rows may go; tensors may be added)."""

    def __call__(self, batch: StageBatch, context: StageContext) -> StageBatch: ...


@dataclass(frozen=True)
class OldLogprobRecompute:
    """``train.old_logprobs: recompute``: the old policy's log-probs from the training forward; the rollout engine's
    move to ``rollout_logprobs`` (what the rollout correction compares them with)."""

    def __call__(self, batch: StageBatch, context: StageContext) -> StageBatch:
        old = context.logprobs(batch.batch)
        return batch.with_batch(batch.batch.replace(old_logprobs=old, rollout_logprobs=batch.batch.old_logprobs))


@dataclass(frozen=True)
class BatchStages:
    """The run's stages, in order: those of the whole step's batch, then those of this rank's rows."""

    whole_step: Sequence[BatchStage] = ()
    this_rank: Sequence[BatchStage] = ()

    def run_whole_step(self, batch: StageBatch, context: StageContext) -> StageBatch:
        for stage in self.whole_step:
            batch = stage(batch, context)
        return batch

    def run_this_rank(self, batch: StageBatch, context: StageContext) -> StageBatch:
        for stage in self.this_rank:
            batch = stage(batch, context)
        return batch
