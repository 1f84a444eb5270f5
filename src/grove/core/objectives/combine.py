"""What every reward combiner shares: the signature, the output, the signal test and per-objective statistics.

A combiner is ``fn(batch: RolloutBatch, params) -> CombineOutput``. It reads the named reward matrix
``batch.rewards [N, K]`` (NaN: the objective does not apply to that sample), the objectives' weights
``batch.reward_weights`` (``K`` floats; 0 means "logged only", never part of the score) and the hierarchy
(``batch.group_index``, and the policy tokens for token-weighted statistics). It returns

* ``scores [N]``: what the advantage estimator receives (a reward, or already an advantage when the
  combiner normalises completely — then pair it with the ``score_as_advantage`` estimator);
* ``contributions [N, K]``: each objective's additive part of the score (they sum to ``scores`` up to a
  per-group constant), from which the metrics attribute the advantage to objectives;
* ``signal [N, J]``: the columns whose variation inside a group carries learning signal under this
  combiner. Dynamic sampling keeps a group when any of them varies. For combiners that normalise each
  objective separately these are the components, so a group whose objectives differ but whose weighted
  sums tie is kept (the filter of frameworks that test the summed reward drops it).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from pydantic import BaseModel
from torch import Tensor

from grove.batch import RolloutBatch
from grove.core.segments import broadcast, dense_index, segment_nan_spread, segment_nan_stats, segment_sum

__all__ = [
    "CombineFn",
    "CombineOutput",
    "active_objectives",
    "informative_from_signal",
    "objective_statistics",
    "require_scorable",
    "run_combiner",
    "weights_of",
]


@dataclass(frozen=True)
class CombineOutput:
    scores: Tensor  # [N]
    contributions: Tensor  # [N, K]
    signal: Tensor  # [N, J]


#: the signature of a registered reward combiner
CombineFn = Callable[[RolloutBatch, BaseModel], CombineOutput]


def weights_of(batch: RolloutBatch) -> Tensor:
    """The objectives' weights ``[K]`` (all 1 when the batch carries none), in the rewards' dtype."""
    k = batch.rewards.shape[1]
    values = batch.reward_weights or (1.0,) * k
    return torch.tensor(values, dtype=batch.rewards.dtype, device=batch.rewards.device)


def active_objectives(batch: RolloutBatch) -> Tensor:
    """``bool [K]``: objectives with a non-zero weight (weight 0 means "logged only")."""
    return weights_of(batch) != 0


def require_scorable(batch: RolloutBatch, combiner: str) -> None:
    """Raise when some sample has no applicable objective with a non-zero weight (all NaN)."""
    values = batch.rewards[:, active_objectives(batch)]
    missing = torch.isnan(values).all(dim=1)
    if bool(missing.any()):
        bad = missing.nonzero().flatten().tolist()
        shown = ", ".join(map(str, bad[:10])) + (", …" if len(bad) > 10 else "")
        raise ValueError(
            f"reward combiner {combiner!r}: no weighted objective applies to sample(s) {shown} (all of "
            f"{', '.join(n for n, a in zip(batch.reward_names, active_objectives(batch).tolist(), strict=True) if a)} "
            f"are None/NaN); every sample needs at least one applicable reward"
        )


def run_combiner(fn: CombineFn, batch: RolloutBatch, params: BaseModel) -> CombineOutput:
    """Call a combiner and check the shapes of what it returns."""
    out = fn(batch, params)
    n, k = batch.rewards.shape
    if out.scores.shape != (n,) or out.contributions.shape != (n, k) or out.signal.ndim != 2 or out.signal.shape[0] != n:
        raise ValueError(
            f"reward combiner returned scores {tuple(out.scores.shape)}, contributions "
            f"{tuple(out.contributions.shape)}, signal {tuple(out.signal.shape)} for rewards {(n, k)}"
        )
    return out


def informative_from_signal(signal: Tensor, group_index: Tensor) -> Tensor:
    """``bool [N]``: some signal column varies (ignoring NaN) inside the sample's group."""
    group, num_groups = dense_index(group_index)
    varies = (segment_nan_spread(signal, group, num_groups) > 0).any(dim=1)
    return broadcast(varies, group)


def objective_statistics(
    batch: RolloutBatch, out: CombineOutput, sequence_advantages: Tensor, names: Sequence[str]
) -> dict[str, float]:
    """Per-objective metrics: signal, advantage share and the objective's own group-normalised advantage.

    * ``objective/<name>/signal_group_fraction``: of the groups where the objective applies to at least two
      samples, the fraction in which it varies (a group where it is constant gives it no signal);
    * ``objective/<name>/advantage_share``: ``Σ_i c̃_ik A_i / Σ_i s̃_i A_i``, where ``c̃_ik`` is the objective's
      contribution centred within its group, ``s̃ = Σ_k c̃_k`` and ``A_i`` the sample's final advantage (its
      mean over policy tokens). The shares sum to 1; an objective whose share stays near 0 is not being
      optimised, one near 1 dominates;
    * ``objective/<name>/advantage_abs_mean``: mean ``|z|`` of the objective's own group z-score
      ``(r - mean_g) / (std_g + 1e-6)`` over the samples it applies to (how much signal it would carry alone).
    """
    group, num_groups = dense_index(batch.group_index)
    rewards = batch.rewards
    stats: dict[str, float] = {}
    mean, std, count = segment_nan_stats(rewards, group, num_groups, unbiased=True)
    spread = segment_nan_spread(rewards, group, num_groups)
    contrib = torch.nan_to_num(out.contributions, nan=0.0)
    sizes = torch.bincount(group, minlength=num_groups).clamp_min(1).to(contrib.dtype)[:, None]
    centred = contrib - broadcast(segment_sum(contrib, group, num_groups) / sizes, group)
    adv = sequence_advantages.to(contrib.dtype)
    total = float((centred.sum(dim=1) * adv).sum())
    per_objective = (centred * adv[:, None]).sum(dim=0)
    z = (rewards - broadcast(mean, group)) / (broadcast(std, group) + 1e-6)
    for k, name in enumerate(names):
        applies = count[:, k] >= 2
        if bool(applies.any()):
            stats[f"objective/{name}/signal_group_fraction"] = float((spread[applies, k] > 0).float().mean())
        if total != 0.0:
            stats[f"objective/{name}/advantage_share"] = float(per_objective[k]) / total
        zk = z[:, k]
        zk = zk[~torch.isnan(zk)]
        if zk.numel():
            stats[f"objective/{name}/advantage_abs_mean"] = float(zk.abs().mean())
    return stats
