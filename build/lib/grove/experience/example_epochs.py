"""Fixed training examples served in epochs: the part every source of stored examples shares (demonstrations for
``grove sft``, labelled completions and preference pairs for ``grove rm``).

Each step draws ``batch_size`` examples of the training split in an epoch-based order
(:class:`grove.experience.task_sampler.TaskSampler`, whose position the checkpoint holds, so a resumed run continues
with the same examples), keeps this rank's share and returns it as one batch made by the subclass's :meth:`batch`;
the held-out examples are offered in batches of the same kind.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, Generic, TypeVar

from grove.batch import RolloutBatch
from grove.distributed.world import World
from grove.experience.task_sampler import TaskSampler
from grove.pipeline.credit import ScoredExperience

__all__ = ["ExampleEpochs"]

ExampleT = TypeVar("ExampleT")


class ExampleEpochs(Generic[ExampleT]):
    """``train`` examples, ``batch_size`` per step over the ranks of ``world``; ``held_out`` for evaluation.
    Subclasses say how examples become a batch (:meth:`batch`)."""

    def __init__(
        self, train: Sequence[ExampleT], held_out: Sequence[ExampleT], batch_size: int, seed: int, world: World
    ) -> None:
        self.train_examples = train
        self.held_out_examples = held_out
        self.batch_size = batch_size
        self.world = world
        self.sampler = TaskSampler(len(train), seed)

    def batch(self, examples: list[ExampleT]) -> RolloutBatch:
        raise NotImplementedError

    def collect(self, step: int) -> ScoredExperience:
        """This rank's share of the step's examples (every rank draws the step's indices, so the order stays in
        step), with the epoch reached."""
        start = time.perf_counter()
        indices = self.sampler.next(self.batch_size)
        first, end = self.world.shard(len(indices))
        batch = self.batch([self.train_examples[i] for i in indices[first:end]])
        epoch = self.sampler.state.epoch + self.sampler.state.position / self.sampler.num_examples
        return ScoredExperience(batch, time.perf_counter() - start, 0, {"epoch": epoch}, samples=[])

    def held_out_batches(self, size: int) -> list[RolloutBatch]:
        """The held-out examples in batches of ``size``."""
        held = list(self.held_out_examples)
        return [self.batch(held[start : start + size]) for start in range(0, len(held), size)]

    def state_dict(self) -> dict[str, Any]:
        return self.sampler.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.sampler.load_state_dict(state)
