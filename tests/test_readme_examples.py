"""The README's quickstart snippets work as written: the config of "Your own data and reward" loads and passes the
run's checks with a user reward, its Python snippet trains and evaluates, and the environment of "Your own
environment" builds and is won by counting up."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from grove.envs import build_environment
from grove.resolve import load_config

README = Path(__file__).resolve().parent.parent / "README.md"


def _block(language: str, first_line: str) -> str:
    """The README's fenced ``language`` block whose first line starts with ``first_line``."""
    for body in re.findall(rf"```{language}\n(.*?)```", README.read_text(), flags=re.S):
        if body.startswith(first_line):
            return body
    raise AssertionError(f"README.md has no ```{language} block starting with {first_line!r}")


@pytest.fixture
def importable(tmp_path, monkeypatch):
    """``tmp_path`` on ``sys.path`` (modules written there import), the modules forgotten afterwards."""
    monkeypatch.syspath_prepend(str(tmp_path))
    before = set(sys.modules)
    yield tmp_path
    for name in set(sys.modules) - before:
        if name.startswith(("my_package", "my_rewards")):
            del sys.modules[name]


def test_the_own_data_and_reward_config_loads(importable, monkeypatch):
    root = importable
    (root / "data").mkdir()
    for split in ("train", "test"):
        rows = [{"question": f"What is {i} + 1?", "answer": str(i + 1)} for i in range(5)]
        (root / "data" / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (root / "my_rewards.py").write_text(
        "def polite(prompts, completions, **columns):\n    return [float('please' in c) for c in completions]\n"
    )
    config = root / "my_task.yaml"
    config.write_text(_block("yaml", "# my_task.yaml"))
    monkeypatch.chdir(root)
    cfg = load_config(config, [])
    assert cfg.task.id == "jsonl" and [r.id for r in cfg.rewards] == ["answer_match", "my_rewards:polite"]
    assert cfg.algorithm.dynamic_sampling.enabled  # the dapo preset


def test_the_own_environment_builds_and_is_won_by_counting_up(importable):
    package = importable / "my_package"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "counter_env.py").write_text(_block("python", "# my_package/counter_env.py"))
    suite = build_environment("my_package.counter_env:make_suite", {})
    env = suite.make()
    first = env.reset(task_id=1, seed=0)
    assert first.anchor == -1 and first.admissible_actions == ("inc", "dec")
    transitions = [env.step("inc") for _ in range(4)]
    assert [t.done for t in transitions] == [False, False, False, True] and transitions[-1].info["won"]


def test_the_python_snippet_trains_and_evaluates(tmp_path, monkeypatch):
    """The snippet of "Your own data and reward" run as written, on a tiny model and one small step."""
    from grove.models.tiny import create_tiny_model_dir

    model = create_tiny_model_dir(tmp_path / "model", seed=0)
    code = _block("python", "import grove")
    small = (
        'train={"steps": 1, "prompts_per_step": 2, "completions_per_prompt": 2}, rollout={"max_new_tokens": 4}, '
        'threads=1, logging={"progress": False, "tensorboard": False}, eval={"max_examples": 4}'
    )
    assert '"smollm2-135m"' in code and 'train={"steps": 20}' in code
    code = code.replace('"smollm2-135m"', repr(str(model))).replace('train={"steps": 20}', small)
    code = code.replace("samples=4)", "samples=2, max_examples=3)")
    monkeypatch.chdir(tmp_path)
    exec(compile(code, "README.md", "exec"), {"__name__": "readme_snippet"})  # noqa: S102 - the README's own code
    assert (tmp_path / "runs" / "notebook" / "summary.json").is_file()
