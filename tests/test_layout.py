"""The package layout is the architecture: layers import downwards only, and module names explain themselves."""

from __future__ import annotations

import ast
import functools
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parent.parent / "src" / "grove"

# package or top-level module -> the grove packages and modules (first component under grove.) it may import
ALLOWED = {
    "step_table": set(),
    "vision": {"optional_packages"},
    "batch": {"step_table", "vision"},
    "atomic_files": set(),
    "user_code": set(),
    "python_objects": set(),
    "optional_packages": set(),
    "registry": {"optional_packages", "python_objects", "user_code"},
    "builtin_components": {"core", "envs", "experience", "registry", "rewards", "rollout_engines", "tasks"},
    "rollout_engines": {"config", "registry", "rollout"},
    "core": {"batch", "registry"},
    "kernels": set(),
    "models": {"batch", "core", "infra", "kernels", "rollout", "vision"},
    "rollout": {"vision"},
    "rewards": {"infra", "models", "python_objects", "registry", "user_code"},
    "tasks": {"atomic_files", "knowledge", "optional_packages", "registry"},
    "infra": {"atomic_files", "kernels", "optional_packages", "user_code"},
    "evaluation": {"infra", "rewards", "rollout", "tasks", "user_code"},
    "config": {"core", "infra", "optional_packages", "registry", "tasks"},
    "pipeline": {"batch", "config", "core", "distributed", "infra", "kernels", "models", "rewards", "rollout", "tasks"},
    "distributed": {"batch"},
    "knowledge": {"atomic_files", "registry"},
    "envs": {"knowledge", "registry", "user_code"},
    "sft": {"batch", "config", "rollout", "vision"},
    "rm": {"batch", "config", "distributed", "evaluation", "infra", "pipeline", "rewards", "sft"},
    "demos": {
        "atomic_files", "config", "envs", "experience", "registry", "rewards", "rollout", "sft", "tasks", "user_code",
        "vision",
    },
    "view": {"infra"},
    "resolve": {
        "builtin_components", "config", "core", "envs", "experience", "infra", "models", "pipeline", "registry",
        "rewards", "tasks", "user_code", "vision",
    },
    "experience": {
        "batch", "config", "core", "distributed", "envs", "evaluation", "infra", "pipeline", "registry", "rewards",
        "rm", "rollout", "sft", "tasks", "user_code", "vision",
    },
    "training": {
        "atomic_files", "batch", "builtin_components", "config", "distributed", "envs", "evaluation", "experience",
        "infra", "models", "pipeline", "registry", "resolve", "rewards", "rm", "rollout", "rollout_engines", "sft",
        "user_code", "vision",
    },
    "command_failures": {
        "config", "envs", "experience", "infra", "models", "rewards", "rollout", "sft", "tasks", "user_code",
    },
    "api": {"atomic_files", "config", "evaluation", "experience", "infra", "models", "optional_packages",
            "python_objects", "resolve", "rollout_engines", "training"},
    "cli": {
        "api", "builtin_components", "command_failures", "config", "demos", "distributed", "evaluation",
        "experience", "infra", "models", "optional_packages", "registry", "resolve", "rollout", "rollout_engines",
        "tasks", "training", "view",
    },
    # hub adapters and applications: one folder each, importing the core only (never another folder outside it)
    "hubs": {"atomic_files", "config", "envs", "python_objects", "registry", "rewards", "tasks", "user_code"},
    "wings": {
        "atomic_files", "config", "core", "demos", "envs", "knowledge", "python_objects", "registry", "rewards",
        "tasks", "user_code",
    },
}

# the folders outside the core (the registry loads their declarations by name: grove.registry.load_declarations)
OUTSIDE_THE_CORE = ("hubs", "wings")


def files_of(package: str) -> list[Path]:
    """The source files of a package, or the one file of a top-level module."""
    module = SRC / f"{package}.py"
    return [module] if module.is_file() else sorted((SRC / package).rglob("*.py"))


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
    files = files_of(package)
    assert files, f"grove.{package} has no source file"
    for path in files:
        extra = grove_imports(path) - ALLOWED[package] - {package}
        assert not extra, f"{path.relative_to(SRC)} imports grove.{sorted(extra)}, outside what {package}/ may use"


def test_the_core_never_imports_a_hub_or_an_application():
    """No core module imports anything outside the core (the registry loads the folders' ``*_declarations`` modules
    by name, :func:`grove.registry.load_declarations`), and a folder outside the core imports no other folder."""
    graph = module_graph()
    for name, targets in graph.items():
        top = name.split(".")[1] if name.count(".") else ""
        for target in targets:
            outside = target.split(".")[1] if target.count(".") else ""
            if outside not in OUTSIDE_THE_CORE:
                continue
            assert top in OUTSIDE_THE_CORE, f"the core module {name} imports {target}"
            assert target.split(".")[:3] == name.split(".")[:3] or target.count(".") == 1, (
                f"{name} imports {target}, another folder outside the core")


def _is_type_checking_block(node: ast.AST) -> bool:
    test = getattr(node, "test", None)
    name = test.id if isinstance(test, ast.Name) else test.attr if isinstance(test, ast.Attribute) else None
    return isinstance(node, ast.If) and name == "TYPE_CHECKING"


@functools.cache
def module_graph() -> dict[str, frozenset[str]]:
    """Every grove module (dotted name) and the grove modules it imports at run time, at any depth of its code (an
    import inside a function still ties the two files together; one under ``if TYPE_CHECKING:`` does not). ``from grove.a import b`` points at ``grove.a.b`` where that is a
    module, else at ``grove.a``."""
    modules = {}
    for path in SRC.rglob("*.py"):
        parts = ("grove",) + path.relative_to(SRC).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph = {}
    for name, path in modules.items():
        targets = set()
        tree = ast.parse(path.read_text())
        type_only = {id(n) for block in ast.walk(tree) if _is_type_checking_block(block) for n in ast.walk(block)}
        for node in ast.walk(tree):
            if id(node) in type_only:
                continue
            if isinstance(node, ast.Import):
                targets |= {a.name for a in node.names if a.name.startswith("grove.")}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0 and node.module.startswith("grove"):
                for alias in node.names:
                    full = f"{node.module}.{alias.name}"
                    targets.add(full if full in modules else node.module)
        graph[name] = frozenset(t for t in targets if t in modules and t != name)
    return graph


def import_circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan's algorithm, iteratively)."""
    index, low, on_stack, stack, circles, counter = {}, {}, set(), [], [], [0]
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        circles.append(sorted(component))
            elif child not in index:
                index[child] = low[child] = counter[0]
                counter[0] += 1
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(graph[child]))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return circles


def test_import_circles_finds_a_circle_and_only_circles():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert import_circles(graph) == [["a", "b", "c"]]
    assert import_circles({"a": {"b"}, "b": set()}) == []


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_no_import_circle_inside_a_package(package):
    graph = module_graph()
    prefix = f"grove.{package}"
    inside = {m: {t for t in ts if t == prefix or t.startswith(prefix + ".")} for m, ts in graph.items()
              if m == prefix or m.startswith(prefix + ".")}
    assert import_circles(inside) == [], f"modules of {package}/ that import each other in a circle"


def test_no_module_shadows_the_standard_library_or_repeats_a_name():
    modules = [p for p in SRC.rglob("*.py") if p.name not in ("__init__.py", "__main__.py")]
    shadowing = [str(p.relative_to(SRC)) for p in modules if p.stem in sys.stdlib_module_names]
    assert not shadowing, f"modules named like standard-library modules: {shadowing}"
    stems = [p.stem for p in modules]
    repeated = sorted({s for s in stems if stems.count(s) > 1})
    assert not repeated, f"module names used twice in the tree: {repeated}"
