"""Per-trajectory weighting: when one episode yields many samples, make every trajectory weigh the same.

With per-step prompts a T-turn trajectory is T samples, so under a sample or token mean a long episode
pulls harder than a short one (the bias Agent Lightning's ``per_rollout_mean`` corrects). With
``algorithm.trajectory_weighting: per_trajectory`` sample ``i`` of trajectory ``τ`` gets the weight::

    w_i = (N / K) / n_τ        N samples, K trajectories in the step, n_τ samples of trajectory τ

so ``Σ_{i∈τ} w_i = N / K`` for every trajectory and the weights average to 1 (the loss keeps its scale).
Under ``seq_mean_*`` aggregations the loss becomes exactly the mean over trajectories of the mean over
their samples; under ``token_mean`` a trajectory's tokens are scaled by ``(N/K)/n_τ``, which equalises
trajectories by sample count, not token count. The bias it removes: the policy is no longer pushed
harder towards behaviour seen in long (often failing) episodes; the price is a higher-variance estimate
per step of long episodes.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from grove.batch import RolloutBatch
from grove.core.segments import broadcast, dense_index, segment_count
from grove.pipeline.batch_stages import StageBatch, StageContext

__all__ = ["TrajectoryWeighting", "apply_trajectory_weighting", "equal_trajectory_weights"]


def equal_trajectory_weights(trajectory_index: torch.Tensor) -> torch.Tensor:
    """``[N]`` weights ``(N / K) / n_τ`` (see the module docstring)."""
    traj, k = dense_index(trajectory_index)
    counts = broadcast(segment_count(traj, k), traj).to(torch.float32)
    return (trajectory_index.numel() / max(k, 1)) / counts


def apply_trajectory_weighting(batch: RolloutBatch, mode: str) -> tuple[RolloutBatch, dict[str, float]]:
    if mode == "per_sample":
        return batch, {}
    weights = equal_trajectory_weights(batch.trajectory_index)
    return batch.replace(sample_weights=weights), {"trajectory_weight_max": float(weights.max())}


@dataclass(frozen=True)
class TrajectoryWeighting:
    """The stage of ``algorithm.trajectory_weighting: per_trajectory`` (whole step)."""

    mode: str = "per_trajectory"

    def __call__(self, batch: StageBatch, context: StageContext) -> StageBatch:
        weighted, stats = apply_trajectory_weighting(batch.batch, self.mode)
        return batch.with_batch(weighted, stats)
