"""Demonstrations as an experience source: what supervised fine-tuning (``grove sft``) trains on.

Each step draws ``sft.batch_size`` examples of ``sft.data`` in an epoch-based order
(:class:`grove.experience.example_epochs.ExampleEpochs`: the checkpoint holds the position, so a resumed run continues
with the same examples), keeps this rank's share and returns them as one batch (:func:`grove.sft.batches.sft_batch`:
the loss on the policy's own tokens, advantages 1, no rewards), packed with ``sft.packing``. The trainer's credit for
it is :class:`grove.pipeline.supervised_targets.SupervisedTargets` and its loss the ``nll`` policy loss
(:mod:`grove.training.supervised_stage`). The held-out examples (``sft.eval_data`` or ``sft.eval_fraction``) are
offered as batches whose loss each evaluation reports; the policy itself is evaluated by the source of the config's
``env`` or ``task``, when there is one.
"""

from __future__ import annotations

from grove.batch import RolloutBatch
from grove.distributed.world import World
from grove.evaluation.evaluate import EvalResult
from grove.experience.example_epochs import ExampleEpochs
from grove.experience.source import ExperienceSource
from grove.sft.batches import sft_batch
from grove.sft.data import SftExample
from grove.sft.splits import SftSplits

__all__ = ["DemonstrationSource"]


class DemonstrationSource(ExampleEpochs[SftExample]):
    """The examples of ``splits.train``, ``batch_size`` per step over the ranks of ``world``. ``pack_length``:
    ``None`` for one example per row, ``0`` to pack into rows of the batch's longest example, else the most tokens
    of a packed row. ``policy_evaluation``: the source that evaluates the policy (on rank 0), or ``None``."""

    def __init__(
        self, splits: SftSplits, batch_size: int, seed: int, pad_token_id: int, *, world: World,
        pack_length: int | None = None, policy_evaluation: ExperienceSource | None = None,
    ) -> None:
        super().__init__(splits.train, splits.held_out, batch_size, seed, world)
        self.splits = splits
        self.pad_token_id = pad_token_id
        self.pack_length = pack_length
        self.policy_evaluation = policy_evaluation

    def batch(self, examples: list[SftExample]) -> RolloutBatch:
        """``examples`` as a batch; packed into rows of at most ``pack_length`` tokens (``0``: the longest example's
        length: the packed forward attends densely within a row, a block mask, so a row longer than the longest
        example would cost more attention than the padded layout saves)."""
        pack_length = self.pack_length
        if pack_length == 0:
            pack_length = max(len(e.input_ids) for e in examples)
        return sft_batch(examples, self.pad_token_id, pack_length=pack_length)

    def evaluate(self, step: int | None = None) -> EvalResult:
        if self.policy_evaluation is None:
            raise RuntimeError("this demonstration source has no policy evaluation (no env and no task to evaluate)")
        return self.policy_evaluation.evaluate(step=step)
