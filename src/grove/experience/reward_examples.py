"""Reward-model examples as an experience source: what ``grove rm`` trains on.

Each step draws ``rm.batch_size`` examples (preference pairs or labelled completions) of the training split in an
epoch-based order (:class:`grove.experience.task_sampler.TaskSampler`, whose position the checkpoint holds, so a
resumed run continues with the same examples), keeps this rank's share and returns them as one batch
(:func:`grove.rm.score_batches.rm_batch`). The trainer passes it through unchanged
(:class:`grove.pipeline.supervised_targets.SupervisedTargets`: the targets are the labels themselves) to the reward
model's update (:class:`grove.rm.score_update.ScoreUpdate`). The held-out examples are offered in batches for the held-out
evaluation; there is no policy to evaluate.
"""

from __future__ import annotations

import time
from typing import Any

from grove.batch import RolloutBatch
from grove.distributed.world import World
from grove.evaluation.evaluate import EvalResult
from grove.experience.task_sampler import TaskSampler
from grove.pipeline.credit import ScoredExperience
from grove.rm.examples import RmExample
from grove.rm.reward_splits import RmSplits
from grove.rm.score_batches import MARGIN, rm_batch

__all__ = ["RewardExampleSource"]


class RewardExampleSource:
    """The examples of ``splits.train``, ``batch_size`` per step over the ranks of ``world``; ``pairwise``: the
    examples are preference pairs (their target is the margin), else labelled completions (one target per head)."""

    def __init__(
        self, splits: RmSplits, batch_size: int, seed: int, pad_token_id: int, *, pairwise: bool, world: World
    ) -> None:
        self.splits = splits
        self.batch_size = batch_size
        self.pad_token_id = pad_token_id
        self.target_names = (MARGIN,) if pairwise else splits.heads
        self.world = world
        self.sampler = TaskSampler(len(splits.train), seed)

    def collect(self, step: int) -> ScoredExperience:
        """This rank's share of the step's examples (every rank draws the step's indices, so the order stays in
        step), with the epoch reached."""
        start = time.perf_counter()
        indices = self.sampler.next(self.batch_size)
        first, end = self.world.shard(len(indices))
        batch = self.batch([self.splits.train[i] for i in indices[first:end]])
        epoch = self.sampler.state.epoch + self.sampler.state.position / self.sampler.num_examples
        return ScoredExperience(batch, time.perf_counter() - start, 0, {"epoch": epoch}, samples=[])

    def batch(self, examples: list[RmExample]) -> RolloutBatch:
        return rm_batch(examples, self.pad_token_id, self.target_names)

    def held_out_batches(self, size: int) -> list[RolloutBatch]:
        """The held-out examples in batches of ``size`` examples."""
        held = self.splits.held_out
        return [self.batch(held[start : start + size]) for start in range(0, len(held), size)]

    def evaluate(self, step: int | None = None) -> EvalResult:
        raise RuntimeError("a reward model has no policy to evaluate: its held-out agreement is the stage's evaluation")

    def state_dict(self) -> dict[str, Any]:
        return self.sampler.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.sampler.load_state_dict(state)
