"""OPO's advantage: the length-weighted group mean as the (optimal) baseline.

Hao et al. 2025, "On-Policy RL with Optimal Reward Baseline"; as verl's ``compute_opo_outcome_advantage``.
"""

from __future__ import annotations

import torch
from torch import Tensor

from grove.batch import RolloutBatch
from grove.core import papers
from grove.core.advantages.common import check_scores, constant_group
from grove.core.segments import broadcast, dense_index, segment_count, segment_sum
from grove.core.token_ops import per_token
from grove.registry import ADVANTAGE_ESTIMATORS, NoParams, Requires


@ADVANTAGE_ESTIMATORS.register(
    "opo",
    params=NoParams,
    paper=papers.OPO,
    summary="Length-weighted group-mean baseline (optimal baseline).",
    requires=(Requires.GROUPS,),
    formula="A_i = r_i - sum_{j in g} l_j r_j / sum_{j in g} l_j",
    reference="verl compute_opo_outcome_advantage",
)
def opo(batch: RolloutBatch, scores: Tensor, params: NoParams) -> Tensor:
    """OPO (Hao et al. 2025, "On-Policy RL with Optimal Reward Baseline").

    ``A_i = r_i - b_g`` with ``b_g = sum_{j in g} l_j r_j / sum_{j in g} l_j`` and ``l_j`` the
    response length (``response_mask`` sum), as verl's ``compute_opo_outcome_advantage``. A
    single-sample group has ``b = 0``; a group of empty responses (``sum l = 0``, NaN in verl) has
    ``b = 0`` and its advantages are masked out anyway; a constant group gets exactly 0.
    """
    scores = check_scores(batch, scores)
    group, num_groups = dense_index(batch.group_index)
    lengths = batch.response_mask.sum(dim=-1).to(scores.dtype)
    weighted = segment_sum(lengths * scores, group, num_groups)
    total = segment_sum(lengths, group, num_groups).clamp_min(1)  # integer-valued: only 0 is changed
    baseline = broadcast(weighted / total, group)
    count = broadcast(segment_count(group, num_groups), group)
    baseline = torch.where(count > 1, baseline, torch.zeros_like(baseline))
    advantages = scores - baseline
    advantages = torch.where(constant_group(scores, group, num_groups), torch.zeros_like(advantages), advantages)
    return per_token(advantages, batch.response_mask)
