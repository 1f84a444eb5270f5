"""The pure functional tensor core: no model, no config objects, no Python loops over samples.

* :mod:`~grove.core.segments`: per-group statistics (sum, count, mean, std, min, max) as segment ops;
* :mod:`~grove.core.token_ops`: per-sample ↔ per-token broadcasting and masked row means;
* :mod:`~grove.core.advantages`: advantage estimators (``ADVANTAGE_ESTIMATORS``), one module per family;
* :mod:`~grove.core.objectives`: reward combiners (``REWARD_COMBINERS``): several objectives → one score
  (weighted sum, GDPO, MO-GRPO, gated, ensemble worst case, mean − λ·std);
* :mod:`~grove.core.losses`: policy losses (``POLICY_LOSSES``), their typed input and output;
* :mod:`~grove.core.aggregation`: loss aggregations (``LOSS_AGGREGATIONS``) with a global scale;
* :mod:`~grove.core.kl`: KL estimators (``KL_ESTIMATORS``);
* :mod:`~grove.core.importance_weights`: TIS / MIS weights for the rollout-vs-training mismatch;
* :mod:`~grove.core.selection`, :mod:`~grove.core.keep_ratio_schedules`: D^3S down-sampling masks and
  their keep-ratio schedules;
* :mod:`~grove.core.shaping`: DAPO's soft overlong penalty and informative-group filter;
* :mod:`~grove.core.papers`: the titles every component cites.

Importing this package registers every built-in component in :mod:`grove.registry`.
"""

from grove.core import advantages, aggregation, kl, losses, objectives  # noqa: F401
