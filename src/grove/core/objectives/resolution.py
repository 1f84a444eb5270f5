"""The resolution of a multi-reward training signal: how many distinct advantages a group's distinct reward
combinations become.

GDPO ("GDPO: Group reward-Decoupled Normalization Policy Optimization") argues that normalising the *sum* of several
rewards inside a group maps distinct reward combinations onto the same advantage ((1, 0) and (0, 1) both sum to 1),
lowering the resolution of the signal, while normalising each reward first keeps them apart.
:func:`advantage_resolution` measures it on a step's batch, per prompt group:

* ``resolution/reward_combinations``: the mean number of distinct reward rows in a group (a NaN, an objective that
  does not apply, is a value of its own);
* ``resolution/advantage_values``: the mean number of distinct sequence advantages in a group (equal to within
  ``1e-6``);
* ``resolution/collapsed_group_fraction``: the share of groups with fewer distinct advantages than reward
  combinations (where the combiner merged combinations the rewards tell apart).
"""

from __future__ import annotations

import torch
from torch import Tensor

from grove.core.segments import dense_index, segment_count

__all__ = ["ADVANTAGE_TOLERANCE", "advantage_resolution"]

#: advantages closer than this count as one value
ADVANTAGE_TOLERANCE = 1e-6


def advantage_resolution(rewards: Tensor, sequence_advantages: Tensor, group_index: Tensor) -> dict[str, float]:
    """The resolution metrics of the module docstring for ``rewards [N, K]``, each sample's advantage ``[N]`` and
    its prompt group ``[N]``; none for an empty batch."""
    if rewards.shape[0] == 0:
        return {}
    group, num = dense_index(group_index)
    combinations = _distinct_per_group(group, num, torch.nan_to_num(rewards.double(), nan=float("inf")))
    quantised = torch.round(sequence_advantages.double() / ADVANTAGE_TOLERANCE)[:, None]
    values = _distinct_per_group(group, num, quantised)
    return {
        "resolution/reward_combinations": float(combinations.double().mean()),
        "resolution/advantage_values": float(values.double().mean()),
        "resolution/collapsed_group_fraction": float((values < combinations).double().mean()),
    }


def _distinct_per_group(group: Tensor, num: int, rows: Tensor) -> Tensor:
    """``long [num]``: how many distinct rows of ``rows`` each group holds."""
    keyed = torch.cat([group[:, None].to(rows.dtype), rows], dim=1)
    distinct = torch.unique(keyed, dim=0)
    return segment_count(distinct[:, 0].long(), num)
