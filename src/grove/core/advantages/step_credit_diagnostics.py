"""What GiGPO's step-level credit had to work with, measured on a step's batch: the numbers that say whether anchor
states could change anything.

GiGPO (Feng et al. 2025, "Group-in-Group Policy Optimization for LLM Agent Training") adds ``omega * A^S`` to the
episode advantage ``A^E``: the step's discounted return compared with the other steps taken from the same state. It
can only reassign credit where a state recurs (an anchor group of two or more steps), the actions taken from it
differ, and the returns after them differ. Where every success has the same length, ``A^S`` is nearly a scaled copy
of ``A^E`` and the method reduces to GRPO with some steps up-weighted. :func:`step_credit_diagnostics` measures
each condition per step (logged as the estimator's statistics, so ``metrics.jsonl``, the report and ``grove view``
show them):

* ``step_nonzero_frac``: share of steps with ``A^S != 0`` (a lone step in its anchor group gets 0);
* ``anchor_distinct_actions_frac``: among anchor groups of two or more steps, the share whose steps took two or
  more distinct actions (the step table's ``action`` column, :func:`grove.experience.step_annotators.step_action`);
* ``step_episode_corr``: the Pearson correlation of ``A^S`` and ``A^E`` over the steps with ``A^S != 0`` (near 1:
  the step term repeats the episode term);
* ``advantage_rms_turn/{k}``: the root mean square of the combined advantage at turn ``k`` (0, 1, 2, 3 and ``4+``):
  where the step term concentrates the update.
"""

from __future__ import annotations

import torch
from torch import Tensor

from grove.batch import StepTable
from grove.core.segments import dense_index, segment_count

__all__ = ["TURN_BINS", "step_credit_diagnostics"]

#: the turns whose advantage RMS is logged on its own; later turns share the last bin
TURN_BINS = 4


def step_credit_diagnostics(steps: StepTable, a_episode: Tensor, a_step: Tensor, combined: Tensor) -> dict[str, float]:
    """The diagnostics of the module docstring for one step's batch (``[S]`` tensors in step-table order); none for
    a batch without steps."""
    if combined.numel() == 0:
        return {}
    out = {"step_episode_corr": _correlation(a_step, a_episode, a_step != 0)}
    if "action" in steps.columns:
        out["anchor_distinct_actions_frac"] = _distinct_action_share(steps.anchor, steps.column("action"))
    turn = steps.index.clamp(max=TURN_BINS)
    squares = torch.zeros(TURN_BINS + 1, dtype=torch.float64).index_add_(0, turn, combined.double() ** 2)
    counts = torch.bincount(turn, minlength=TURN_BINS + 1)
    for k in range(TURN_BINS + 1):
        label = f"{k}" if k < TURN_BINS else f"{TURN_BINS}+"
        if counts[k]:
            out[f"advantage_rms_turn/{label}"] = float((squares[k] / counts[k]).sqrt())
    return out


def _correlation(x: Tensor, y: Tensor, where: Tensor) -> float:
    """Pearson correlation of ``x`` and ``y`` over ``where``; NaN with fewer than two points or no spread."""
    x, y = x[where].double(), y[where].double()
    if x.numel() < 2:
        return float("nan")
    x, y = x - x.mean(), y - y.mean()
    denominator = (x.square().sum() * y.square().sum()).sqrt()
    return float((x * y).sum() / denominator) if denominator > 0 else float("nan")


def _distinct_action_share(anchor: Tensor, action: Tensor) -> float:
    """Among anchor groups of two or more steps, the share whose steps took at least two distinct actions; NaN when
    no state recurred."""
    group, num = dense_index(anchor)
    shared = segment_count(group, num) >= 2
    if not bool(shared.any()):
        return float("nan")
    pairs = torch.unique(torch.stack([group, action.long()]), dim=1)  # distinct (group, action) pairs
    distinct = segment_count(pairs[0], num) >= 2
    return float((distinct & shared).sum()) / float(shared.sum())
