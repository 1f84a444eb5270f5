"""Documentation coverage: every registered component, preset and config key is documented."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from pydantic import BaseModel

import grove.builtin_components  # noqa: F401
from grove.config import GroveConfig
from grove.config.presets import PRESETS
from grove.registry import (
    ADVANTAGE_ESTIMATORS,
    KL_ESTIMATORS,
    LOSS_AGGREGATIONS,
    POLICY_LOSSES,
    REWARD_FUNCTIONS,
)
from grove.tasks.task import TASKS

ROOT = Path(__file__).parent.parent
DOCS = ROOT / "docs"


def _docs_tables():
    spec = importlib.util.spec_from_file_location("docs_tables", ROOT / "scripts" / "docs_tables.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_generated_tables_match_the_registries():
    """docs/algorithms.md's tables are what scripts/docs_tables.py generates from the code, byte for byte."""
    tables = _docs_tables()
    text = (DOCS / "algorithms.md").read_text()
    assert tables.stale_tables(text) == [], "run: python scripts/docs_tables.py"
    assert tables.main(["--check"]) == 0


def test_generated_tables_detect_drift():
    tables = _docs_tables()
    text = (DOCS / "algorithms.md").read_text()
    drifted = text.replace("| `grpo` | Group mean and std normalised score.", "| `grpo` | Group mean, std.")
    assert drifted != text and tables.stale_tables(drifted) == ["advantage estimators"]
    with pytest.raises(ValueError, match="no '<!-- generated: presets -->'"):
        tables.render(text.replace("<!-- generated: presets -->", ""))


def test_every_component_and_preset_has_a_row_in_algorithms_md():
    table = (DOCS / "algorithms.md").read_text()
    builtin = _docs_tables().builtin
    for registry in (ADVANTAGE_ESTIMATORS, POLICY_LOSSES, KL_ESTIMATORS, LOSS_AGGREGATIONS):
        entries = builtin(registry)
        assert entries and all(e.paper or registry is LOSS_AGGREGATIONS for e in entries), registry.kind
        for entry in entries:
            assert f"| `{entry.id}` |" in table, f"{registry.kind} {entry.id!r} has no row in docs/algorithms.md"
            assert entry.summary and (entry.formula and entry.reference), f"{registry.kind} {entry.id!r} lacks docs fields"
    for name in PRESETS:
        assert f"| `{name}` |" in table and f"preset: {name}" in table, f"preset {name!r} has no row in docs/algorithms.md"


def test_every_reward_and_task_is_documented():
    text = (DOCS / "rewards-and-tasks.md").read_text()
    for id in REWARD_FUNCTIONS.ids() + TASKS.ids():
        assert f"`{id}`" in text, id


def test_every_environment_and_action_parser_is_documented():
    from grove.registry import ACTION_PARSERS, ENVIRONMENTS

    text = (DOCS / "environments.md").read_text()
    for id in ENVIRONMENTS.ids() + ACTION_PARSERS.ids():
        assert f"`{id}`" in text, id


def _keys(model: type[BaseModel], prefix: str = "") -> list[str]:
    out = []
    for name, field in model.model_fields.items():
        ann = field.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel) and name != "task":
            sub = _keys(ann, f"{prefix}{name}.")
            out += sub if sub and name not in ("advantage", "policy_loss", "reward_combination") else [prefix + name]
        else:
            out.append(prefix + name)
    return out


def test_every_config_key_is_in_config_md():
    text = (DOCS / "config.md").read_text()
    missing = [k for k in _keys(GroveConfig) if f"`{k}`" not in text]
    assert not missing, f"docs/config.md lacks: {missing}"
