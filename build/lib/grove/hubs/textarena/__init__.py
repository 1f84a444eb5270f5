"""The TextArena games hub adapter (``grove[textarena]``)."""
