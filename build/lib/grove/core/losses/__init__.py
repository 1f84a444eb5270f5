"""Policy losses (``POLICY_LOSSES``): ``fn(PolicyLossInput, params) -> PolicyLossOutput``, per token, unreduced.

One module per family, each registering its losses on import:

* :mod:`~grove.core.losses.ppo_clip`: ``ppo_clip`` (asymmetric and dual clip);
* :mod:`~grove.core.losses.sequence_ratio`: one ratio per sequence (``gspo``, ``gmpo``);
* :mod:`~grove.core.losses.weighted`: the gradient weighted instead of clipped (``cispo``, ``sapo``, ``reinforce``);
* :mod:`~grove.core.losses.covariance`: covariance-selected tokens (``clip_cov``, ``kl_cov``);
* :mod:`~grove.core.losses.nll`: ``nll``, supervised fine-tuning's negative log-likelihood (``grove sft``).

The typed input and output and the shared helpers are in :mod:`~grove.core.losses.interface`; a new
loss is one file registering itself (``docs/architecture.md``, "Adding a policy loss").
"""

from grove.core.losses import covariance, nll, ppo_clip, sequence_ratio, weighted  # noqa: F401
from grove.core.losses.interface import (
    LOG_RATIO_CLAMP,
    PolicyLossFn,
    PolicyLossInput,
    PolicyLossOutput,
    clip_indicators,
    importance_ratio,
    masked_token_stats,
)

__all__ = [
    "LOG_RATIO_CLAMP",
    "PolicyLossFn",
    "PolicyLossInput",
    "PolicyLossOutput",
    "clip_indicators",
    "importance_ratio",
    "masked_token_stats",
]
