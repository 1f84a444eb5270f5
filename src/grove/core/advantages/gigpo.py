"""GiGPO: group-relative advantages at two levels, episodes and anchor-state steps (agent experience).

Feng et al. 2025, "Group-in-Group Policy Optimization for LLM Agent Training". Everything is computed
per environment *step* on the step table ``batch.steps`` and then scattered to the tokens each step
produced through ``batch.token_steps`` (0 where it is ``-1``: environment tokens, pads), so the numbers
are the same whether a sample holds one step (per-step prompts, verl-agent's layout) or a whole
trajectory (one growing conversation).

For a step ``t`` of trajectory ``j`` in env group ``g`` with anchor group ``a`` (the steps of ``g``
that acted from the same environment state)::

    score_t  = sum_k r_{j,k} - p_t                       episode score (penalty: after_returns)
    A^E_t    = (score_t - mean_g) [/ (std_g + eps)]      mean/std over the steps of g (or its trajectories)
    R_t      = r_t + gamma R_{t+1} - p_t                 discounted return, penalty after the return
    A^S_t    = (R_t - mean_a) [/ (std_a + eps)]          mean/std over the steps of anchor group a
    A_t      = A^E_t + omega A^S_t

Conventions match verl-agent (``gigpo/core_gigpo.py`` and ``apply_invalid_action_penalty`` in
``verl/trainer/ppo/ray_trainer.py``, commit ``796ed31``): unbiased ``torch.std``; ``eps = 1e-6`` added
to the std; ``mode`` (``mean_norm``: no std division, ``mean_std_norm``) applies to both levels; an
env group with a single member uses mean 0 and std 1; an anchor group with a single step gets
``A^S = 0``; by default the episode statistics count a ``T``-step trajectory ``T`` times
(``compute_mean_std_cross_steps=True``); the invalid-action penalty is subtracted from the step's
episode score and from its return after discounting. The one deviation: a group whose values are all
equal gives exactly 0 (verl-agent divides its floating-point residue by ``eps``). Details:
``docs/algorithms-gigpo.md``.

``scores`` (the episode scores per sample) is only shape-checked: the per-step episode scores are
recomputed from the step table, which is what makes the two layouts agree.
"""

from __future__ import annotations

from typing import Literal

import torch
from pydantic import BaseModel, ConfigDict, Field
from torch import Tensor

from grove.batch import RolloutBatch, StepTable
from grove.core import papers
from grove.core.advantages.common import AdvantageOutput, check_scores
from grove.core.advantages.step_credit_diagnostics import step_credit_diagnostics
from grove.core.advantages.step_table_ops import (
    Mode,
    episode_stats,
    first_steps,
    moments,
    normalize_within,
    require_steps,
    step_output_dtype,
    step_stats,
    steps_to_tokens,
)
from grove.core.segments import dense_index, segment_discounted_returns
from grove.registry import ADVANTAGE_ESTIMATORS, Requires

__all__ = [
    "EpisodeGRPOParams",
    "GiGPOParams",
    "StepReturnParams",
    "episode_advantages",
    "episode_grpo",
    "gigpo",
    "step_advantages",
    "step_discounted_return",
    "step_episode_scores",
    "step_returns",
]

EpisodeStatistics = Literal["steps", "trajectories"]
Penalty = Literal["after_returns", "in_reward"]
EpisodeScore = Literal["return", "outcome"]
StartState = Literal["anchor", "excluded"]

_MODE = "'mean_norm': A = x - mean (verl-agent's default); 'mean_std_norm': A = (x - mean) / (std + eps)."
_PENALTY = (
    "'after_returns' (verl-agent): a step's penalty is subtracted from that step's episode score and from its "
    "return R_t after discounting; 'in_reward': subtracted from r_t before discounting (it propagates to earlier "
    "steps) and from the trajectory's episode return."
)
_EPISODE_STATISTICS = (
    "Who enters the episode mean/std of an env group: 'steps' (verl-agent's compute_mean_std_cross_steps=True: "
    "a T-step trajectory counts T times) or 'trajectories' (once each, with its first step's episode score)."
)


# --------------------------------------------------------------------------- parameter models
_GAMMA = "Discount of the step returns R_t = r_t + gamma R_{t+1}."


class _NormalisationParams(BaseModel):
    """What every estimator here shares: the normalisation mode, the penalty placement, the std convention."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    mode: Mode = Field("mean_norm", description=_MODE + " (gigpo: applies to both levels.)")
    penalty: Penalty = Field("after_returns", description=_PENALTY)
    eps: float = Field(1e-6, ge=0, description="Added to the std in mean_std_norm: (x - mean) / (std + eps).")
    unbiased_std: bool = Field(True, description="Std with the n - 1 divisor (torch.std, verl-agent).")


class EpisodeGRPOParams(_NormalisationParams):
    """Parameters of ``episode_grpo`` (the arguments of :func:`episode_advantages`)."""

    episode_statistics: EpisodeStatistics = Field("steps", description=_EPISODE_STATISTICS)
    episode_score: EpisodeScore = Field(
        "return",
        description="What an episode scores: 'return' (the sum of its step rewards, GiGPO's) or 'outcome' (the sum of "
        "the outcomes the environment reports in info['outcome'], e.g. the final answer's correctness: outcome-only "
        "GRPO, Search-R1's reward, whatever step rewards the environment also gives). The penalty applies to both.",
    )


class StepReturnParams(_NormalisationParams):
    """Parameters of ``step_discounted_return``."""

    gamma: float = Field(0.95, ge=0.0, le=1.0, description=_GAMMA)


class GiGPOParams(EpisodeGRPOParams):
    """Parameters of ``gigpo``: the episode part's, plus the discount and the step part's weight."""

    gamma: float = Field(0.95, ge=0.0, le=1.0, description=_GAMMA)
    step_advantage_weight: float = Field(
        1.0, description="omega in A = A_episode + omega A_step (verl-agent's step_advantage_w)."
    )
    match_episode_rms: bool = Field(
        False,
        description="The scale-matched control: A = A_episode + omega A_step rescaled per batch so that its RMS over "
        "the steps equals A_episode's. The update then has GRPO-on-trajectories' magnitude and GiGPO's direction, "
        "which separates GiGPO's credit assignment from the larger steps its added term takes (not in verl-agent).",
    )
    start_state: StartState = Field(
        "anchor",
        description="'anchor' (verl-agent): the start state is an anchor state like any other, so turn 0's anchor group "
        "is its whole env group and its A_step re-ranks the episodes by discounted return; 'excluded' (a deviation "
        "from verl-agent, after HGPO's observation that the start state carries no step-level choice to credit): "
        "turn-0 steps belong to no anchor group (A_step = 0), the episode term alone credits the first action.",
    )


def _rms_ratio(target: Tensor, x: Tensor) -> float:
    """``rms(target) / rms(x)`` over the steps (1 when ``x`` is all zeros)."""
    rms_x = float(x.double().square().mean().sqrt()) if x.numel() else 0.0
    return float(target.double().square().mean().sqrt()) / rms_x if rms_x > 0 else 1.0


# --------------------------------------------------------------------------- per-step quantities
def _rewards(steps: StepTable, *, penalty: Penalty, score: EpisodeScore = "return") -> tuple[Tensor, Tensor]:
    """The rewards that are discounted and summed (the outcomes with ``score="outcome"``), and the penalty left to
    subtract afterwards (float64)."""
    reward = (steps.column("outcome") if score == "outcome" else steps.reward).to(torch.float64)
    charge = steps.penalty.to(torch.float64)
    if penalty == "in_reward":
        return reward - charge, torch.zeros_like(charge)
    return reward, charge


def step_episode_scores(
    steps: StepTable, *, penalty: Penalty = "after_returns", score: EpisodeScore = "return"
) -> Tensor:
    """``[S]`` float64: each step's episode score, the sum of its trajectory's rewards minus the penalty.

    ``after_returns`` (verl-agent): ``sum_k r_k - p_t``, the step's own penalty only. ``in_reward``:
    ``sum_k (r_k - p_k)``, every penalty of the trajectory, the same for all its steps. With
    ``score="outcome"`` the reported outcomes ``o_k`` (the step table's ``outcome`` column) take the place of the rewards.
    """
    reward, charge = _rewards(steps, penalty=penalty, score=score)
    trajectory, num = dense_index(steps.trajectory)
    total = reward.new_zeros(num).index_add(0, trajectory, reward)
    return total[trajectory] - charge


def step_returns(steps: StepTable, *, gamma: float, penalty: Penalty = "after_returns") -> Tensor:
    """``[S]`` float64: ``R_t = r_t + gamma R_{t+1}`` along each trajectory (by turn), minus the penalty.

    ``after_returns`` (verl-agent): ``R_t`` of the env rewards, then ``- p_t`` (not discounted backwards);
    ``in_reward``: ``R_t`` of ``r_t - p_t``.
    """
    reward, charge = _rewards(steps, penalty=penalty)
    return segment_discounted_returns(reward, steps.trajectory, steps.index, gamma=gamma) - charge


def episode_advantages(
    steps: StepTable,
    *,
    mode: Mode = "mean_norm",
    episode_statistics: EpisodeStatistics = "steps",
    penalty: Penalty = "after_returns",
    eps: float = 1e-6,
    unbiased_std: bool = True,
    episode_score: EpisodeScore = "return",
) -> Tensor:
    """``[S]`` float64: GiGPO's episode advantage ``A^E`` of every step (verl-agent ``episode_norm_reward``).

    Each step's episode score is normalised over its env group (``steps.group``): over all its steps
    (``"steps"``, a T-step trajectory counts T times) or over its trajectories (``"trajectories"``, each
    once with the score of its first step, the row verl-agent sees first). A group with one member: mean
    0, std 1; a group of equal scores: 0.
    """
    score = step_episode_scores(steps, penalty=penalty, score=episode_score)
    group, num = dense_index(steps.group)
    members = first_steps(steps) if episode_statistics == "trajectories" else None
    return normalize_within(
        score, group, num, mode=mode, eps=eps, unbiased=unbiased_std, lone="raw", members=members
    )


def step_advantages(
    steps: StepTable,
    *,
    gamma: float = 0.95,
    mode: Mode = "mean_norm",
    penalty: Penalty = "after_returns",
    eps: float = 1e-6,
    unbiased_std: bool = True,
    start_state: StartState = "anchor",
) -> Tensor:
    """``[S]`` float64: GiGPO's step advantage ``A^S`` (verl-agent ``step_norm_reward``): each step's
    discounted return normalised over its anchor group; a lone step in its anchor group gets 0. With
    ``start_state: excluded`` the steps of turn 0 belong to no anchor group (each gets 0)."""
    returns = step_returns(steps, gamma=gamma, penalty=penalty)
    anchors = steps.anchor
    if start_state == "excluded":  # each first step alone: ids below every anchor id, one per step
        first = steps.index == 0
        alone = anchors.min() - 1 - torch.arange(len(anchors), device=anchors.device)
        anchors = torch.where(first, alone, anchors)
    anchor, num = dense_index(anchors)
    return normalize_within(returns, anchor, num, mode=mode, eps=eps, unbiased=unbiased_std, lone="zero")


# --------------------------------------------------------------------------- estimators
@ADVANTAGE_ESTIMATORS.register(
    "gigpo",
    params=GiGPOParams,
    paper=papers.GIGPO,
    summary="Episode-level group advantage plus anchor-state step-level advantage of discounted returns (agents).",
    requires=(Requires.STEPS,),
    step_columns=("outcome",),  # read with episode_score: outcome
    formula=(
        "A_t = (s_t - mean_g) [/ (std_g + eps)] + omega (R_t - mean_a) [/ (std_a + eps)], "
        "s_t = sum_k r_k - p_t, R_t = r_t + gamma R_{t+1} - p_t, a = anchor group of step t"
    ),
    reference="verl-agent gigpo/core_gigpo.py::compute_gigpo_outcome_advantage (796ed31)",
)
def gigpo(batch: RolloutBatch, scores: Tensor, params: GiGPOParams) -> AdvantageOutput:
    """GiGPO (Feng et al. 2025): ``A = A^E + omega A^S`` per environment step, scattered to its tokens."""
    steps = require_steps(batch, "gigpo")
    dtype = step_output_dtype(check_scores(batch, scores), steps)
    a_episode = episode_advantages(steps, **params.model_dump(include=set(EpisodeGRPOParams.model_fields)))
    a_step = step_advantages(
        steps, **params.model_dump(
            exclude={"episode_statistics", "episode_score", "step_advantage_weight", "match_episode_rms"}
        )
    )
    weighted_step = params.step_advantage_weight * a_step
    combined = a_episode + weighted_step
    scale = _rms_ratio(a_episode, combined) if params.match_episode_rms else 1.0
    combined = combined * scale
    advantages = steps_to_tokens(batch, combined, dtype)
    parts = {"episode": a_episode * scale, "step": weighted_step * scale}
    stats = {**episode_stats(a_episode), **step_stats(a_step),
             **step_credit_diagnostics(steps, a_episode, a_step, combined)}
    return AdvantageOutput(advantages, stats, parts)


@ADVANTAGE_ESTIMATORS.register(
    "episode_grpo",
    params=EpisodeGRPOParams,
    paper=papers.GIGPO,
    summary="GiGPO's episode-level advantage alone: GRPO over the trajectories of an env group (agents).",
    requires=(Requires.STEPS, Requires.GROUPS),
    step_columns=("outcome",),  # read with episode_score: outcome
    formula="A_t = (s_t - mean_g) [/ (std_g + eps)], s_t = sum_k r_k - p_t (= gigpo with omega = 0)",
    reference="verl-agent gigpo/core_gigpo.py::episode_norm_reward (796ed31)",
)
def episode_grpo(batch: RolloutBatch, scores: Tensor, params: EpisodeGRPOParams) -> AdvantageOutput:
    """GiGPO's episode advantage only (GRPO on trajectories); equals ``gigpo`` with ``step_advantage_weight: 0``."""
    steps = require_steps(batch, "episode_grpo")
    dtype = step_output_dtype(check_scores(batch, scores), steps)
    a_episode = episode_advantages(steps, **params.model_dump())
    return AdvantageOutput(steps_to_tokens(batch, a_episode, dtype), episode_stats(a_episode), {"episode": a_episode})


@ADVANTAGE_ESTIMATORS.register(
    "step_discounted_return",
    params=StepReturnParams,
    paper=papers.GIGPO,
    summary="Baseline for GiGPO: each step's discounted return normalised over all steps of its env group, no anchors.",
    requires=(Requires.STEPS,),
    formula="A_t = (R_t - mean_g) [/ (std_g + eps)], R_t = r_t + gamma R_{t+1} - p_t, over the steps of env group g",
    reference="GiGPO's step returns (verl-agent compute_step_discounted_returns) with env-group statistics",
)
def step_discounted_return(batch: RolloutBatch, scores: Tensor, params: StepReturnParams) -> AdvantageOutput:
    """Discounted step returns normalised over the env group: a step-level baseline without anchor states."""
    steps = require_steps(batch, "step_discounted_return")
    dtype = step_output_dtype(check_scores(batch, scores), steps)
    returns = step_returns(steps, gamma=params.gamma, penalty=params.penalty)
    group, num = dense_index(steps.group)
    a_step = normalize_within(
        returns, group, num, mode=params.mode, eps=params.eps, unbiased=params.unbiased_std, lone="raw"
    )
    mean, std = moments(a_step)
    return AdvantageOutput(steps_to_tokens(batch, a_step, dtype), {"step_mean": mean, "step_std": std})
