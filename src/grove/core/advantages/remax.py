"""ReMax: REINFORCE with the greedy completion's reward as baseline.

Li et al. 2023, "ReMax: A Simple, Effective, and Efficient Reinforcement Learning Method for Aligning
Large Language Models": ``A_i = r_i − r(greedy completion of the same prompt)``, no normalisation,
the same value on every response token (verl ``compute_remax_outcome_advantage``: the outcome
reward's reverse cumulative sum over tokens, minus the baseline, is the score minus the baseline at
every token).
"""

from __future__ import annotations

from torch import Tensor

from grove.batch import RolloutBatch
from grove.core import papers
from grove.core.token_ops import per_token
from grove.registry import ADVANTAGE_ESTIMATORS, NoParams, Requires


@ADVANTAGE_ESTIMATORS.register(
    "remax",
    params=NoParams,
    paper=papers.REMAX,
    summary="r - r(greedy completion of the prompt).",
    requires=(Requires.GREEDY_BASELINE,),
    formula="A_i = r_i - r(greedy completion of the prompt)",
    reference="verl compute_remax_outcome_advantage",
)
def remax(batch: RolloutBatch, scores: Tensor, params: NoParams) -> Tensor:
    """``A_i = r_i − b_i`` with ``b_i`` the reward of the greedy completion of sample ``i``'s prompt."""
    if batch.baseline_scores is None:
        raise ValueError("remax needs batch.baseline_scores (the greedy completions' rewards)")
    return per_token(scores - batch.baseline_scores, batch.response_mask)
