"""The OpenEnv environment servers hub adapter (``grove[openenv]``)."""
