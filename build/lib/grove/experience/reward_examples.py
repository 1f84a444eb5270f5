"""Reward-model examples as an experience source: what ``grove rm`` trains on.

Each step draws ``rm.batch_size`` examples (preference pairs or labelled completions) of the training split in an
epoch-based order (:class:`grove.experience.example_epochs.ExampleEpochs`: the checkpoint holds the position, so a
resumed run continues with the same examples), keeps this rank's share and returns them as one batch
(:func:`grove.rm.score_batches.rm_batch`). The trainer passes it through unchanged
(:class:`grove.pipeline.supervised_targets.SupervisedTargets`: the targets are the labels themselves) to the reward
model's update (:class:`grove.rm.score_update.ScoreUpdate`). The held-out examples are offered in batches for the held-out
evaluation; there is no policy to evaluate.
"""

from __future__ import annotations

from grove.batch import RolloutBatch
from grove.distributed.world import World
from grove.evaluation.evaluate import EvalResult
from grove.experience.example_epochs import ExampleEpochs
from grove.rm.examples import RmExample
from grove.rm.reward_splits import RmSplits
from grove.rm.score_batches import MARGIN, rm_batch

__all__ = ["RewardExampleSource"]


class RewardExampleSource(ExampleEpochs[RmExample]):
    """The examples of ``splits.train``, ``batch_size`` per step over the ranks of ``world``; ``pairwise``: the
    examples are preference pairs (their target is the margin), else labelled completions (one target per head)."""

    def __init__(
        self, splits: RmSplits, batch_size: int, seed: int, pad_token_id: int, *, pairwise: bool, world: World
    ) -> None:
        super().__init__(splits.train, splits.held_out, batch_size, seed, world)
        self.splits = splits
        self.pad_token_id = pad_token_id
        self.target_names = (MARGIN,) if pairwise else splits.heads

    def batch(self, examples: list[RmExample]) -> RolloutBatch:
        return rm_batch(examples, self.pad_token_id, self.target_names)

    def evaluate(self, step: int | None = None) -> EvalResult:
        raise RuntimeError("a reward model has no policy to evaluate: its held-out agreement is the stage's evaluation")
