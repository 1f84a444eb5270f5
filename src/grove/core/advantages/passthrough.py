"""``score_as_advantage``: the sequence score is the advantage, broadcast over the response tokens.

For reward combiners that already return advantages (GDPO's ``normalize_then_sum`` with a batch or token
renormalisation: ``A_i = renorm(Σ_k w_k z_ik)``, Liu et al. 2026), so no second normalisation distorts them.
With a plain reward it is REINFORCE without a baseline.
"""

from __future__ import annotations

from torch import Tensor

from grove.batch import RolloutBatch
from grove.core import papers
from grove.core.advantages.common import check_scores
from grove.core.token_ops import per_token
from grove.registry import ADVANTAGE_ESTIMATORS, NoParams


@ADVANTAGE_ESTIMATORS.register(
    "score_as_advantage",
    params=NoParams,
    paper=papers.GDPO,
    summary="The score is the advantage (for reward combiners that already normalise, e.g. GDPO).",
    formula="A_i = s_i",
    reference="TRL / verl GDPO: the renormalised sum is the advantage",
)
def score_as_advantage(batch: RolloutBatch, scores: Tensor, params: NoParams) -> Tensor:
    """``A_i = s_i`` on every response token (0 elsewhere)."""
    return per_token(check_scores(batch, scores), batch.response_mask)
