"""Loading a config: read the YAML (safe loader), apply ``--set`` overrides, expand the preset, validate;
and the error messages that name the key, the problem and the allowed values."""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from grove.config.presets import expand_preset
from grove.config.schema import GroveConfig

__all__ = ["ConfigError", "apply_overrides", "dump_config", "format_validation_error", "load_config"]


class ConfigError(ValueError):
    """A configuration problem, phrased for the user (key, problem, fix)."""


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply ``a.b.c=value`` overrides (value parsed as YAML; list items by index: ``rewards.0.weight=2``)."""
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"--set {item!r}: expected KEY=VALUE, e.g. --set train.steps=20")
        key, raw = item.split("=", 1)
        value = yaml.safe_load(raw) if raw.strip() else ""
        parts = key.strip().split(".")
        node: Any = data
        for depth, part in enumerate(parts[:-1]):
            node = _child(node, part, ".".join(parts[: depth + 1]), create=True)
        last = parts[-1]
        if isinstance(node, list):
            node[_list_index(node, last, key)] = value
        else:
            node[last] = value
    return data


def _list_index(node: list, part: str, path: str) -> int:
    if not part.isdigit() or int(part) >= len(node):
        raise ConfigError(f"--set {path}: {part!r} is not an index of a list of {len(node)} items")
    return int(part)


def _child(node: Any, part: str, path: str, create: bool) -> Any:
    if isinstance(node, list):
        return node[_list_index(node, part, path)]
    if not isinstance(node, dict):
        raise ConfigError(f"--set {path}: cannot set a key inside a {type(node).__name__}")
    if part not in node or node[part] is None:
        node[part] = {}
    return node[part]


def format_validation_error(exc: ValidationError) -> str:
    """Turn pydantic errors into lines naming the key, the problem and the allowed values."""
    lines = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"]) or "(top level)"
        if err["type"] == "extra_forbidden":
            allowed = _allowed_keys(err["loc"][:-1])
            close = difflib.get_close_matches(str(err["loc"][-1]), allowed, n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            lines.append(f"{loc}: unknown key.{hint} Allowed keys here: {', '.join(allowed)}")
        elif err["type"] == "literal_error":
            lines.append(f"{loc}: {err['msg']} (got {err['input']!r})")
        elif err["type"] == "value_error":
            lines.append(f"{loc}: {str(err['msg']).removeprefix('Value error, ')}")
        else:
            lines.append(f"{loc}: {err['msg']} (got {err.get('input')!r})")
    return "invalid configuration:\n  " + "\n  ".join(lines)


def _allowed_keys(loc: tuple) -> list[str]:
    model: Any = GroveConfig
    for part in loc:
        if isinstance(part, int):
            continue
        field = model.model_fields.get(part)
        if field is None:
            return []
        ann = field.annotation
        inner = getattr(ann, "__args__", None)
        model = next((a for a in (inner or (ann,)) if isinstance(a, type) and issubclass(a, BaseModel)), None)
        if model is None:
            return []
    return list(model.model_fields)


def load_config(path: str | Path | None, overrides: list[str] | None = None) -> GroveConfig:
    """Read a YAML config (safe loader), apply ``--set`` overrides and validate."""
    data: dict[str, Any] = {}
    if path is not None:
        p = Path(path)
        if not p.is_file():
            raise ConfigError(f"config file {str(p)!r} does not exist")
        try:
            loaded = yaml.safe_load(p.read_text())
        except yaml.YAMLError as exc:
            raise ConfigError(f"{p}: not valid YAML: {exc}") from None
        if loaded is not None and not isinstance(loaded, dict):
            raise ConfigError(f"{p}: the top level must be a mapping of sections, got {type(loaded).__name__}")
        data = loaded or {}
    data = apply_overrides(data, overrides or [])
    try:
        data = expand_preset(data)
    except KeyError as exc:
        raise ConfigError(str(exc.args[0])) from None
    try:
        return GroveConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc)) from None


def dump_config(cfg: GroveConfig) -> str:
    return yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False)
