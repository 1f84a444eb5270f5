"""Reward functions: built-ins (registered in ``REWARD_FUNCTIONS`` on import), loading and scoring (combining them is the reward-combination stage, grove.core.objectives)."""

from grove.rewards import (  # noqa: F401  (registers the built-in rewards)
    builtin,
    llm_judge,
    sequence_classifier,
)
from grove.rewards.extract import extract_answer
from grove.rewards.scoring import (
    RewardFunctionError,
    RewardLoadError,
    RewardSpec,
    bind_reward,
    compute_rewards,
    resolve_reward,
    resolve_rewards,
)

__all__ = [
    "RewardFunctionError",
    "RewardLoadError",
    "RewardSpec",
    "bind_reward",
    "compute_rewards",
    "extract_answer",
    "resolve_reward",
    "resolve_rewards",
]
