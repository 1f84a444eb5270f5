"""The package layout is the architecture: layers import downwards only, and module names explain themselves."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parent.parent / "src" / "grove"

# package -> the grove packages (first component under grove.) it may import besides itself
ALLOWED = {
    "core": {"batch", "registry"},
    "models": {"batch", "core", "infra"},
    "rollout": set(),
    "rewards": {"registry", "user_code"},
    "tasks": {"knowledge", "registry"},
    "infra": {"core"},
    "evaluation": {"infra", "rewards", "rollout", "tasks", "user_code"},
    "config": {"builtin_components", "core", "infra", "registry", "tasks"},
    "pipeline": {"batch", "config", "core", "distributed", "infra", "models", "rewards", "rollout", "tasks"},
    "distributed": {"batch"},
    "knowledge": {"registry"},
    "envs": {"knowledge", "registry", "user_code"},
    "sft": {"batch", "config", "rollout"},
    "demos": {"config", "envs", "experience", "registry", "rewards", "rollout", "sft", "tasks", "user_code"},
    "view": {"infra"},
    "experience": {
        "batch", "config", "core", "distributed", "envs", "evaluation", "infra", "pipeline", "registry", "rewards",
        "rollout", "tasks", "user_code",
    },
}


def grove_imports(path: Path) -> set[str]:
    """The first components of every ``grove.X...`` a module imports."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        found |= {n.split(".")[1] for n in names if n.startswith("grove.") and n.count(".") >= 1}
    return found


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_layers_import_downwards_only(package):
    for path in sorted((SRC / package).rglob("*.py")):
        extra = grove_imports(path) - ALLOWED[package] - {package}
        assert not extra, f"{path.relative_to(SRC)} imports grove.{sorted(extra)}, outside what {package}/ may use"


def test_no_module_shadows_the_standard_library_or_repeats_a_name():
    modules = [p for p in SRC.rglob("*.py") if p.name != "__init__.py"]
    shadowing = [str(p.relative_to(SRC)) for p in modules if p.stem in sys.stdlib_module_names]
    assert not shadowing, f"modules named like standard-library modules: {shadowing}"
    stems = [p.stem for p in modules]
    repeated = sorted({s for s in stems if stems.count(s) > 1})
    assert not repeated, f"module names used twice in the tree: {repeated}"
