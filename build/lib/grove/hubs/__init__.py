"""Hub adapters: environments, tasks and rewards of the ecosystem's hubs, one folder each, each with its own extra.

* :mod:`grove.hubs.gymnasium`: any gymnasium environment with a discrete action space, as text (``grove[gymnasium]``);
* :mod:`grove.hubs.textarena`: TextArena games (``grove[textarena]``);
* :mod:`grove.hubs.verifiers`: Prime Intellect verifiers environments, tasksets and rubrics (``grove[verifiers]``);
* :mod:`grove.hubs.openenv`: OpenEnv environment servers (``grove[openenv]``);
* :mod:`grove.hubs.reasoning_gym`: reasoning-gym's generators and scorers (``grove[reasoning-gym]``).

Each folder's ``declarations`` module tells the registries its components' ids and documentation without importing
them (:meth:`grove.registry.Registry.declare`); a component's module is imported when a config uses it, and a missing
extra is then one error naming ``pip install 'grove[...]'``. The core never imports a hub.
"""

HUBS = ("gymnasium", "textarena", "verifiers", "openenv", "reasoning_gym")
