"""Loading a config for a run: the schema (:func:`grove.config.read_config`), then the components."""

from __future__ import annotations

import errno
import os
from pathlib import Path

from grove.config import ConfigError, GroveConfig, read_config
from grove.resolve.component_checks import check_components

__all__ = ["check_config", "load_config"]


def check_config(cfg: GroveConfig) -> GroveConfig:
    """``cfg`` checked for a run (:func:`grove.resolve.component_checks.check_components`: ``imports`` imported,
    every component known with valid parameters, what each requires present) and for an ``output_dir`` that a
    symlink loop makes unreachable; a problem is a :class:`ConfigError` naming the key and the fix. Checking twice
    changes nothing."""
    loop = _symlink_loop(Path(cfg.output_dir))
    if loop is not None:
        raise ConfigError(
            f"output_dir: {str(loop)!r} is a symlink loop (its links lead back to each other), so "
            f"{cfg.output_dir!r} cannot be created; remove the link, or choose another with --set output_dir=..."
        )
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


def _symlink_loop(path: Path) -> Path | None:
    """The first of ``path`` and its parents (outermost first) that is a symlink loop, else ``None``."""
    for candidate in (*reversed(path.parents), path):
        try:
            os.stat(candidate)
        except OSError as exc:  # a missing part is created by the run; an unreadable one is reported when written
            return candidate if exc.errno == errno.ELOOP else None
    return None
