"""Multi-turn environments for agent training, and the parsers that turn model text into their actions.

Importing this package registers the action parsers; the environments themselves live outside the core (the text
games in :mod:`grove.wings.games`, knowledge-base routing in :mod:`grove.wings.kb_routing`, the hub adapters in
:mod:`grove.hubs`), declared to ``ENVIRONMENTS`` and imported when a config uses one:

* :mod:`grove.envs.base`: the protocol (``Observation``, ``Transition``, ``Environment``, ``EnvironmentSuite``);
* :mod:`grove.envs.actions`: action parsers ``tag``, ``admissible``, ``raw`` (``ACTION_PARSERS``);
* :mod:`grove.envs.toy_text_environment`, :mod:`grove.envs.transition_table_plans`: a discrete world with a transition
  table rendered as text, and its planned oracle (the toy-text games and the gymnasium adapter build on them);
* :mod:`grove.envs.oracle`: the oracle protocol behind ``grove demos``;
* :mod:`grove.envs.factory`: :func:`build_environment` from a registry id or a ``"module:factory"`` path.

See ``docs/environments.md``.
"""

from grove.envs.actions import ParsedAction
from grove.envs.base import (
    Environment,
    EnvironmentSuite,
    EnvironmentUnavailableError,
    Observation,
    Transition,
)
from grove.envs.factory import build_environment

__all__ = [
    "Environment",
    "EnvironmentSuite",
    "EnvironmentUnavailableError",
    "Observation",
    "ParsedAction",
    "Transition",
    "build_environment",
]
