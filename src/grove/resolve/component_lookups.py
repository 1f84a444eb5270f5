"""The registry lookups of one run: each component id the config names is looked up once, here.

:class:`ComponentLookups` is what the front door (:func:`grove.resolve.resolve`) looks components up through: an id is
looked up the first time a key asks for it and the entry is kept, so checking a component, validating its parameters
and building the run all read the same :class:`grove.registry.Entry`. An unknown id, a declared component whose extra
is not installed, or parameters that do not validate become a ``ValueError`` naming the config key and the fix.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from grove.config.components import ComponentSpec, unknown_component, validated_params
from grove.registry import Entry, MissingExtraError, Registry

__all__ = ["ComponentLookups", "Resolved"]


@dataclass(frozen=True)
class Resolved:
    """A registry entry and the parameters the config gives it, validated against the entry's model."""

    entry: Entry
    params: BaseModel

    @property
    def id(self) -> str:
        return self.entry.id

    @property
    def fn(self) -> Any:
        return self.entry.fn


class ComponentLookups:
    """The entries one run looks up, each (registry, id) once (see the module docstring)."""

    def __init__(self) -> None:
        self._entries: dict[tuple[str, str], Entry] = {}

    def entry(self, registry: Registry, id: str, key: str) -> Entry:
        """The entry of ``id`` in ``registry``, for the config key ``key`` (named by the errors)."""
        found = self._entries.get((registry.kind, id))
        if found is not None:
            return found
        if id not in registry:
            raise ValueError(f"{key}: {unknown_component(registry, id)}")
        try:
            found = registry.entry(id)
        except MissingExtraError as exc:
            raise ValueError(f"{key}: {exc}") from None
        self._entries[(registry.kind, id)] = found
        return found

    def resolved(self, spec: ComponentSpec, registry: Registry, key: str) -> Resolved:
        """``spec``'s entry with its parameters validated (every float finite); a parameter problem is a
        :class:`grove.config.components.ComponentParamsError` naming each parameter by its full key."""
        entry = self.entry(registry, spec.id, key)
        return Resolved(entry, validated_params(spec.params, entry, registry.kind, key))
