"""Component blocks of the config: ``{id: <registry id>, <param>: <value>, ...}``, checked against a registry."""

from __future__ import annotations

import difflib
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from grove.registry import Registry

__all__ = ["ComponentParamsError", "ComponentSpec", "check_component"]


class ComponentSpec(BaseModel):
    """``{id: <registry id>, <param>: <value>, ...}``: a component and its parameters."""

    model_config = ConfigDict(extra="allow")

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
    try:
        spec.validated(registry)
    except ValidationError as exc:
        allowed = ", ".join(registry.entry(spec.id).params.model_fields) or "(none)"
        problems = "; ".join(  # each problem named by its full key, e.g. rewards.0.model
            f"{'.'.join((field, *(str(p) for p in e['loc'])))}: {e['msg']}" for e in exc.errors()
        )
        raise ComponentParamsError(f"{registry.kind} {spec.id!r}: {problems}. Parameters it takes: {allowed}") from None
