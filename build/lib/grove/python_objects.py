"""Objects handed to grove from Python, and the config references that name them.

A config names user code by import path (``mypkg.rewards:my_reward``), which any process can import: the command
line, a resumed run, a worker process. A function written in a notebook cell or a script's ``__main__`` has no such
path. :func:`reference_for` gives an object the name a config can hold:

* its import path when it has one: a module-level function or class of an importable module (not ``__main__``),
  found again under that path. Such a run resumes from the command line like any other;
* otherwise ``python:<name>``, and the object is kept in this process's table under that name. The reference is
  resolved by :func:`grove.registry.import_callable` like an import path, in this process only: another process (a
  resume from the command line) gets an error saying what the reference is and the two ways on.

Handing over an object again under the same name replaces the previous one: re-running a notebook cell that
redefines a reward function hands over the new definition.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable
from typing import Any

__all__ = ["PREFIX", "is_python_reference", "lookup", "reference_for"]

PREFIX = "python:"

_objects: dict[str, Any] = {}


def is_python_reference(text: str) -> bool:
    """Whether a config value is a ``python:<name>`` reference to an object handed over in a process."""
    return isinstance(text, str) and text.startswith(PREFIX)


def _import_path(obj: Any) -> str | None:
    """``module:qualname`` when ``obj`` is found again under it (a module-level definition of an importable module
    other than ``__main__``), else ``None``."""
    module_name = getattr(obj, "__module__", None)
    qualname = getattr(obj, "__qualname__", None)
    if not module_name or not qualname or module_name == "__main__" or "<" in qualname:
        return None
    try:
        found: Any = importlib.import_module(module_name)
        for part in qualname.split("."):
            found = getattr(found, part)
    except Exception:  # noqa: BLE001 - any failure means: not importable by this path
        return None
    return f"{module_name}:{qualname}" if found is obj else None


def _base_name(obj: Any) -> str:
    """A readable name for ``obj``: its ``__name__`` (a partial's function's; a callable instance's class name)."""
    target = getattr(obj, "func", obj)  # functools.partial
    name = getattr(target, "__name__", None) or type(target).__name__
    return re.sub(r"[^0-9A-Za-z_.-]+", "_", name).strip("_") or "object"


def reference_for(obj: Callable[..., Any], name: str | None = None, taken: set[str] | None = None) -> str:
    """The config reference of ``obj``: its import path, else ``python:<name>`` with ``obj`` kept under it.

    Args:
        obj: a callable (a reward function, an environment factory).
        name: the name to keep it under (default: the object's own name; ``<lambda>`` becomes ``lambda``).
        taken: references already given out by the same call; a different object of the same name gets a
            numbered one (``python:lambda_2``) so that two lambdas of one call stay apart.
    """
    path = _import_path(obj) if name is None else None
    if path is not None:
        return path
    base = re.sub(r"[^0-9A-Za-z_.-]+", "_", name).strip("_") if name else _base_name(obj)
    reference, number = f"{PREFIX}{base}", 1
    while taken is not None and reference in taken and _objects.get(reference[len(PREFIX):]) is not obj:
        number += 1
        reference = f"{PREFIX}{base}_{number}"
    _objects[reference[len(PREFIX):]] = obj
    if taken is not None:
        taken.add(reference)
    return reference


def lookup(reference: str, what: str, error: type[Exception] = ValueError) -> Any:
    """The object a ``python:<name>`` reference names in this process; ``error`` saying why there is none.

    Args:
        reference: the reference (``python:my_reward``).
        what: what the config uses it as, for the message (``"reward"``, ``"environment"``).
        error: the exception type to raise.
    """
    name = reference[len(PREFIX):]
    if name in _objects:
        return _objects[name]
    raise error(
        f"{what} {reference!r} names a Python object that was handed to grove (grove.train, grove.make_config) in "
        f"the process that wrote this config, and this process has no object of that name: a command line, or a "
        f"resume from it, cannot reach objects defined in a notebook or a script. Either run (or resume) it from "
        f"Python, handing the same object again (grove.train(..., resume=True)), or define it at module level in "
        f"an importable module and name it by import path ('package.module:function')"
    )
