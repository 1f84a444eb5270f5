"""Step-GRPO: step-specific rewards normalised within groups of *corresponding steps* (agent experience).

R1-Router ("Learning to Route Queries Across Knowledge Bases for Step-wise Retrieval-Augmented
Reasoning") gives every reasoning step its own reward (a routing step: is the knowledge base right, is
the follow-up query good; the answer step: is the answer right) and normalises them group-relatively.
The abstract leaves open *which* steps of the ``G`` trajectories of a question form a group; here it is
the ``grouping`` parameter. For step ``t`` with value ``v_t`` in corresponding-step group ``c(t)``::

    v_t   = r_t - p_t                                   (value: reward; p_t = invalid-action penalty)
          | R_t = r_t + gamma R_{t+1} - p_t             (value: return)
    A^S_t = (v_t - mean_c) / (std_c + eps)              (mode: mean_std_norm; mean_norm: v_t - mean_c)
    A_t   = A^S_t + w A^E_t                             (w = outcome_weight; A^E = GRPO over the episodes)

``c(t)`` is always inside one env group (the G trajectories of one question) and is, by ``grouping``:

* ``type_and_ordinal`` (default): same step type and same ordinal among the trajectory's steps of that
  type: the 1st query with the other 1st queries, the 2nd with the 2nd, every answer with the answers;
* ``type``: same step type (every query of the group together, every answer together);
* ``index``: same turn number (the classic "step t of each trajectory");
* ``anchor``: same environment state (GiGPO's anchor groups; the state key has no turn number).

**The bias of ``index`` grouping.** When the policy decides when to stop, the trajectories still running at
turn ``t`` are a selected subset, and turn ``t`` holds different kinds of step (one trajectory answers at
turn 1 while another queries again): their rewards are on different scales, so a step's advantage
depends on what the *other* trajectories chose to do at that turn, not on how good the step was, and
the last steps of the longest trajectory are alone in their group (advantage 0 with ``lone: zero``).
Type-based grouping compares answers with answers wherever they happen; its remaining selection
effect is that the k-th query is compared only among trajectories that made at least k queries. A
hand-worked example is in ``docs/step-grpo.md`` and ``tests/test_advantages_step_grpo.py``.

Conventions (shared with :mod:`~grove.core.advantages.gigpo`): unbiased std (n − 1) by default, ``eps``
added to the std, a group of equal values gives exactly 0, a group with one step gives 0 (``lone:
zero``) or its raw value (``lone: raw``: mean 0, std 1, verl's GRPO convention for singleton groups).
The episode part uses :func:`~grove.core.advantages.gigpo.episode_advantages` over trajectories.
Outcome-only GRPO on the same experience is ``episode_grpo``; GiGPO is ``gigpo``.
"""

from __future__ import annotations

from typing import Literal

import torch
from pydantic import BaseModel, ConfigDict, Field
from torch import Tensor

from grove.batch import RolloutBatch, StepTable
from grove.core import papers
from grove.core.advantages.common import AdvantageOutput, check_scores
from grove.core.advantages.gigpo import episode_advantages, step_returns
from grove.core.advantages.step_table_ops import (
    Mode,
    episode_stats,
    normalize_within,
    require_steps,
    step_output_dtype,
    step_stats,
    steps_to_tokens,
)
from grove.core.segments import segment_count
from grove.registry import ADVANTAGE_ESTIMATORS, Requires

__all__ = ["StepGRPOParams", "corresponding_steps", "step_grpo", "step_type_ordinal"]

Grouping = Literal["type_and_ordinal", "type", "index", "anchor"]


class StepGRPOParams(BaseModel):
    """Parameters of ``step_grpo``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    grouping: Grouping = Field(
        "type_and_ordinal",
        description="Which steps of an env group are compared: 'type_and_ordinal' (same step type and same rank "
        "among the trajectory's steps of that type), 'type', 'index' (same turn number; biased when the policy "
        "decides when to stop) or 'anchor' (same environment state, GiGPO's anchor groups).",
    )
    value: Literal["reward", "return"] = Field(
        "reward",
        description="'reward': the step's own reward r_t - p_t (Step-GRPO's step-specific reward); 'return': the "
        "discounted return R_t = r_t + gamma R_{t+1} - p_t.",
    )
    gamma: float = Field(1.0, ge=0.0, le=1.0, description="Discount of the returns (value: return only).")
    mode: Mode = Field(
        "mean_std_norm", description="'mean_std_norm': (v - mean) / (std + eps), GRPO's; 'mean_norm': v - mean."
    )
    eps: float = Field(1e-6, ge=0, description="Added to the std: (v - mean) / (std + eps).")
    unbiased_std: bool = Field(True, description="Std with the n - 1 divisor (torch.std).")
    lone: Literal["zero", "raw"] = Field(
        "zero",
        description="A step with no corresponding step in another trajectory: 'zero' (no relative signal) or "
        "'raw' (mean 0, std 1: its own value).",
    )
    outcome_weight: float = Field(
        0.0,
        description="w in A = A_step + w A_episode: adds the trajectory-level GRPO advantage of the episode score "
        "(sum of the trajectory's step rewards minus the step's penalty), normalised over the env group's trajectories.",
    )


def step_type_ordinal(steps: StepTable) -> Tensor:
    """``[S]`` long: the rank (0-based, by turn number) of each step among its trajectory's steps of its type."""
    n = steps.num_steps
    if n == 0:
        return torch.zeros(0, dtype=torch.long)
    order = torch.argsort(steps.index, stable=True)
    order = order[torch.argsort(steps.column("kind")[order], stable=True)]
    order = order[torch.argsort(steps.trajectory[order], stable=True)]
    traj, kind = steps.trajectory[order], steps.column("kind")[order]
    starts = torch.ones(n, dtype=torch.bool)
    starts[1:] = (traj[1:] != traj[:-1]) | (kind[1:] != kind[:-1])
    position = torch.arange(n)
    run_start = torch.cummax(torch.where(starts, position, torch.zeros_like(position)), dim=0).values
    ordinal = torch.empty(n, dtype=torch.long)
    ordinal[order] = position - run_start
    return ordinal


def corresponding_steps(steps: StepTable, grouping: Grouping) -> tuple[Tensor, int]:
    """Dense id ``[S]`` of each step's corresponding-step group and the number of groups."""
    if grouping == "anchor":
        columns = [steps.anchor]
    elif grouping == "index":
        columns = [steps.group, steps.index]
    elif grouping == "type":
        columns = [steps.group, steps.column("kind")]
    else:
        columns = [steps.group, steps.column("kind"), step_type_ordinal(steps)]
    if steps.num_steps == 0:
        return torch.zeros(0, dtype=torch.long), 0
    keys = torch.stack([c.to(torch.long) for c in columns], dim=1)
    unique, inverse = torch.unique(keys, dim=0, return_inverse=True)
    return inverse.to(torch.long), int(unique.shape[0])


def _step_values(steps: StepTable, params: StepGRPOParams) -> Tensor:
    if params.value == "return":
        return step_returns(steps, gamma=params.gamma, penalty="after_returns")
    return steps.reward.to(torch.float64) - steps.penalty.to(torch.float64)


@ADVANTAGE_ESTIMATORS.register(
    "step_grpo",
    params=StepGRPOParams,
    paper=papers.R1_ROUTER,
    summary="Step-GRPO: each step's own reward normalised over the corresponding steps of the G trajectories "
    "(step type and rank, turn number or anchor state), optionally plus the episode advantage (agents).",
    requires=(Requires.STEPS,),
    step_columns=("kind",),
    formula="A_t = (v_t - mean_c) / (std_c + eps) + w A^E_t, v_t = r_t - p_t, c = corresponding steps of t in its env group",
    reference="R1-Router (Step-GRPO); grouping of corresponding steps is our documented choice (docs/step-grpo.md)",
)
def step_grpo(batch: RolloutBatch, scores: Tensor, params: StepGRPOParams) -> AdvantageOutput:
    """Step-GRPO (R1-Router): step-specific rewards, group-relative over corresponding steps, scattered to tokens."""
    steps = require_steps(batch, "step_grpo")
    dtype = step_output_dtype(check_scores(batch, scores), steps)
    segment, num = corresponding_steps(steps, params.grouping)
    a_step = normalize_within(
        _step_values(steps, params),
        segment,
        num,
        mode=params.mode,
        eps=params.eps,
        unbiased=params.unbiased_std,
        lone=params.lone,
    )
    total = a_step
    parts = {"step": a_step}
    sizes = segment_count(segment, num).to(torch.float64)
    stats = {
        **step_stats(a_step),
        "step_groups": float(num),
        "step_group_size_mean": float(sizes.mean()) if num else 0.0,
        "lone_step_fraction": float((sizes[segment] == 1).to(torch.float64).mean()) if num else 0.0,
    }
    if params.outcome_weight:
        a_episode = episode_advantages(
            steps,
            mode=params.mode,
            episode_statistics="trajectories",
            eps=params.eps,
            unbiased_std=params.unbiased_std,
        )
        total = a_step + params.outcome_weight * a_episode
        parts["episode"] = params.outcome_weight * a_episode
        stats.update(episode_stats(a_episode))
    return AdvantageOutput(steps_to_tokens(batch, total, dtype), stats, parts)
