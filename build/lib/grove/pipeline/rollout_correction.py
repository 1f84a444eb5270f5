"""Rollout-vs-training mismatch correction (TIS / MIS) as a pipeline stage.

With ``train.old_logprobs: recompute`` the batch holds both the training engine's old log-probs and
the rollout engine's; their ratio ρ = π_train_old / π_rollout gives importance weights
(:mod:`grove.core.importance_weights`, after verl's ``rollout_corr_helper`` and TRL's
``vllm_importance_sampling_correction``) that multiply the per-token policy loss.
"""

from __future__ import annotations

from dataclasses import dataclass

from grove.batch import RolloutBatch
from grove.config.algorithm import RolloutCorrectionConfig
from grove.core.importance_weights import masked_is_weights, truncated_is_weights
from grove.pipeline.batch_stages import StageBatch, StageContext

__all__ = ["RolloutCorrection", "apply_rollout_correction"]


def apply_rollout_correction(batch: RolloutBatch, cfg: RolloutCorrectionConfig) -> tuple[RolloutBatch, dict[str, float]]:
    if cfg.mode == "none":
        return batch, {}
    if batch.rollout_logprobs is None:
        raise ValueError("rollout correction needs batch.rollout_logprobs (train.old_logprobs: recompute)")
    mask = batch.loss_mask
    if cfg.mode == "truncate":
        weights = truncated_is_weights(batch.old_logprobs, batch.rollout_logprobs, mask, level=cfg.level, cap=cfg.cap)
    else:
        weights = masked_is_weights(
            batch.old_logprobs, batch.rollout_logprobs, mask, level=cfg.level, threshold=cfg.cap, lower_threshold=cfg.lower
        )
    m = mask.float()
    tokens = m.sum().clamp_min(1.0)
    stats = {
        "correction_weight_mean": float((weights * m).sum() / tokens),
        "correction_zeroed_fraction": float(((weights == 0).float() * m).sum() / tokens),
    }
    return batch.replace(correction_weights=weights), stats


@dataclass(frozen=True)
class RolloutCorrection:
    """The stage of ``algorithm.rollout_correction`` (this rank's rows; its statistics averaged over the ranks)."""

    settings: RolloutCorrectionConfig

    def __call__(self, batch: StageBatch, context: StageContext) -> StageBatch:
        corrected, stats = apply_rollout_correction(batch.batch, self.settings)
        return batch.with_batch(corrected, context.world.mean_over_ranks(stats, "update: correction statistics"))
