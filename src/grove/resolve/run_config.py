"""Loading a config and checking it: the schema (:func:`grove.config.read_config`), then the front door without its
preflight (:func:`grove.resolve.resolve` with ``preflight_checks=False``)."""

from __future__ import annotations

from pathlib import Path

from grove.config import GroveConfig, read_config
from grove.resolve.run_plan import resolve

__all__ = ["check_config", "load_config"]


def check_config(cfg: GroveConfig) -> GroveConfig:
    """``cfg`` checked by the front door (every component known with valid parameters, what each requires present,
    ``imports`` imported, an ``output_dir`` that a symlink loop does not make unreachable) without resolving user
    code or model files; a problem is a :class:`grove.config.ConfigError` naming the key and the fix. Checking
    twice changes nothing."""
    resolve(cfg, preflight_checks=False)
    return cfg


def load_config(path: str | Path | None, overrides: list[str] | None = None) -> GroveConfig:
    """Read a YAML config (safe loader), apply ``--set`` overrides, validate it and check it (:func:`check_config`);
    every problem is a :class:`grove.config.ConfigError`."""
    return check_config(read_config(path, overrides))
