"""Applications: each one folder holding everything of one application (its task, rewards, environment, knowledge
bases, metrics and data builders), each with its own extra.

* :mod:`grove.wings.clinical`: multiple-choice diagnosis from HPO phenotypes and the CRPO objectives
  (``grove[clinical]``);
* :mod:`grove.wings.games`: text games: gymnasium's toy-text worlds, Sokoban, TextWorld (``grove[games]``,
  ``grove[textworld]``);
* :mod:`grove.wings.ifeval`: IFEval's verifiable instructions as a task and a multi-objective reward
  (``grove[ifeval]``);
* :mod:`grove.wings.kb_routing`: knowledge-base routing (R1-Router): the environment, its step rewards, its three
  knowledge bases and question sets (``grove[kb-routing]``);
* :mod:`grove.wings.shapes`: questions about generated pictures of coloured shapes, for vision-language policies
  (``grove[vision]``).

Each folder's ``*_declarations`` module tells the registries its components' ids and documentation without importing
them (:meth:`grove.registry.Registry.declare`); a component's module is imported when a config uses it, and a missing
extra is then one error naming what to install. The core never imports an application.
"""

WINGS = ("clinical", "games", "ifeval", "kb_routing", "shapes")
