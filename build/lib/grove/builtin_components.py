"""Importing this module registers every built-in component (estimators, losses, rewards, tasks, environments,
action parsers, experience sources, rollout engines) and declares those of the applications (:mod:`grove.wings`)
and hub adapters (:mod:`grove.hubs`): their ids and documentation are known, their modules (and their extras'
dependencies) are imported only when a config uses them (:func:`grove.registry.load_declarations`)."""

import grove.core  # noqa: F401
import grove.envs  # noqa: F401
import grove.experience  # noqa: F401
import grove.rewards  # noqa: F401
import grove.rollout_engines  # noqa: F401
import grove.tasks  # noqa: F401
from grove.registry import load_declarations

load_declarations()
