"""Combiners that score each sample from its own objectives (no group statistics): the advantage
estimator then normalises the score as it would a single reward.

* ``sum_then_normalize``: ``s_i = Σ_k w_k r_ik`` over the objectives that apply (NaN skipped) — the
  default, and what TRL (``multi_objective_aggregation="sum_then_normalize"``) and verl do with several
  rewards. Distinct reward combinations with equal sums get identical advantages (GDPO's "collapse").
* ``gated``: ``s_i = [include_constraints]·Σ_c w_c r_ic + g_i · Σ_o w_o r_io`` with the gate
  ``g_i = 1`` when every constraint applies-and-passes (``r_ic ≥ threshold``) or does not apply, else 0
  (SearchLLM's gated combination: behaviour objectives count only when the bottom-line constraints pass).
* ``ensemble_min``: ``s_i = min_k w_k r_ik`` — the worst case of an ensemble of reward estimates
  (Coste et al.'s WCO; weights scale the members).
* ``mean_minus_std``: ``s_i = mean_k(w_k r_ik) − λ·std_k(w_k r_ik)`` (or ``− λ·var``) — the
  uncertainty-weighted objective (UWO) of reward-model ensembles.

Objectives with weight 0 are logged only; a sample with no applicable weighted objective is an error.
"""

from __future__ import annotations

from typing import Literal

import torch
from pydantic import BaseModel, ConfigDict, Field, field_validator
from torch import Tensor

from grove.batch import RolloutBatch
from grove.core import papers
from grove.core.objectives.combine import CombineOutput, active_objectives, require_scorable, weights_of
from grove.registry import REWARD_COMBINERS, NoParams


def _weighted(batch: RolloutBatch) -> tuple[Tensor, Tensor]:
    """``(w_k r_ik with NaN where r is NaN or the weight is 0, bool [N, K] valid)``."""
    values = batch.rewards * weights_of(batch)
    valid = ~torch.isnan(batch.rewards) & active_objectives(batch)
    return torch.where(valid, values, torch.full_like(values, float("nan"))), valid


@REWARD_COMBINERS.register(
    "sum_then_normalize",
    params=NoParams,
    paper=papers.GRPO,
    summary="Weighted sum of the objectives; the estimator normalises the sum (the default).",
    formula="s_i = Σ_k w_k r_ik (objectives that apply)",
    reference="TRL multi_objective_aggregation='sum_then_normalize'; verl's summed reward",
)
def sum_then_normalize(batch: RolloutBatch, params: NoParams) -> CombineOutput:
    """``s_i = Σ_k w_k r_ik`` over the objectives that apply to sample ``i`` (NaN skipped)."""
    require_scorable(batch, "sum_then_normalize")
    values, valid = _weighted(batch)
    contributions = torch.where(valid, values, torch.zeros_like(values))
    scores = contributions.sum(dim=1)
    return CombineOutput(scores, contributions, scores[:, None])


class GatedParams(BaseModel):
    """Parameters of ``gated``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    constraints: list[str] = Field(
        ..., min_length=1, description="Bottom-line objectives (names) that must pass for the others to count."
    )
    threshold: float = Field(1.0, description="A constraint passes when its value is >= this.")
    objectives: list[str] | None = Field(
        None, description="Behaviour objectives gated by the constraints (default: every other weighted objective)."
    )
    include_constraints: bool = Field(
        True, description="Add the constraints' own weighted values to the score (so failing ones are pushed up)."
    )

    @field_validator("constraints", "objectives")
    @classmethod
    def _unique(cls, v: list[str] | None) -> list[str] | None:
        if v is not None and len(set(v)) != len(v):
            raise ValueError(f"names must not repeat, got {v}")
        return v

    def check_objectives(self, names: tuple[str, ...]) -> None:
        """Raise naming the field when a constraint or objective is not one of ``names``."""
        for field_name in ("constraints", "objectives"):
            for name in getattr(self, field_name) or ():
                if name not in names:
                    raise ValueError(
                        f"reward_combination.{field_name}: {name!r} is not an objective; objectives: {', '.join(names)}"
                    )
        overlap = set(self.constraints) & set(self.objectives or ())
        if overlap:
            raise ValueError(f"reward_combination: {sorted(overlap)} are both constraints and gated objectives")


@REWARD_COMBINERS.register(
    "gated",
    params=GatedParams,
    paper=papers.SEARCHLLM,
    summary="Behaviour objectives count only when the bottom-line constraints pass.",
    formula="s_i = Σ_c w_c r_ic + 1[r_ic >= threshold ∀c] · Σ_o w_o r_io",
)
def gated(batch: RolloutBatch, params: GatedParams) -> CombineOutput:
    """Gated combination: ``s_i = [include]·Σ_c w_c r_ic + g_i Σ_o w_o r_io`` (constraints that do not apply pass)."""
    names = batch.reward_names
    params.check_objectives(names)
    require_scorable(batch, "gated")
    values, valid = _weighted(batch)
    contributions = torch.where(valid, values, torch.zeros_like(values))
    is_constraint = torch.tensor([n in params.constraints for n in names], device=values.device)
    if params.objectives is None:
        is_objective = ~is_constraint
    else:
        is_objective = torch.tensor([n in params.objectives for n in names], device=values.device)
    raw = batch.rewards[:, is_constraint]
    passes = (torch.isnan(raw) | (raw >= params.threshold)).all(dim=1)
    gate = passes.to(values.dtype)[:, None]
    contributions = torch.where(is_objective, contributions * gate, contributions)
    keep_constraints = is_constraint if params.include_constraints else torch.zeros_like(is_constraint)
    contributions = torch.where(is_objective | keep_constraints, contributions, torch.zeros_like(contributions))
    scores = contributions.sum(dim=1)
    return CombineOutput(scores, contributions, scores[:, None])


@REWARD_COMBINERS.register(
    "ensemble_min",
    params=NoParams,
    paper=papers.RM_ENSEMBLES,
    summary="Worst case over the objectives (reward-model ensemble members).",
    formula="s_i = min_k w_k r_ik",
)
def ensemble_min(batch: RolloutBatch, params: NoParams) -> CombineOutput:
    """Worst-case optimisation: ``s_i = min_k w_k r_ik`` over the members that apply."""
    require_scorable(batch, "ensemble_min")
    values, valid = _weighted(batch)
    scores = torch.where(valid, values, torch.full_like(values, float("inf"))).min(dim=1)
    contributions = torch.zeros_like(values)
    contributions.scatter_(1, scores.indices[:, None], scores.values[:, None])
    return CombineOutput(scores.values, contributions, scores.values[:, None])


class MeanMinusStdParams(BaseModel):
    """Parameters of ``mean_minus_std``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    coef: float = Field(1.0, ge=0, description="λ: how much the members' disagreement is subtracted.")
    spread: Literal["std", "variance"] = Field(
        "std", description="Subtract λ·std (default) or λ·variance (Coste et al.'s UWO) of the members."
    )
    unbiased: bool = Field(False, description="n - 1 divisor for the members' spread (default: population).")


@REWARD_COMBINERS.register(
    "mean_minus_std",
    params=MeanMinusStdParams,
    paper=papers.RM_ENSEMBLES,
    summary="Mean of the objectives minus λ times their spread (uncertainty-weighted).",
    formula="s_i = mean_k(w_k r_ik) - λ · std_k(w_k r_ik)",
)
def mean_minus_std(batch: RolloutBatch, params: MeanMinusStdParams) -> CombineOutput:
    """Uncertainty-weighted: ``s_i = mean_k(v_ik) − λ·spread_k(v_ik)`` with ``v = w r`` over the members that apply.

    Contributions (summing to ``s_i``): ``v_k / n − λ·d_k² / (n'·std)`` for ``spread: std`` (``d = v − mean``,
    ``n'`` the divisor), ``v_k / n − λ·d_k² / n'`` for ``variance``; 0 for members that do not apply.
    """
    require_scorable(batch, "mean_minus_std")
    values, valid = _weighted(batch)
    zeros = torch.zeros_like(values)
    n = valid.sum(dim=1, keepdim=True).to(values.dtype)
    v = torch.where(valid, values, zeros)
    mean = v.sum(dim=1, keepdim=True) / n
    d2 = torch.where(valid, (values - mean) ** 2, zeros)
    divisor = (n - 1 if params.unbiased else n).clamp_min(1)
    var = d2.sum(dim=1, keepdim=True) / divisor
    if params.spread == "std":
        std = var.sqrt()
        spread = std
        per_member = torch.where(std > 0, d2 / (divisor * std.clamp_min(1e-30)), zeros)
    else:
        spread = var
        per_member = d2 / divisor
    scores = (mean - params.coef * spread).squeeze(1)
    contributions = torch.where(valid, v / n - params.coef * per_member, zeros)
    return CombineOutput(scores, contributions, scores[:, None])
