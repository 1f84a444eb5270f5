"""GPG's advantage: a group-mean baseline scaled by the share of samples that carry a gradient.

Chu et al. 2025, "GPG: A Simple and Strong Reinforcement Learning Baseline for Model Reasoning"; as
verl's ``compute_gpg_outcome_advantage``. Shared conventions of :mod:`grove.core.advantages.group_norm`:
a single-sample group has baseline 0, and a group whose scores are all equal gets exactly 0.
"""

from __future__ import annotations

from typing import Literal

import torch
from pydantic import BaseModel, ConfigDict, Field
from torch import Tensor

from grove.batch import RolloutBatch
from grove.core import papers
from grove.core.advantages.common import check_scores
from grove.core.advantages.group_norm import NormConfig, normalize_scores
from grove.core.token_ops import per_token
from grove.registry import ADVANTAGE_ESTIMATORS, Requires


class GPGParams(BaseModel):
    """Parameters of ``gpg``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    f_norm: float = Field(1.0, gt=0, description="Constant divisor F_norm: A = alpha * (r - mean_g) / f_norm.")
    alpha: Literal["nonzero_reward", "nonzero_advantage", "none"] = Field(
        "nonzero_reward",
        description=(
            "Batch factor alpha = N / max(M, 1). 'nonzero_reward': M = #samples with r != 0 (verl); "
            "'nonzero_advantage': M = #samples with r - mean_g != 0 (the paper's B / (B - M_invalid)); "
            "'none': alpha = 1."
        ),
    )


@ADVANTAGE_ESTIMATORS.register(
    "gpg",
    params=GPGParams,
    paper=papers.GPG,
    summary="Group-mean baseline scaled by the valid-sample factor alpha.",
    requires=(Requires.GROUPS,),
    formula="A_i = alpha (r_i - mean_g) / f_norm, alpha = N / max(M, 1)",
    reference="verl compute_gpg_outcome_advantage (alpha: nonzero_reward)",
)
def gpg(batch: RolloutBatch, scores: Tensor, params: GPGParams) -> Tensor:
    """GPG (Chu et al. 2025, "GPG: A Simple and Strong Reinforcement Learning Baseline for Model Reasoning").

    ``A_i = alpha * (r_i - mean_g) / f_norm`` with ``alpha = N / max(M, 1)``. The default
    ``alpha="nonzero_reward"`` counts ``M`` as the samples with a non-zero *reward*, exactly as verl's
    ``compute_gpg_outcome_advantage`` (``bsz / count_nonzero(scores).clamp(min=1)``);
    ``"nonzero_advantage"`` counts samples with a non-zero *advantage*, the paper's ``B / (B - M)``
    with ``M`` the samples that carry no gradient. Pair it with the ``reinforce`` policy loss and no KL.
    """
    scores = check_scores(batch, scores)
    centered = normalize_scores(scores, batch.group_index, NormConfig(std_level="none"))
    n = scores.numel()
    if params.alpha == "nonzero_reward":
        alpha = n / max(int(torch.count_nonzero(scores)), 1)
    elif params.alpha == "nonzero_advantage":
        alpha = n / max(int(torch.count_nonzero(centered)), 1)
    else:
        alpha = 1.0
    return per_token(alpha * centered / params.f_norm, batch.response_mask)
