"""Component blocks of the config: ``{id: <registry id>, <param>: <value>, ...}``, checked against a registry."""

from __future__ import annotations

import difflib
import functools
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from grove.registry import Entry, Registry

__all__ = [
    "ComponentParamsError", "ComponentSpec", "check_component", "not_finite", "unknown_component", "validated_params",
]


def not_finite(value: Any) -> str:
    """The problem of a number that is not finite, and the fix."""
    return (
        f"{value!r} is not a finite number (YAML reads .inf, .nan and numbers beyond about 1.8e308, such as 1e400, "
        "as infinite or NaN); give a finite value"
    )


class ComponentSpec(BaseModel):
    """``{id: <registry id>, <param>: <value>, ...}``: a component and its parameters; a number among the fields of a
    subclass (a reward's ``weight``) must be finite, as must every float parameter (:func:`check_component`)."""

    model_config = ConfigDict(extra="allow", allow_inf_nan=False)

    id: str

    @property
    def params(self) -> dict[str, Any]:
        return dict(self.model_extra or {})

    def validated(self, registry: Registry) -> BaseModel:
        """The parameters, validated against the model the component registered."""
        return registry.validate_params(self.id, self.params)


class ComponentParamsError(ValueError):
    """A known component's parameters are invalid; the message names each problem by its full key."""


def unknown_component(registry: Registry, id: str) -> str:
    """The message for an id ``registry`` does not know: the closest known one and the allowed ids."""
    close = difflib.get_close_matches(id, registry.ids(), n=1)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    return f"unknown {registry.kind} {id!r}.{hint} Allowed: {', '.join(registry.ids())}"


def validated_params(values: dict[str, Any], entry: Entry, kind: str, field: str) -> BaseModel:
    """``values`` validated against ``entry``'s parameter model, every float finite; a problem is a
    :class:`ComponentParamsError` naming each parameter by its full key under ``field`` and the parameters it
    takes."""
    try:
        _finite_params(entry.params).model_validate(values)
        return entry.params.model_validate(values)
    except ValidationError as exc:
        allowed = ", ".join(entry.params.model_fields) or "(none)"
        problems = "; ".join(  # each problem named by its full key, e.g. rewards.0.model
            f"{'.'.join((field, *(str(p) for p in e['loc'])))}: "
            f"{not_finite(e['input']) if e['type'] == 'finite_number' else e['msg']}"
            for e in exc.errors()
        )
        raise ComponentParamsError(f"{kind} {entry.id!r}: {problems}. Parameters it takes: {allowed}") from None


def check_component(spec: ComponentSpec, registry: Registry, field: str) -> None:
    """Raise ``ValueError`` naming the unknown id (:func:`unknown_component`) or the parameter problems
    (:func:`validated_params`)."""
    if spec.id not in registry:
        raise ValueError(unknown_component(registry, spec.id))
    validated_params(spec.params, registry.entry(spec.id), registry.kind, field)


@functools.cache
def _finite_params(params: type[BaseModel]) -> type[BaseModel]:
    """``params`` with its float fields refusing inf and NaN (a clip range or a coefficient of inf would turn the
    loss to NaN); the component itself is built from ``params``."""
    if params.model_config.get("allow_inf_nan") is False:
        return params
    namespace = {"model_config": ConfigDict(allow_inf_nan=False), "__module__": params.__module__}
    return type(params.__name__, (params,), namespace)
