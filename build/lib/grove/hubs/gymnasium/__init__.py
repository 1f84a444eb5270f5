"""The gymnasium environments as text hub adapter (``grove[gymnasium]``)."""
