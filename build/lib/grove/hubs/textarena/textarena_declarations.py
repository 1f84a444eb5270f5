"""The TextArena hub adapter as the registries know it before a config uses it: ids and documentation, no import."""

from grove.registry import ENVIRONMENTS

NEEDS = ("textarena",)  # what the extra installs
EXTRA = "textarena"

ENVIRONMENTS.declare(
    "textarena", module="grove.hubs.textarena.textarena_games", extra=EXTRA, needs=NEEDS, paper="TextArena (Guertler et al., 2025)",
    summary="TextArena games: single-player puzzles, and two-player games against a fixed opponent policy",
)
