"""Loading a config for a run: the schema (:func:`grove.config.read_config`), then the components."""

from __future__ import annotations

from pathlib import Path

from grove.config import ConfigError, GroveConfig, read_config
from grove.resolve.component_checks import check_components

__all__ = ["check_config", "load_config"]


def check_config(cfg: GroveConfig) -> GroveConfig:
    """``cfg`` checked for a run (:func:`grove.resolve.component_checks.check_components`: ``imports`` imported,
    every component known with valid parameters, what each requires present);
    a problem is a :class:`ConfigError` naming the key and the fix. Checking twice changes nothing."""
    try:
        check_components(cfg)
    except ConfigError:
        raise
    except ValueError as exc:
        raise ConfigError(f"invalid configuration:\n  {exc}") from None
    return cfg


def load_config(path: str | Path | None, overrides: list[str] | None = None) -> GroveConfig:
    """Read a YAML config (safe loader), apply ``--set`` overrides, validate it and check it for a run; every
    problem is a :class:`ConfigError`."""
    return check_config(read_config(path, overrides))
