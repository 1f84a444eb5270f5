"""The pure functional tensor core: segment ops, advantages, policy losses, aggregations, KL.

Importing this package registers every built-in component in :mod:`grove.registry`.
"""

from grove.core import (  # noqa: F401
    advantages,
    advantages_baselines,
    advantages_passk,
    advantages_reinforce,
    advantages_remax,
    aggregation,
    kl,
    kl_variants,
    logprobs,
    policy_loss,
    policy_losses_cov,
    policy_losses_sequence,
    policy_losses_weighted,
    rollout_correction,
    segments,
)
