"""Importing this module registers every built-in component (estimators, losses, rewards, tasks, environments,
action parsers, experience sources, rollout engines)."""

import grove.core  # noqa: F401
import grove.envs  # noqa: F401
import grove.experience  # noqa: F401
import grove.rewards  # noqa: F401
import grove.rollout_engines  # noqa: F401
import grove.tasks  # noqa: F401
