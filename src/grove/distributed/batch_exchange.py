"""One step's batch across ranks: every rank's samples gathered, so batch-level statistics see all of them.

Each rank generates and scores its own prompt groups (groups are never split across ranks). Advantage
estimators, reward combiners and D^3S's sample selection may use statistics of the whole batch
(REINFORCE++ whitening, batch-level normalisation, GPG's scaling, GDPO's and MO-GRPO's renormalisation,
batch-scope max-variance selection). Rather than teaching each of them about ranks, the step's scored batch
(token ids, masks, rewards, index tensors, step tables: a few hundred kB) is all-gathered, the
estimator runs on the gathered batch, identically on every rank, and each rank trains on its own rows of
it. So every estimator, combiner and selection rule gives exactly its single-process values, and the
tensor core stays free of communication. The gradient-heavy work (forward, backward) stays sharded.
"""

from __future__ import annotations

import dataclasses

import torch
from torch import Tensor

from grove.batch import RolloutBatch, concat_batches
from grove.distributed.world import World

__all__ = ["gather_batch"]


def _max_id(t: Tensor | None) -> int:
    return int(t.max()) + 1 if t is not None and t.numel() else 0


def _shifted(batch: RolloutBatch, groups: int, trajectories: int) -> RolloutBatch:
    """``batch`` with its group and trajectory ids moved past those of earlier ranks."""
    changes = {
        "group_index": batch.group_index + groups,
        "trajectory_index": batch.trajectory_index + trajectories,
    }
    if batch.steps is not None:
        changes["steps"] = dataclasses.replace(
            batch.steps, group=batch.steps.group + groups, trajectory=batch.steps.trajectory + trajectories
        )
    return batch.replace(**changes)


def gather_batch(
    world: World, batch: RolloutBatch, pad_token_id: int, scores: Tensor | None = None
) -> tuple[RolloutBatch, Tensor, Tensor | None]:
    """``(the step's batch over all ranks, this rank's rows in it, the gathered per-row scores if given)``.

    Ranks are concatenated in rank order; group and trajectory ids are made disjoint by shifting each rank's
    past the previous ranks' (rank 0's stay as they are), anchors are renumbered per rank by
    :func:`grove.batch.concat_batches`, so nothing pools across ranks that did not pool within one.
    With one process this is ``(batch, all rows, scores)``.
    """
    if not world.distributed:
        return batch, torch.arange(batch.num_samples), scores
    gathered = world.gather_objects((batch.to("cpu"), scores), "rollout: gather the step's batch")
    parts = [b for b, _ in gathered]
    all_scores = torch.cat([sc for _, sc in gathered]) if scores is not None else None
    shifted, groups, trajectories, first = [], 0, 0, 0
    for rank, part in enumerate(parts):
        shifted.append(_shifted(part, groups, trajectories))
        if rank < world.rank:
            first += part.num_samples
        groups += _max_id(part.group_index)
        trajectories += _max_id(part.trajectory_index)
    merged = concat_batches(shifted, pad_token_id=pad_token_id)
    return merged, torch.arange(first, first + batch.num_samples), all_scores
