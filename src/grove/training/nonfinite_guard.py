"""The non-finite guard across steps (docs/reliability.md).

Within a step, :class:`grove.pipeline.update.PolicyUpdate` skips any optimizer step whose loss or gradient norm
is not finite, and the trainer skips the whole update when an advantage is not finite
(:func:`nonfinite_advantage_trajectories`). :class:`NonFiniteGuard` counts the steps whose every optimizer step
was skipped; ``train.max_skipped_steps`` of them in a row stop the run with :class:`NonFiniteTrainingError`
before that step's checkpoint, so the last checkpoint on disk is the last good one.
"""

from __future__ import annotations

import logging
from pathlib import Path

import torch

from grove.batch import RolloutBatch
from grove.infra import checkpoint as ckpt

__all__ = ["NonFiniteGuard", "NonFiniteTrainingError", "nonfinite_advantage_trajectories"]

log = logging.getLogger(__name__)


class NonFiniteTrainingError(RuntimeError):
    """``train.max_skipped_steps`` consecutive steps had every optimizer step skipped for non-finite values."""


def nonfinite_advantage_trajectories(batch: RolloutBatch) -> list[int]:
    """Trajectory ids of the samples with a non-finite advantage on a loss token (logged as a warning; the step's
    update is then skipped, since one NaN advantage turns every weight into NaN)."""
    bad = (~torch.isfinite(batch.advantages) & batch.loss_mask.bool()).any(dim=1)
    if not bool(bad.any()):
        return []
    ids = sorted(set(batch.trajectory_index[bad].tolist()))
    log.warning("non-finite advantages for trajectories %s: this step's update is skipped", ids[:50])
    return ids


class NonFiniteGuard:
    def __init__(self, max_skipped_steps: int, optimizer_steps_per_step: int, run_dir: Path) -> None:
        self.limit = max_skipped_steps
        self.per_step = optimizer_steps_per_step
        self.run_dir = run_dir
        self.in_a_row = 0

    def observe(self, metrics: dict[str, float]) -> None:
        """Count a step by its metrics (adds ``consecutive_skipped_steps`` to them)."""
        self.in_a_row = self.in_a_row + 1 if metrics["skipped_optimizer_steps"] >= self.per_step else 0
        metrics["consecutive_skipped_steps"] = float(self.in_a_row)

    def check(self, step: int) -> None:
        """Raise :class:`NonFiniteTrainingError` once ``max_skipped_steps`` steps in a row were skipped."""
        if self.in_a_row < self.limit:
            return
        good = ckpt.latest_checkpoint(self.run_dir)
        raise NonFiniteTrainingError(
            f"steps {step - self.limit + 1}..{step}: every optimizer step was skipped because the loss, the "
            f"gradient norm or the advantages were not finite (train.max_skipped_steps = {self.limit}; the "
            "offending trajectories are in the warnings above). "
            + (f"The last good checkpoint is {good}; " if good else "No checkpoint was written; ")
            + "lower optim.lr, check the rewards for NaN, or raise train.max_skipped_steps."
        )
