"""Importing this module registers every built-in component (estimators, losses, rewards, tasks)."""

import grove.core  # noqa: F401
import grove.rewards  # noqa: F401
import grove.tasks  # noqa: F401
