"""Advantage estimators (``ADVANTAGE_ESTIMATORS``): sequence scores ``[N]`` → per-token advantages ``[N, R]``.

One module per family, each registering its estimators on import:

* :mod:`~grove.core.advantages.group_norm`: the one normaliser ``(r - baseline) / (std + eps)`` and its
  settings ``grpo``, ``dr_grpo``, ``rloo``, ``group_norm``, ``lite_ppo``;
* :mod:`~grove.core.advantages.gpg`, :mod:`~grove.core.advantages.opo`: other group baselines;
* :mod:`~grove.core.advantages.reinforce_pp`: batch-whitened returns (``reinforce_pp``, ``reinforce_pp_baseline``);
* :mod:`~grove.core.advantages.passk`: ``grpo_passk``, ``passk_analytic``;
* :mod:`~grove.core.advantages.bnpo`: ``bnpo``;
* :mod:`~grove.core.advantages.remax`: ``remax`` (greedy-completion baseline);
* :mod:`~grove.core.advantages.passthrough`: ``score_as_advantage`` (reward combiners that already normalise, GDPO);
* :mod:`~grove.core.advantages.gigpo`: ``gigpo``, ``episode_grpo``, ``step_discounted_return`` (agent
  experience: per-step credit from the step table ``batch.steps``);
* :mod:`~grove.core.advantages.step_grpo`: ``step_grpo`` (R1-Router's Step-GRPO: step-specific rewards
  normalised over corresponding steps).

Shared pieces (score check, constant-group test, the estimator signature) are in
:mod:`~grove.core.advantages.common`.
"""

from grove.core.advantages import (  # noqa: F401
    bnpo,
    gigpo,
    gpg,
    group_norm,
    opo,
    passk,
    passthrough,
    reinforce_pp,
    remax,
    step_grpo,
)
from grove.core.advantages.common import (
    AdvantageFn,
    AdvantageOutput,
    check_scores,
    constant_group,
    run_estimator,
)
from grove.core.advantages.group_norm import NormConfig, normalize_scores

__all__ = [
    "AdvantageFn",
    "AdvantageOutput",
    "NormConfig",
    "check_scores",
    "constant_group",
    "normalize_scores",
    "run_estimator",
]
