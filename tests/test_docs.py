"""Documentation coverage: every registered component, preset and config key is documented."""

from __future__ import annotations

from pathlib import Path

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
from grove.tasks.base import TASKS

DOCS = Path(__file__).parent.parent / "docs"


def test_every_component_and_preset_has_a_row_in_algorithms_md():
    table = (DOCS / "algorithms.md").read_text()
    for registry in (ADVANTAGE_ESTIMATORS, POLICY_LOSSES, KL_ESTIMATORS, LOSS_AGGREGATIONS):
        for id in registry.ids():
            assert f"| `{id}` |" in table, f"{registry.kind} {id!r} has no row in docs/algorithms.md"
    for name in PRESETS:
        assert f"| preset | `{name}` |" in table, f"preset {name!r} has no row in docs/algorithms.md"


def test_every_reward_and_task_is_documented():
    text = (DOCS / "rewards-and-tasks.md").read_text()
    for id in REWARD_FUNCTIONS.ids() + TASKS.ids():
        assert f"`{id}`" in text, id


def _keys(model: type[BaseModel], prefix: str = "") -> list[str]:
    out = []
    for name, field in model.model_fields.items():
        ann = field.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel) and name != "task":
            sub = _keys(ann, f"{prefix}{name}.")
            out += sub if sub and name not in ("advantage", "policy_loss") else [prefix + name]
        else:
            out.append(prefix + name)
    return out


def test_every_config_key_is_in_config_md():
    text = (DOCS / "config.md").read_text()
    missing = [k for k in _keys(GroveConfig) if f"`{k}`" not in text]
    assert not missing, f"docs/config.md lacks: {missing}"
