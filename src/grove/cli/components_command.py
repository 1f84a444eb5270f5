"""``grove config components``: every component a config may name, by kind, with what it needs installed.

The ids and summaries come from the registries; those of the applications and hub adapters from their declarations
(:meth:`grove.registry.Registry.declare`), so listing imports none of them and works in a core-only install. The
``extra`` column says which ``pip install 'grove[...]'`` a component needs (``core``: nothing more) and whether it is
installed here.
"""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

__all__ = ["components", "component_rows"]


def component_rows(
    kinds: list[str] | None = None, builtin_only: bool = False
) -> list[tuple[str, str, str, str, bool]]:
    """``(kind, id, extra or "core", summary, installed)`` of every component of the registries (of ``kinds``);
    ``builtin_only``: grove's own (not those a user module or a test registered in this process)."""
    import grove.builtin_components  # noqa: F401  (registers the core's components, declares the others)
    from grove.registry import (
        ACTION_PARSERS,
        ADVANTAGE_ESTIMATORS,
        ENVIRONMENTS,
        EXPERIENCE_SOURCES,
        KL_ESTIMATORS,
        KNOWLEDGE_BASES,
        LOSS_AGGREGATIONS,
        POLICY_LOSSES,
        REWARD_COMBINERS,
        REWARD_FUNCTIONS,
        ROLLOUT_ENGINES,
        STEP_ANNOTATORS,
        extra_installed,
    )
    from grove.tasks.task import TASKS

    registries = [TASKS, REWARD_FUNCTIONS, ENVIRONMENTS, KNOWLEDGE_BASES, ACTION_PARSERS, ADVANTAGE_ESTIMATORS,
                  POLICY_LOSSES, LOSS_AGGREGATIONS, KL_ESTIMATORS, REWARD_COMBINERS, STEP_ANNOTATORS,
                  EXPERIENCE_SOURCES, ROLLOUT_ENGINES]
    rows = []
    for registry in registries:
        if kinds and registry.kind not in kinds:
            continue
        for id in registry.ids():
            declared = registry.declaration(id)
            if declared is not None:
                rows.append((registry.kind, id, declared.extra, declared.summary, extra_installed(declared)))
            else:
                entry = registry.entry(id)
                if builtin_only and not getattr(entry.fn, "__module__", "").startswith("grove."):
                    continue
                rows.append((registry.kind, id, "core", entry.summary, True))
    return rows


def components(
    kind: Annotated[
        list[str] | None,
        typer.Option("--kind", help="Only this kind (e.g. task, 'reward function', environment); repeatable."),
    ] = None,
) -> None:
    """List every component a config may name (tasks, rewards, environments, knowledge bases, estimators, losses,
    ...), with the extra it needs (`pip install 'grove[...]'`) and whether that extra is installed here."""
    table = Table(title="components (extra: what `pip install 'grove[...]'` brings it; core: nothing more)")
    for column in ("kind", "id", "extra", "installed", "summary"):
        table.add_column(column, overflow="fold")
    for kind_name, id, extra, summary, installed in component_rows(kind):
        table.add_row(kind_name, id, extra, "yes" if installed else "no", summary)
    Console().print(table)
