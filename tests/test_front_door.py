"""The front door: every kind of run resolves its config once (each component id looked up once), the plan says what
the components imply, and the layers after it look nothing up.

A patched :meth:`grove.registry.Registry.entry` counts the lookups of whole runs started as a user starts them
(``grove train`` on a task and on an environment, ``grove sft``, ``grove rm``, ``grove eval``, ``grove config show``).
"""

from __future__ import annotations

import ast
import json
from collections import Counter
from pathlib import Path

import pytest
from typer.testing import CliRunner

from grove.cli import app
from grove.config import ConfigError, read_config
from grove.models.tiny import create_tiny_model_dir
from grove.registry import POLICY_LOSSES, Registry
from grove.resolve import ModelNeeds, resolve

SRC = Path(__file__).resolve().parent.parent / "src" / "grove"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return create_tiny_model_dir(tmp_path_factory.mktemp("front_door") / "tiny", max_position_embeddings=2048)


@pytest.fixture
def lookups(monkeypatch) -> Counter:
    """Each (registry kind, id) looked up through ``Registry.entry`` (``get`` and parameter validation go through
    it), counted."""
    counts: Counter = Counter()
    original = Registry.entry

    def counting(self, id):
        counts[(self.kind, id)] += 1
        return original(self, id)

    monkeypatch.setattr(Registry, "entry", counting)
    return counts


def _settings(tiny: Path, out: Path, **extra) -> list[str]:
    values = {
        "model.name": tiny, "output_dir": out, "threads": 1, "train.steps": 2, "train.prompts_per_step": 2,
        "train.completions_per_prompt": 2, "rollout.max_new_tokens": 4, "task.train_size": 6, "task.eval_size": 2,
        "eval.before_training": False, "logging.progress": False, **extra,
    }
    return [a for k, v in values.items() for a in ("--set", f"{k}={v}")]


def _invoke(args: list[str]) -> None:
    result = CliRunner().invoke(app, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output


def _once(counts: Counter) -> None:
    assert counts, "nothing was looked up"
    twice = {key: n for key, n in counts.items() if n > 1}
    assert not twice, f"looked up more than once: {twice}"


def test_a_train_run_looks_each_component_up_once(tiny, tmp_path, lookups):
    _invoke(["train", "examples/arithmetic.yaml", *_settings(tiny, tmp_path / "run")])
    _once(lookups)
    assert {("advantage estimator", "grpo"), ("policy loss", "ppo_clip"), ("task", "arithmetic"),
            ("reward combiner", "sum_then_normalize"), ("rollout engine", "auto")} <= set(lookups)


def test_an_environment_run_looks_each_component_up_once(tiny, tmp_path, lookups):
    env = ("{id: frozenlake, params: {size: 4, slippery: false, maps: random, num_train_tasks: 4, num_eval_tasks: 2}, "
           "max_turns: 2, prompt: per_step, action_parser: {id: first_mention}}")
    _invoke(["train", "examples/arithmetic.yaml", *_settings(
        tiny, tmp_path / "run", env=env, **{"algorithm.advantage": "{id: gigpo}", "eval.max_examples": 2},
    )])
    _once(lookups)
    assert {("environment", "frozenlake"), ("action parser", "first_mention"), ("advantage estimator", "gigpo"),
            ("experience source", "environment")} <= set(lookups)
    assert any(kind == "step annotator" for kind, _ in lookups)


def test_sft_and_rm_runs_look_each_component_up_once(tiny, tmp_path, lookups):
    demos = tmp_path / "demos.jsonl"
    demos.write_text("".join(json.dumps({"messages": [
        {"role": "user", "content": f"add {i} and 1"}, {"role": "assistant", "content": f"{i + 1}"},
    ]}) + "\n" for i in range(8)))
    _invoke(["sft", "examples/arithmetic.yaml", *_settings(
        tiny, tmp_path / "sft", **{"sft.data": f"[{demos}]", "sft.batch_size": 4, "sft.eval_fraction": 0.25},
    )])
    _once(lookups)
    assert ("policy loss", "nll") in lookups
    lookups.clear()
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text("".join(json.dumps({"prompt": f"q{i}", "chosen": "yes 42", "rejected": "no fox"}) + "\n"
                             for i in range(8)))
    _invoke(["rm", "examples/arithmetic.yaml", *_settings(
        tiny, tmp_path / "rm", **{"rm.data": f"[{pairs}]", "rm.batch_size": 4, "rm.eval_fraction": 0.25},
    )])
    _once(lookups)


def test_eval_and_config_show_look_each_component_up_once(tiny, tmp_path, lookups):
    _invoke(["eval", "--config", "examples/arithmetic.yaml", *_settings(tiny, tmp_path / "run")])
    _once(lookups)
    lookups.clear()
    _invoke(["config", "show", "examples/arithmetic.yaml", *_settings(tiny, tmp_path / "run")])
    _once(lookups)


def test_the_plan_says_what_the_components_imply(tiny, tmp_path):
    cfg = read_config("examples/arithmetic.yaml", [f"model.name={tiny}", f"output_dir={tmp_path / 'run'}"])
    plan = resolve(cfg)
    assert plan.kind == "train" and plan.entries.advantage.id == cfg.algorithm.advantage.id
    assert plan.model_needs == ModelNeeds(reference=cfg.algorithm.kl.coef > 0)
    assert plan.objective_names == ("answer_match",) and plan.accuracy_reward == "answer_match"
    assert [r.name for r in plan.rewards] == ["answer_match"]  # resolved once, as the run calls them
    with_kl = resolve(read_config("examples/arithmetic.yaml", [f"model.name={tiny}", "algorithm.kl.coef=0.1"]))
    assert with_kl.model_needs.reference and with_kl.components.loss.kl_estimator is not None
    sft = resolve(read_config("examples/arithmetic.yaml", [
        f"model.name={tiny}", "algorithm.kl.coef=0.1", f"sft.data=[{tmp_path / 'demos.jsonl'}]",
    ]), "sft", preflight_checks=False)
    assert sft.entries.policy_loss.id == "nll" and sft.model_needs == ModelNeeds(reference=False)


def test_a_kind_the_config_cannot_run_is_refused_before_anything_else(tmp_path):
    cfg = read_config(None, [f"output_dir={tmp_path / 'run'}", "train.prompts_per_step=2"])
    with pytest.raises(ConfigError, match="grove sft needs an `sft` section"):
        resolve(cfg, "sft")
    with pytest.raises(ConfigError, match=r"train.prompts_per_step \(2\) is smaller than the number of processes \(4\)"):
        resolve(cfg, "train", world_size=4)
    with pytest.raises(ConfigError, match="algorithm.advantage: unknown advantage estimator 'grop'"):
        resolve(cfg.model_copy(update={"algorithm": cfg.algorithm.model_copy(
            update={"advantage": cfg.algorithm.advantage.model_copy(update={"id": "grop"})})}))


def test_no_capability_is_named_by_a_string():
    """Components declare what they require with :class:`grove.registry.Requires`; a string is refused."""
    with pytest.raises(TypeError, match="requires= takes grove.registry.Requires members"):
        POLICY_LOSSES.register("test_string_requirement", requires=("ref_logprobs",))(lambda inputs, params: None)
    for path in SRC.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.keyword) and node.arg == "requires" and isinstance(node.value, ast.Tuple):
                strings = [e.value for e in node.value.elts if isinstance(e, ast.Constant)]
                assert not strings, f"{path.relative_to(SRC)}: requires={strings}"


@pytest.mark.parametrize("package", ["training", "pipeline", "resolve"])
def test_functions_in_the_run_path_stay_short(package):
    """The loop, the pipeline after collection and the front door: no function over 60 lines."""
    long = []
    for path in (SRC / package).rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = node.end_lineno - node.lineno + 1
                if lines > 60:
                    long.append(f"{path.relative_to(SRC)}:{node.lineno} {node.name} ({lines} lines)")
    assert not long, long
