"""Component blocks of the config: ``{id: <registry id>, <param>: <value>, ...}``, checked against a registry."""

from __future__ import annotations

import difflib
import functools
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from grove.registry import Registry

__all__ = ["ComponentParamsError", "ComponentSpec", "check_component", "not_finite"]


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


def check_component(spec: ComponentSpec, registry: Registry, field: str) -> None:
    """Raise ``ValueError`` naming the unknown id (with the closest known one and the allowed ids) or the
    parameter problems (with the parameters the component takes)."""
    if spec.id not in registry:
        close = difflib.get_close_matches(spec.id, registry.ids(), n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise ValueError(f"unknown {registry.kind} {spec.id!r}.{hint} Allowed: {', '.join(registry.ids())}")
    params = registry.entry(spec.id).params
    try:
        _finite_params(params).model_validate(spec.params)
    except ValidationError as exc:
        allowed = ", ".join(params.model_fields) or "(none)"
        problems = "; ".join(  # each problem named by its full key, e.g. rewards.0.model
            f"{'.'.join((field, *(str(p) for p in e['loc'])))}: "
            f"{not_finite(e['input']) if e['type'] == 'finite_number' else e['msg']}"
            for e in exc.errors()
        )
        raise ComponentParamsError(f"{registry.kind} {spec.id!r}: {problems}. Parameters it takes: {allowed}") from None


@functools.cache
def _finite_params(params: type[BaseModel]) -> type[BaseModel]:
    """``params`` with its float fields refusing inf and NaN (a clip range or a coefficient of inf would turn the
    loss to NaN); the component itself is built from ``params``."""
    if params.model_config.get("allow_inf_nan") is False:
        return params
    namespace = {"model_config": ConfigDict(allow_inf_nan=False), "__module__": params.__module__}
    return type(params.__name__, (params,), namespace)
