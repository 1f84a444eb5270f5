"""Generate the component and preset tables of ``docs/algorithms.md`` from the registries.

Every row comes from what the code registers: the id, ``summary``, ``formula``, ``paper`` and
``reference`` of the registry entry, and a config snippet built from the parameter model's defaults
(presets: :data:`grove.config.presets.PRESETS`; the components outside the core with the extra each needs, from their
declarations). The tables sit between marker lines
``<!-- generated: NAME -->`` and ``<!-- end generated: NAME -->``; everything outside them is written
by hand. ``tests/test_docs.py`` fails when a table differs from what this script generates, so the
docs cannot drift from the code.

    python scripts/docs_tables.py          # rewrite the generated tables
    python scripts/docs_tables.py --check  # exit 1 naming every table that is out of date
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable, Iterable
from pathlib import Path

import yaml

import grove.resolve  # noqa: F401  (registers every built-in component)
from grove.config.presets import PRESETS
from grove.registry import (
    ADVANTAGE_ESTIMATORS,
    KL_ESTIMATORS,
    LOSS_AGGREGATIONS,
    POLICY_LOSSES,
    REWARD_COMBINERS,
    Entry,
    Registry,
)

DOCS = Path(__file__).resolve().parent.parent / "docs"
TARGET = DOCS / "algorithms.md"


def builtin(registry: Registry) -> list[Entry]:
    """The entries grove itself registers (not those of user modules or tests imported in this process)."""
    return [e for e in registry if e.fn.__module__.startswith("grove.")]


def _flow(value: object) -> str:
    """A value as YAML flow syntax on one line (``{id: grpo, eps: 1.0e-06}``)."""
    return yaml.safe_dump(value, default_flow_style=True, sort_keys=False, width=10_000).strip()


def _defaults(entry: Entry) -> dict[str, object]:
    return {
        name: ("REQUIRED" if field.is_required() else field.default)
        for name, field in entry.params.model_fields.items()
    }


def _cell(text: str) -> str:
    """Escape what would break a Markdown table cell."""
    return text.replace("|", "\\|").replace("\n", " ")


def _code(text: str) -> str:
    return f"`{_cell(text)}`" if text else "–"


def _paper(paper: str) -> str:
    return _cell(paper) if paper else "–"


def component_table(registry: Registry, snippet: Callable[[Entry], str]) -> str:
    rows = [
        "| id | what it does | formula | paper | config (defaults) | reference matched |",
        "|---|---|---|---|---|---|",
    ]
    for e in builtin(registry):
        rows.append(
            f"| `{e.id}` | {_cell(e.summary)} | {_code(e.formula)} | {_paper(e.paper)} | {_code(snippet(e))} "
            f"| {_cell(e.reference) or '–'} |"
        )
    return "\n".join(rows)


def extras_table() -> str:
    """The tasks, rewards, environments and knowledge bases, each with the extra it needs (core: none)."""
    from grove.cli.components_command import component_rows

    rows = ["| kind | id | install | what it is |", "|---|---|---|---|"]
    for kind, id, extra, summary, _ in component_rows(["task", "reward function", "environment", "knowledge base"],
                                                          builtin_only=True):
        install = "core" if extra == "core" else f"`pip install 'grove[{extra}]'`"
        rows.append(f"| {kind} | `{id}` | {install} | {_cell(summary)} |")
    return "\n".join(rows)


def preset_table() -> str:
    rows = ["| preset | paper | what it sets | config |", "|---|---|---|---|"]
    for name, preset in PRESETS.items():
        rows.append(f"| `{name}` | {_paper(preset.paper)} | {_cell(preset.summary)} | `algorithm: {{preset: {name}}}` |")
    return "\n".join(rows)


TABLES: dict[str, Callable[[], str]] = {
    "advantage estimators": lambda: component_table(
        ADVANTAGE_ESTIMATORS, lambda e: f"advantage: {_flow({'id': e.id, **_defaults(e)})}"
    ),
    "policy losses": lambda: component_table(
        POLICY_LOSSES, lambda e: f"policy_loss: {_flow({'id': e.id, **_defaults(e)})}"
    ),
    "loss aggregations": lambda: component_table(LOSS_AGGREGATIONS, lambda e: f"aggregation: {e.id}"),
    "reward combiners": lambda: component_table(
        REWARD_COMBINERS, lambda e: f"reward_combination: {_flow({'id': e.id, **_defaults(e)})}"
    ),
    "KL estimators": lambda: component_table(KL_ESTIMATORS, lambda e: f"kl: {{estimator: {e.id}, coef: 0.01}}"),
    "presets": preset_table,
    "components by extra": extras_table,
}


def _block(name: str) -> re.Pattern[str]:
    return re.compile(
        rf"(<!-- generated: {re.escape(name)} -->\n)(.*?)(<!-- end generated: {re.escape(name)} -->)", re.S
    )


def render(text: str, names: Iterable[str] = TABLES) -> str:
    """``text`` with every generated table replaced by the current one (each marker pair must be present)."""
    for name in names:
        pattern = _block(name)
        if not pattern.search(text):
            raise ValueError(f"{TARGET.name} has no '<!-- generated: {name} -->' ... '<!-- end generated: {name} -->' block")
        table = TABLES[name]() + "\n"
        text = pattern.sub(lambda m, t=table: m.group(1) + t + m.group(3), text)
    return text


def stale_tables(text: str) -> list[str]:
    """The names of the tables in ``text`` that differ from what the registries generate."""
    return [name for name in TABLES if render(text, [name]) != text]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only report tables that are out of date")
    args = parser.parse_args(argv)
    text = TARGET.read_text()
    stale = stale_tables(text)
    if args.check:
        for name in stale:
            print(f"{TARGET}: the '{name}' table is out of date; run python scripts/docs_tables.py", file=sys.stderr)
        return 1 if stale else 0
    TARGET.write_text(render(text))
    print(f"{TARGET}: {len(stale)} table(s) updated" + (f" ({', '.join(stale)})" if stale else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
