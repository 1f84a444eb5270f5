"""Multi-objective reward combination (``REWARD_COMBINERS``): the reward matrix ``[N, K]`` → one score ``[N]``.

The stage runs between the reward functions and the advantage estimator (``algorithm.reward_combination``):

* :mod:`~grove.core.objectives.pointwise`: each sample's score from its own objectives —
  ``sum_then_normalize`` (the weighted sum; the default, what every GRPO trainer does), ``gated``
  (behaviour objectives count only when the bottom-line constraints pass), ``ensemble_min`` (worst case)
  and ``mean_minus_std`` (uncertainty-weighted);
* :mod:`~grove.core.objectives.decoupled`: objectives normalised within their group before they are
  combined — ``normalize_then_sum`` (GDPO; TRL's and verl's batch renormalisations as options) and
  ``variance_weighted`` (MO-GRPO).

Shared pieces (the combiner signature and output, the component-aware signal test, per-objective
statistics) are in :mod:`~grove.core.objectives.combine`. ``docs/multi-objective.md`` documents every
convention.
"""

from grove.core.objectives import decoupled, pointwise  # noqa: F401  (register the combiners)
from grove.core.objectives.combine import (
    CombineFn,
    CombineOutput,
    informative_from_signal,
    objective_statistics,
    run_combiner,
)

__all__ = ["CombineFn", "CombineOutput", "informative_from_signal", "objective_statistics", "run_combiner"]
