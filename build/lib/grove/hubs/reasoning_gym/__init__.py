"""The reasoning-gym's generators and scorers hub adapter (``grove[reasoning-gym]``)."""
