"""The gymnasium hub adapter as the registries know it before a config uses it: ids and documentation, no import."""

from grove.registry import ENVIRONMENTS

NEEDS = ("gymnasium",)  # what the extra installs
EXTRA = "gymnasium"

ENVIRONMENTS.declare(
    "gymnasium", module="grove.hubs.gymnasium.gymnasium_text", extra=EXTRA, needs=NEEDS,
    paper="Gymnasium: A Standard Interface for Reinforcement Learning Environments (Towers et al., 2024)",
    summary="Any registered gymnasium environment with a Discrete action space, as text (ansi rendering or the "
    "observation)",
)
