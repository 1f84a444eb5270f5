"""The pure functional tensor core: segment ops, advantages, policy losses, aggregations, KL.

Importing this package registers every built-in component in :mod:`grove.registry`.
"""

from grove.core import advantages, aggregation, kl, logprobs, policy_loss, segments  # noqa: F401
