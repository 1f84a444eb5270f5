"""Build an :class:`~grove.envs.base.EnvironmentSuite` from a registry id or a ``"package.module:attr"`` path.

Mirrors how rewards are found (:func:`grove.rewards.scoring.resolve_reward`) and how config components are
checked (:func:`grove.config.components.check_component`): a registry id has its parameters validated against
the pydantic model it registered; a user factory is imported by path and

* if it is registered in ``ENVIRONMENTS`` (under any id), or its first parameter is annotated with a pydantic
  model, the parameters are validated against that model and the factory gets the model instance;
* otherwise it gets the plain ``dict`` of parameters (it validates them itself).

Bad parameters raise ``ValueError`` naming the offending fields and the parameters the environment takes.

A factory that declares a keyword parameter ``tokenizer`` gets the policy's tokenizer (or ``None`` when
there is none, e.g. in a unit test): environments that budget their observations in tokens use it.

A factory that calls ``sys.exit`` (or raises ``KeyboardInterrupt`` while grove handles the stop signals) does not
end the process silently: it raises :class:`grove.user_code.UserCodeExit` naming the environment.
"""

from __future__ import annotations

import difflib
import inspect
import typing
from collections.abc import Callable, Mapping
from typing import Any

from pydantic import BaseModel, ValidationError

from grove.envs.base import EnvironmentSuite
from grove.registry import ENVIRONMENTS, Entry, import_callable
from grove.user_code import user_code

__all__ = ["build_environment", "import_factory"]


def import_factory(path: str) -> Callable[..., Any]:
    """The callable at ``"package.module:attr"`` (``attr`` may be dotted); ``ValueError`` when it is not there."""
    return import_callable(path, "environment")


def _params_model(fn: Callable[..., Any]) -> type[BaseModel] | None:
    """The parameter model of ``fn``: the one it registered with, else its first parameter's annotation."""
    for entry in ENVIRONMENTS:
        if entry.fn is fn:
            return entry.params
    try:
        first = next(iter(inspect.signature(fn).parameters.values()), None)
        hints = typing.get_type_hints(fn)
    except (TypeError, ValueError, NameError):
        return None
    hint = hints.get(first.name) if first is not None else None
    return hint if isinstance(hint, type) and issubclass(hint, BaseModel) else None


def _validate(model: type[BaseModel], params: Mapping[str, Any], name: str) -> BaseModel:
    try:
        return model.model_validate(dict(params))
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'params'}: {e['msg']}" for e in exc.errors()
        )
        allowed = ", ".join(model.model_fields) or "(none)"
        raise ValueError(f"environment {name!r}: {problems}. Parameters it takes: {allowed}") from None


def _call(fn: Callable[..., Any], params: Any, tokenizer: Any, name: str) -> Any:
    """``fn(params)``, plus ``tokenizer=`` when ``fn`` declares that keyword; a ``sys.exit`` in it raises
    :class:`grove.user_code.UserCodeExit` naming the environment ``name``."""
    try:
        takes_tokenizer = "tokenizer" in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        takes_tokenizer = False
    with user_code(f"environment {name!r} factory"):
        return fn(params, tokenizer=tokenizer) if takes_tokenizer else fn(params)


def build_environment(
    id_or_path: str, params: Mapping[str, Any] | None = None, *, tokenizer: Any = None, entry: Entry | None = None
) -> EnvironmentSuite:
    """The suite of a registered environment id (``"sokoban"``) or of a user factory (``"my_pkg.envs:make_suite"``);
    ``entry``: the registered environment's entry, where the caller looked it up already (the run's front door).

    Raises:
        ValueError: unknown id (with the closest known one), unimportable path, invalid parameters (naming the
            fields), or a factory that does not return an ``EnvironmentSuite``.
        UserCodeExit: the factory called ``sys.exit`` instead of returning.
    """
    params = dict(params or {})
    if ":" in id_or_path:
        fn = import_factory(id_or_path)
        model = _params_model(fn)
        suite = _call(fn, _validate(model, params, id_or_path) if model is not None else params, tokenizer, id_or_path)
    else:
        if entry is None and id_or_path not in ENVIRONMENTS:
            close = difflib.get_close_matches(id_or_path, ENVIRONMENTS.ids(), n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            raise ValueError(
                f"unknown environment {id_or_path!r}.{hint} Known: {', '.join(ENVIRONMENTS.ids())}; a user "
                "environment is given by import path, 'package.module:factory'"
            )
        entry = entry or ENVIRONMENTS.entry(id_or_path)
        suite = _call(entry.fn, _validate(entry.params, params, id_or_path), tokenizer, id_or_path)
    if not isinstance(suite, EnvironmentSuite):
        raise ValueError(
            f"environment {id_or_path!r} returned {type(suite).__name__}, not an EnvironmentSuite"
        )
    return suite
