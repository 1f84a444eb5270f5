"""BNPO's advantage: a group-mean baseline weighted by the inverse Beta density of the group's pass rate.

BNPO (Xiao et al. 2025), matched to the authors' code (changyi7231/BNPO,
``recipe/bnpo/src/bnpo_ray_trainer.py::compute_bnpo_outcome_advantage``).
"""

from __future__ import annotations

import torch
from pydantic import BaseModel, ConfigDict, Field, model_validator
from torch import Tensor

from grove.batch import RolloutBatch
from grove.core import papers
from grove.core.advantages.common import check_scores
from grove.core.advantages.group_norm import NormConfig, normalize_scores
from grove.core.segments import broadcast, dense_index, segment_count, segment_mean
from grove.core.token_ops import per_token
from grove.registry import ADVANTAGE_ESTIMATORS, Requires


class BNPOParams(BaseModel):
    """Parameters of ``bnpo``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    min_value: float = Field(0.0, description="Lowest possible score; scores are mapped to [0, 1].")
    max_value: float = Field(1.0, description="Highest possible score.")
    max_weight: float = Field(1e6, gt=0, description="Clamp of the weight 1 / Beta_pdf(p).")

    @model_validator(mode="after")
    def _range(self) -> BNPOParams:
        if self.max_value <= self.min_value:
            raise ValueError("max_value must be greater than min_value")
        return self


def beta_parameters(p: Tensor) -> tuple[Tensor, Tensor]:
    """BNPO's Beta(alpha, beta) fitted to per-group success rates ``p [G]`` (authors' code).

    Method of moments ``a = (m (1 - m) / v - 1) m``, ``b = (m (1 - m) / v - 1)(1 - m)`` with ``m`` the
    mean and ``v`` the unbiased variance of ``p``, then ``alpha = max(1 + a / 3, 1)``,
    ``beta = max(1 + b / 3, 1)``. One group: ``m = 0, v = 1`` (authors' fallback, giving Beta(1, 1)).
    Where the fit is undefined (``v = 0``; NaN in the authors' code) we use Beta(1, 1) as well.
    """
    if p.numel() > 1:
        m, v = p.mean(), p.var()
    else:
        m, v = p.new_zeros(()), p.new_ones(())
    shape = m * (1 - m) / v - 1
    alpha = torch.clamp(1 + shape * m / 3, min=1.0)
    beta = torch.clamp(1 + shape * (1 - m) / 3, min=1.0)
    ok = torch.isfinite(alpha) & torch.isfinite(beta)
    return torch.where(ok, alpha, torch.ones_like(alpha)), torch.where(ok, beta, torch.ones_like(beta))


@ADVANTAGE_ESTIMATORS.register(
    "bnpo",
    params=BNPOParams,
    paper=papers.BNPO,
    summary="Group-mean baseline weighted by 1 / Beta pdf of the pass rate.",
    requires=(Requires.GROUPS,),
    formula="s = (r - min)/(max - min), p_g = mean_g(s), A_i = clamp(1 / Beta_pdf(p_g; alpha, beta), 0, max_weight) (s_i - p_g)",
    reference="authors' code, changyi7231/BNPO recipe/bnpo/src/bnpo_ray_trainer.py::compute_bnpo_outcome_advantage",
)
def bnpo(batch: RolloutBatch, scores: Tensor, params: BNPOParams) -> Tensor:
    """BNPO (Xiao et al. 2025, "BNPO: Beta Normalization Policy Optimization").

    Scores are mapped to ``s = (r - min_value) / (max_value - min_value)``; ``p_g`` is the group
    mean of ``s`` (0 for a single-sample group, as the authors' code); a Beta(alpha, beta) is fitted
    to the batch's ``p_g`` (:func:`beta_parameters`) and ``A_i = w(p_g) (s_i - p_g)`` with
    ``w = clamp(1 / Beta_pdf(p_g; alpha, beta), 0, max_weight)``. With Beta(1, 1) this is
    ``s - p_g`` (REINFORCE with a group-mean baseline); with alpha = beta = 1.5, ``w`` is proportional to GRPO's
    ``1 / sqrt(p (1 - p))``. The authors' optional "advantage decomposition" (averaging BNPO over
    several reward components) is not implemented; ``scores`` is the already-combined reward.
    """
    scores = check_scores(batch, scores)
    s = (scores - params.min_value) / (params.max_value - params.min_value)
    group, num_groups = dense_index(batch.group_index)
    count = segment_count(group, num_groups)
    p = torch.where(count > 1, segment_mean(s, group, num_groups), s.new_zeros(num_groups))
    if bool(((p < 0) | (p > 1)).any()):
        raise ValueError("BNPO group means must lie in [0, 1]: set min_value and max_value to the score range")
    alpha, beta = beta_parameters(p)
    log_pdf = (
        torch.xlogy(alpha - 1, p)
        + torch.xlogy(beta - 1, 1 - p)
        + torch.lgamma(alpha + beta)
        - torch.lgamma(alpha)
        - torch.lgamma(beta)
    )
    weight = torch.clamp(1 / log_pdf.exp(), min=0.0, max=params.max_weight)
    centered = normalize_scores(s, batch.group_index, NormConfig(std_level="none"))
    return per_token(broadcast(weight, group) * centered, batch.response_mask)
