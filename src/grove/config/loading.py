"""Reading a config: read the YAML (safe loader), apply ``--set`` overrides, expand the preset, validate the schema;
and the error messages that name the key, the problem and the allowed values.

Every mistake in a config file or a ``--set`` (unreadable file, YAML syntax, wrong type, unknown key, a value
that is not plain data) is a :class:`ConfigError` naming the file (and line) or the key; nothing else escapes
:func:`read_config`. A run loads its config with :func:`grove.resolve.load_config`, which also checks the
components (``tests/test_config_fuzz.py`` fuzzes it).
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from grove.config.algorithm import current_keys
from grove.config.components import not_finite
from grove.config.presets import PRESETS, expand_preset
from grove.config.schema import GroveConfig

__all__ = [
    "ConfigError",
    "apply_overrides",
    "config_from_data",
    "dump_config",
    "format_validation_error",
    "read_config",
    "read_config_data",
]


class ConfigError(ValueError):
    """A configuration problem, phrased for the user (key, problem, fix)."""


class _ConfigLoader(yaml.SafeLoader):
    """The safe loader, reading dates and times as the strings they are (``output_dir: runs/2024-01-01``, and
    no crash on ``2024-13-45``) and refusing ``!!binary`` (a config holds text)."""


def _refuse_binary(loader: yaml.SafeLoader, node: yaml.Node) -> None:
    raise yaml.constructor.ConstructorError(
        None, None, "!!binary values are not supported in a config", node.start_mark
    )


_ConfigLoader.add_constructor("tag:yaml.org,2002:timestamp", yaml.SafeLoader.construct_yaml_str)
_ConfigLoader.add_constructor("tag:yaml.org,2002:binary", _refuse_binary)

# what yaml raises for malformed text: YAMLError, and the errors of explicitly tagged scalars it cannot convert
# (``!!int abc``: ValueError, ``!!bool maybe``: KeyError); RecursionError for absurdly deep nesting
_YAML_ERRORS = (yaml.YAMLError, ValueError, TypeError, KeyError, AttributeError, IndexError, RecursionError)


def _yaml_problem(exc: BaseException) -> tuple[str, str]:
    """A one-line description of a YAML error, and where it is (``"line 3, column 7"``, or ``""``)."""
    if isinstance(exc, RecursionError):
        return "nested too deeply", ""
    if isinstance(exc, yaml.MarkedYAMLError):
        problem = ": ".join(str(part) for part in (exc.context, exc.problem) if part) or "syntax error"
        mark = exc.problem_mark or exc.context_mark
        return problem, (f"line {mark.line + 1}, column {mark.column + 1}" if mark is not None else "")
    return " ".join(str(exc).split()) or type(exc).__name__, ""


#: the most values the aliases (``*name``) of a YAML text may add to it: each alias repeats its anchored value, so a
#: few lines of aliases of aliases (a "billion laughs" text) would stand for billions of values
ALIAS_EXPANSION_LIMIT = 10_000


def _parse_yaml(text: str) -> Any:
    """The data of a YAML text; a key given twice in one mapping, or aliases that repeat values beyond
    :data:`ALIAS_EXPANSION_LIMIT`, is a :class:`ConfigError` (YAML would silently keep the last value; the repeated
    values would take hours to check)."""
    root = yaml.compose(text, Loader=_ConfigLoader)
    problem = _alias_expansion_problem(root) or _duplicate_key(root)
    if problem:
        raise ConfigError(problem)
    return yaml.load(text, Loader=_ConfigLoader)  # noqa: S506 - a SafeLoader subclass


def _alias_expansion_problem(root: yaml.Node | None) -> str | None:
    """Where the aliases of ``root``'s tree add more than :data:`ALIAS_EXPANSION_LIMIT` values: a message naming the
    line of the value repeated most. Each node is counted once (its expanded size remembered), so the count takes
    as long as the text is long, however far the aliases expand."""
    sizes: dict[int, int] = {}
    most: list[yaml.Node] = []  # the largest value reached again through an alias

    def size(node: yaml.Node) -> int:
        if id(node) in sizes:
            if not most or sizes[id(node)] > sizes[id(most[0])]:
                most[:] = [node]
            return sizes[id(node)]
        sizes[id(node)] = 1  # a recursive alias counts once here (reported as such once loaded)
        if isinstance(node, yaml.MappingNode):
            total = 1 + sum(size(key) + size(value) for key, value in node.value)
        elif isinstance(node, yaml.SequenceNode):
            total = 1 + sum(size(item) for item in node.value)
        else:
            total = 1
        sizes[id(node)] = total
        return total

    if root is None or size(root) - len(sizes) <= ALIAS_EXPANSION_LIMIT:
        return None
    line = most[0].start_mark.line + 1
    return (
        f"line {line}: YAML aliases (*name) repeat the value anchored there until they add more than "
        f"{ALIAS_EXPANSION_LIMIT:,} values to the config (an alias bomb); write the values out, or use fewer aliases"
    )


def _duplicate_key(node: yaml.Node | None, path: str = "", visited: set[int] | None = None) -> str | None:
    """Where a mapping of ``node``'s tree repeats a key: a message naming the dotted key and both lines. An aliased
    node is looked at once (a recursive alias is reported later, as such)."""
    visited = set() if visited is None else visited
    if id(node) in visited:
        return None
    visited.add(id(node))
    if isinstance(node, yaml.MappingNode):
        seen: dict[str, yaml.Node] = {}
        for key_node, value_node in node.value:
            if isinstance(key_node, yaml.ScalarNode) and key_node.tag != "tag:yaml.org,2002:merge":
                key = key_node.value
                dotted = f"{path}.{key}" if path else key
                if key in seen:
                    first, again = seen[key].start_mark.line + 1, key_node.start_mark.line + 1
                    return (
                        f"{dotted} is given twice (line {first} and line {again}); YAML would keep only the last "
                        "value: remove one of them"
                    )
                seen[key] = key_node
                found = _duplicate_key(value_node, dotted, visited)
            else:
                found = _duplicate_key(value_node, path, visited)
            if found:
                return found
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            found = _duplicate_key(item, f"{path}.{i}" if path else str(i), visited)
            if found:
                return found
    return None


def _plain_data_problem(
    value: Any, path: str, ancestors: tuple[int, ...] = (), visited: set[int] | None = None
) -> str | None:
    """Where ``value`` is not plain data (a recursive alias such as ``&a [*a]``, a string that is not valid
    Unicode such as ``"\\ud800"``): a message naming the key, else ``None``. A list or mapping that aliases share is
    looked at once."""
    where = path or "(top level)"
    visited = set() if visited is None else visited
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            return f"{where}: {value[exc.start : exc.end]!r} is not a valid Unicode character (a lone surrogate)"
    if isinstance(value, dict | list):
        if id(value) in ancestors:
            return f"{where}: a recursive YAML alias (the value contains itself)"
        if id(value) in visited:
            return None
        visited.add(id(value))
        items = value.items() if isinstance(value, dict) else enumerate(value)
        for key, child in items:
            if isinstance(value, dict) and key is None:
                return f"{where}: a key with no name (YAML `? ` or `: value` alone); write `name: value`"
            child_path = f"{path}.{key}" if path else str(key)
            found = _plain_data_problem(key, where, ()) if isinstance(key, str) else None
            found = found or _plain_data_problem(child, child_path, (*ancestors, id(value)), visited)
            if found:
                return found
    return None


def _parse_override_value(key: str, raw: str) -> Any:
    if not raw.strip():
        return ""
    try:
        value = _parse_yaml(raw)
    except ConfigError as exc:
        raise ConfigError(f"--set {key}: {exc}") from None
    except _YAML_ERRORS as exc:
        problem, _where = _yaml_problem(exc)
        raise ConfigError(
            f"--set {key}: the value {raw!r} is not valid YAML ({problem}); fix it, or quote a string with "
            f"special characters: --set '{key}=\"...\"'"
        ) from None
    problem = _plain_data_problem(value, key)
    if problem:
        raise ConfigError(f"--set {problem}")
    return value


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply ``a.b.c=value`` overrides (value parsed as YAML; list items by index: ``rewards.0.weight=2``)."""
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"--set {item!r}: expected KEY=VALUE, e.g. --set train.steps=20")
        key, raw = item.split("=", 1)
        parts = [part.strip() for part in key.split(".")]
        key = ".".join(parts)
        if not all(parts):
            raise ConfigError(
                f"--set {item!r}: {key!r} is not a key (an empty part); keys are dotted paths such as train.steps"
            )
        value = _parse_override_value(key, raw)
        node: Any = data
        for depth, part in enumerate(parts):
            path, last = ".".join(parts[: depth + 1]), depth == len(parts) - 1
            if isinstance(node, list):
                index = _list_index(node, part, path)
                if last:
                    node[index] = value
                node = node[index]
            elif isinstance(node, dict):
                if last:
                    node[part] = value
                elif node.get(part) is None:
                    node[part] = {}
                node = node[part]
            else:
                parent = ".".join(parts[:depth])
                raise ConfigError(
                    f"--set {key}: {parent} is {_short_repr(node)} (a {type(node).__name__}), not a section or a "
                    f"list; set {parent} itself, or make it a mapping first"
                )
    return data


def _list_index(node: list, part: str, path: str) -> int:
    if not part.isdigit() or int(part) >= len(node):
        raise ConfigError(f"--set {path}: {part!r} is not an index of a list of {len(node)} items")
    return int(part)


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
        elif err["type"] == "finite_number":
            lines.append(f"{loc}: {not_finite(err['input'])}")
        elif err["type"] == "literal_error":
            lines.append(f"{loc}: {err['msg']} (got {_short_repr(err['input'])})")
        elif err["type"] == "value_error":
            message = str(err["msg"]).removeprefix("Value error, ")
            lines.append(message if not err["loc"] else f"{loc}: {message}")  # top level: it names its keys
        else:
            lines.append(f"{loc}: {err['msg']} (got {_short_repr(err.get('input'))})")
    return "invalid configuration:\n  " + "\n  ".join(lines)


def _short_repr(value: Any, limit: int = 200) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "…"


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


def read_config(path: str | Path | None, overrides: list[str] | None = None) -> GroveConfig:
    """Read a YAML config (safe loader), apply ``--set`` overrides and validate the schema (the components are
    checked by :func:`grove.resolve.load_config`)."""
    data: dict[str, Any] = {}
    if path is not None:
        data = read_config_data(Path(path))
    return config_from_data(apply_overrides(data, overrides or []))


def config_from_data(data: dict[str, Any]) -> GroveConfig:
    """Validate a config's data (the mapping a YAML file holds, overrides applied): deprecated keys read as the keys
    they stand for (one warning each, :data:`grove.config.algorithm.DEPRECATED_KEYS`), the preset expanded, the schema
    checked; every problem is a :class:`ConfigError` naming the key."""
    algorithm = data.get("algorithm")
    if isinstance(algorithm, dict):  # before the preset: a deprecated key overrides the preset's current one
        try:
            algorithm = current_keys(algorithm)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        data = {**data, "algorithm": algorithm}
    preset = algorithm.get("preset") if isinstance(algorithm, dict) else None
    if preset is not None and not isinstance(preset, str):
        raise ConfigError(
            f"algorithm.preset: expected a preset name, got {_short_repr(preset)}; known: {', '.join(sorted(PRESETS))}"
        )
    try:
        data = expand_preset(data)
    except KeyError as exc:
        raise ConfigError(str(exc.args[0])) from None
    try:
        return GroveConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc)) from None


def read_config_data(p: Path) -> dict[str, Any]:
    """The mapping a config file holds; every problem is a :class:`ConfigError` naming the file (and line)."""
    if not p.exists():
        raise ConfigError(f"config file {str(p)!r} does not exist")
    if not p.is_file():
        raise ConfigError(f"config file {str(p)!r} is not a file")
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        line = p.read_bytes()[: exc.start].count(b"\n") + 1
        raise ConfigError(f"{p}:{line}: not UTF-8 text ({exc.reason}); save the config file as UTF-8") from None
    except OSError as exc:
        raise ConfigError(f"config file {str(p)!r} cannot be read: {exc.strerror or exc}") from None
    try:
        loaded = _parse_yaml(text)
    except ConfigError as exc:
        raise ConfigError(f"{p}: {exc}") from None
    except _YAML_ERRORS as exc:
        problem, where = _yaml_problem(exc)
        raise ConfigError(f"{p}: not valid YAML{f' at {where}' if where else ''}: {problem}") from None
    if loaded is not None and not isinstance(loaded, dict):
        raise ConfigError(f"{p}: the top level must be a mapping of sections, got {type(loaded).__name__}")
    problem = _plain_data_problem(loaded or {}, "")
    if problem:
        raise ConfigError(f"{p}: {problem}")
    return loaded or {}


def dump_config(cfg: GroveConfig) -> str:
    return yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False)
