"""The OpenEnv hub adapter as the registries know it before a config uses it: ids and documentation, no import."""

from grove.registry import ENVIRONMENTS

NEEDS = ("openenv",)  # what the extra installs
EXTRA = "openenv"

ENVIRONMENTS.declare(
    "openenv", module="grove.hubs.openenv.openenv_servers", extra=EXTRA, needs=NEEDS,
    paper="OpenEnv: an interface for agentic execution environments (Meta PyTorch, openenv-core)",
    summary="An OpenEnv environment server (a url, or one grove starts on 127.0.0.1), one WebSocket session per copy",
)
