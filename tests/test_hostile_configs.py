"""Configs written to break grove are refused at once with one ``error:`` naming the key (or the file and line) and
exit code 2: a YAML alias bomb, numbers that are not finite, a seed beyond what the generators take, an
``output_dir`` that is empty, holds a NUL character or is a symlink loop.

Each mistake goes through the command line (``grove config show`` and ``grove train``) from a YAML file or a
``--set``; the schema-wide rules are checked on every float of the schema and of every registered component.
"""

from __future__ import annotations

import math
import time
import types
import typing
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ValidationError
from typer.testing import CliRunner

import grove.builtin_components  # noqa: F401  (fills the registries)
from grove.cli import app
from grove.config import ConfigError, GroveConfig
from grove.config.components import ComponentParamsError, ComponentSpec, check_component
from grove.config.loading import ALIAS_EXPANSION_LIMIT
from grove.config.schema import MAX_SEED
from grove.models.tiny import create_tiny_model_dir
from grove.registry import (
    ACTION_PARSERS,
    ADVANTAGE_ESTIMATORS,
    ENVIRONMENTS,
    POLICY_LOSSES,
    REWARD_COMBINERS,
    REWARD_FUNCTIONS,
)
from grove.resolve import load_config
from grove.tasks.task import TASKS

runner = CliRunner()
FAST = settings(max_examples=40, deadline=None, database=None, suppress_health_check=list(HealthCheck))


@pytest.fixture(scope="module", autouse=True)
def _warm_loader(tmp_path_factory) -> None:
    """Load one plain config through the library and the command line first, so the timed checks below measure
    how a config is read, not the first call's one-off imports."""
    plain = _config(tmp_path_factory.mktemp("warm"), "task:\n  id: arithmetic\n")
    load_config(plain)
    assert _show(str(plain)).exit_code == 0


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return create_tiny_model_dir(tmp_path_factory.mktemp("hostile") / "model", seed=0)


def _train_args(model: Path, out: Path) -> list[str]:
    values = {
        "model.name": str(model), "output_dir": str(out), "threads": 1,
        "task": "{id: arithmetic, train_size: 8, eval_size: 2}", "rollout.max_new_tokens": 4, "train.steps": 1,
        "train.prompts_per_step": 2, "train.completions_per_prompt": 2, "train.micro_batch_size": 4,
        "logging.progress": False, "logging.plots": False, "logging.tensorboard": False,
        "eval.before_training": False,
    }
    return [a for k, v in values.items() for a in ("--set", f"{k}={v}")]


def _config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(text)
    return path


def _show(*args: str):
    return runner.invoke(app, ["config", "show", "--no-memory", *args])


def _train(config: Path, model: Path, out: Path, *sets: str):
    args = _train_args(model, out) + [a for s in sets for a in ("--set", s)]
    return runner.invoke(app, ["train", str(config), *args])


def _one_error(result, *fragments: str) -> str:
    """Assert a clean user error (exit 2, one ``error:``, no traceback) holding ``fragments``; return it flattened."""
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert result.output.count("error:") == 1, result.output
    text = " ".join(result.output[result.output.index("error:") :].split())
    for fragment in fragments:
        assert fragment in text, f"{fragment!r} not in: {text}"
    return text


# ---------------------------------------------------------------------------------------------- YAML alias bombs
def _bomb(width: int, depth: int, indent: str = "  ") -> str:
    """Anchors referencing the previous anchor ``width`` times, ``depth`` levels deep ("billion laughs")."""
    lines = [f"{indent}l0: &a0 [{', '.join(['lol'] * width)}]"]
    lines += [f"{indent}l{i}: &a{i} [{', '.join([f'*a{i - 1}'] * width)}]" for i in range(1, depth + 1)]
    return "\n".join(lines) + "\n"


def _added_values(width: int, depth: int) -> int:
    """How many values the aliases of :func:`_bomb` add to what the text writes out."""
    sizes = [1 + width]
    for _ in range(depth):
        sizes.append(1 + width * sizes[-1])
    written = (1 + width) + depth  # the first list and its items, then one list per level
    return sum(sizes) - written


BILLION_LAUGHS = "task:\n  id: arithmetic\n" + _bomb(9, 9, "  ")


def test_a_billion_laughs_file_is_refused_at_once_by_config_show_and_train(tmp_path, tiny):
    config = _config(tmp_path, BILLION_LAUGHS)
    assert len(BILLION_LAUGHS) < 1024
    start = time.perf_counter()
    text = _one_error(_show(str(config)), str(config), "line 11", "alias bomb", f"{ALIAS_EXPANSION_LIMIT:,}")
    assert time.perf_counter() - start < 2.0, text
    start = time.perf_counter()
    _one_error(_train(config, tiny, tmp_path / "run"), str(config), "alias bomb")
    assert time.perf_counter() - start < 2.0
    assert not (tmp_path / "run").exists()


def test_a_billion_laughs_set_value_is_refused_at_once():
    levels = ", ".join(
        [f"l0: &a0 [{', '.join(['lol'] * 9)}]"] + [f"l{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 9)]
    )
    start = time.perf_counter()
    _one_error(_show("--set", f"task={{id: arithmetic, {levels}}}"), "--set task", "alias bomb")
    assert time.perf_counter() - start < 2.0


def test_a_bomb_of_merge_keys_is_refused_at_once(tmp_path):
    lines = ["task:", "  id: arithmetic", "  m0: &m0 {k0: 1, k1: 2, k2: 3}"]
    lines += [f"  m{i}: &m{i} {{<<: [{', '.join([f'*m{i - 1}'] * 9)}], k{i}: 1}}" for i in range(1, 12)]
    config = _config(tmp_path, "\n".join(lines) + "\n")
    start = time.perf_counter()
    _one_error(_show(str(config)), str(config), "line 13", "alias bomb")
    assert time.perf_counter() - start < 2.0


@FAST
@given(width=st.integers(2, 12), depth=st.integers(1, 12))
def test_aliases_are_refused_exactly_beyond_the_limit_and_checked_in_linear_time(tmp_path_factory, width, depth):
    config = _config(tmp_path_factory.mktemp("bomb"), "task:\n  id: arithmetic\n" + _bomb(width, depth))
    start = time.perf_counter()
    with pytest.raises(ConfigError) as info:  # within the limit, the task refuses the extra parameters
        load_config(config)
    assert time.perf_counter() - start < 2.0
    refused = "alias bomb" in str(info.value)
    assert refused == (_added_values(width, depth) > ALIAS_EXPANSION_LIMIT), str(info.value)
    assert refused or "task.l0" in str(info.value)


def test_aliases_that_share_a_block_still_load(tmp_path):
    config = _config(
        tmp_path,
        "rewards:\n  - &match {id: answer_match, extract: last_number, weight: 2.0}\n"
        "  - {<<: *match, name: twice, weight: 1.0}\n"
        "rollout:\n  stop: &stops [\"\\n\\n\", '###']\neval:\n  accuracy_reward: answer_match\n",
    )
    cfg = load_config(config)
    assert [r.display_name for r in cfg.rewards] == ["answer_match", "twice"]
    assert cfg.rewards[1].params == {"extract": "last_number"}
    assert cfg.rollout.stop == ["\n\n", "###"]
    assert _show(str(config)).exit_code == 0


# ----------------------------------------------------------------------------------------- numbers must be finite
NOT_FINITE = {  # key: (YAML text of the mistake, what the error names)
    "optim.lr .inf": ("optim:\n  lr: .inf\n", "optim.lr: inf is not a finite number"),
    "optim.lr 1e400": ("optim:\n  lr: 1e400\n", "optim.lr: '1e400' is not a finite number"),
    "optim.lr 1.0e+400": ("optim:\n  lr: 1.0e+400\n", "optim.lr: inf is not a finite number"),
    "optim.betas": ("optim:\n  betas: [.nan, 0.999]\n", "optim.betas.0"),
    "optim.eps": ("optim:\n  eps: .inf\n", "optim.eps: inf"),
    "optim.weight_decay": ("optim:\n  weight_decay: .inf\n", "optim.weight_decay: inf"),
    "kl.coef": ("algorithm:\n  kl: {coef: .inf}\n", "algorithm.kl.coef: inf"),
    "entropy.coef": ("algorithm:\n  entropy: {coef: -.inf}\n", "algorithm.entropy.coef: -inf"),
    "clip range": (
        "algorithm:\n  policy_loss: {id: ppo_clip, clip_high: .inf}\n", "algorithm.policy_loss.clip_high: inf"
    ),
    "temperature": ("rollout:\n  temperature: .nan\n", "rollout.temperature: nan"),
    "reward weight": ("rewards:\n  - {id: answer_match, weight: .inf}\n", "rewards.0.weight: inf"),
    "reward timeout": (
        "rewards:\n  - {id: answer_match, isolation: process, timeout_s: .inf}\n", "rewards.0.timeout_s: inf"
    ),
    "lora alpha": ("model:\n  lora: {alpha: .inf}\n", "model.lora.alpha: inf"),
    "collective timeout": ("distributed:\n  timeout_seconds: .inf\n", "distributed.timeout_seconds: inf"),
    "time budget": ("train:\n  time_budget_seconds: .inf\n", "train.time_budget_seconds: inf"),
    "env step timeout": ("env:\n  id: frozenlake\n  step_timeout_s: .inf\n", "env.step_timeout_s: inf"),
    "env parameter": ("env:\n  id: frozenlake\n  params: {p: .nan}\n", "env.params.p: nan"),
}


@pytest.mark.parametrize("name", list(NOT_FINITE))
def test_a_number_that_is_not_finite_is_refused_naming_the_key(tmp_path, name):
    text, fragment = NOT_FINITE[name]
    _one_error(_show(str(_config(tmp_path, text))), fragment, "give a finite value")


def test_train_refuses_an_infinite_learning_rate_before_the_model_loads(tmp_path, tiny):
    config = _config(tmp_path, "optim:\n  lr: .inf\n")
    _one_error(_train(config, tiny, tmp_path / "run"), "optim.lr: inf is not a finite number")
    assert not (tmp_path / "run").exists()
    _one_error(_train(_config(tmp_path, "seed: 0\n"), tiny, tmp_path / "run", "optim.lr=1e400"), "optim.lr")


def _models(annotation) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for a in typing.get_args(annotation) for m in _models(a)]


def _float_fields(model: type[BaseModel], seen: set[type] | None = None) -> list[tuple[type[BaseModel], str]]:
    """``(model, field)`` for every field of ``model``'s tree whose type admits a float."""
    seen = set() if seen is None else seen
    if model in seen:
        return []
    seen.add(model)
    found = []
    for name, field in model.model_fields.items():
        if _admits_float(field.annotation):
            found.append((model, name))
        for sub in _models(field.annotation):
            found += _float_fields(sub, seen)
    return found


def _admits_float(annotation) -> bool:
    if annotation is float:
        return True
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _admits_float(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType, tuple, list, dict):
        return any(_admits_float(a) for a in typing.get_args(annotation))
    return False


SCHEMA_FLOATS = _float_fields(GroveConfig)


def _shaped(annotation, value: float):
    """``value`` in the shape ``annotation`` takes (a list, a tuple, a mapping, or itself)."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _shaped(typing.get_args(annotation)[0], value)
    if origin in (typing.Union, types.UnionType):
        return _shaped(next(a for a in typing.get_args(annotation) if _admits_float(a)), value)
    if origin is tuple:
        return tuple(_shaped(a, value) for a in typing.get_args(annotation))
    if origin is list:
        return [_shaped(typing.get_args(annotation)[0], value)]
    if origin is dict:
        return {"x": _shaped(typing.get_args(annotation)[1], value)}
    return value


def test_every_float_of_the_schema_refuses_numbers_that_are_not_finite():
    assert len(SCHEMA_FLOATS) > 30
    for model, name in SCHEMA_FLOATS:
        for value in (math.inf, -math.inf, math.nan):
            with pytest.raises(ValidationError) as info:
                model.model_validate({name: _shaped(model.model_fields[name].annotation, value)})
            assert any(e["loc"][0] == name for e in info.value.errors()), (model.__name__, name, value)


def test_every_section_of_the_schema_refuses_numbers_that_are_not_finite_by_its_config():
    sections = {model for model, _name in SCHEMA_FLOATS if model.__module__.startswith("grove.config")}
    lax = sorted(m.__name__ for m in sections | {GroveConfig} if m.model_config.get("allow_inf_nan", True))
    assert not lax, f"sections that accept inf and NaN: {lax}"


COMPONENT_REGISTRIES = {
    "task": TASKS, "algorithm.advantage": ADVANTAGE_ESTIMATORS, "algorithm.policy_loss": POLICY_LOSSES,
    "algorithm.reward_combination": REWARD_COMBINERS, "rewards.0": REWARD_FUNCTIONS, "env.params": ENVIRONMENTS,
    "env.action_parser": ACTION_PARSERS,
}
COMPONENT_FLOATS = sorted(
    (field, id_, name)
    for field, registry in COMPONENT_REGISTRIES.items()
    for id_ in registry.ids()
    for name, info in registry.entry(id_).params.model_fields.items()
    if _admits_float(info.annotation)
)


def test_every_float_parameter_of_a_component_refuses_numbers_that_are_not_finite():
    assert len(COMPONENT_FLOATS) > 20
    for field, id_, name in COMPONENT_FLOATS:
        registry = COMPONENT_REGISTRIES[field]
        for value in (math.inf, -math.inf, math.nan):
            with pytest.raises(ComponentParamsError) as info:
                params = {name: _shaped(registry.entry(id_).params.model_fields[name].annotation, value)}
                check_component(ComponentSpec(id=id_, **params), registry, field)
            assert f"{field}.{name}" in str(info.value), str(info.value)
            assert f": {value!r} is not a finite number" in str(info.value), str(info.value)


def test_every_registered_component_that_takes_its_defaults_still_does():
    checked = 0
    for field, registry in COMPONENT_REGISTRIES.items():
        for id_ in registry.ids():
            try:
                registry.validate_params(id_, {})
            except ValidationError:
                continue  # a parameter is required
            check_component(ComponentSpec(id=id_), registry, field)
            checked += 1
    assert checked > 50


# --------------------------------------------------------------------------------------------------------- seed
@pytest.mark.parametrize("seed", [2**64, 10**30, MAX_SEED + 1, -1])
def test_a_seed_outside_the_generators_range_is_refused(tmp_path, seed):
    text = _one_error(_show("--set", f"seed={seed}"), f"seed: {seed}", f"from 0 to {MAX_SEED}")
    assert text.startswith("error: invalid configuration")
    _one_error(_show(str(_config(tmp_path, f"seed: {seed}\n"))), "seed", f"from 0 to {MAX_SEED}")


def test_train_refuses_a_seed_beyond_64_bits_and_runs_with_the_largest_seed(tmp_path, tiny):
    config = _config(tmp_path, f"seed: {2**64}\n")
    _one_error(_train(config, tiny, tmp_path / "refused"), "seed", f"from 0 to {MAX_SEED}")
    assert not (tmp_path / "refused").exists()
    result = _train(_config(tmp_path, f"seed: {MAX_SEED}\n"), tiny, tmp_path / "run")
    assert result.exit_code == 0, result.output
    assert (tmp_path / "run" / "config.yaml").exists()


# --------------------------------------------------------------------------------------------------- output_dir
def test_an_output_dir_with_a_nul_character_is_refused(tmp_path, tiny):
    config = _config(tmp_path, 'output_dir: "runs/a\\0b"\n')
    _one_error(_show(str(config)), "output_dir", "NUL character")
    _one_error(_train(config, tiny, tmp_path / "run", 'output_dir="runs/a\\0b"'), "output_dir", "NUL character")


def test_an_empty_output_dir_is_refused_and_nothing_is_written(tmp_path, tiny, monkeypatch):
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    config = _config(tmp_path, "output_dir: ''\n")
    _one_error(_show(str(config)), "output_dir: empty", "working directory")
    _one_error(_train(config, tiny, tmp_path / "run", "output_dir=''"), "output_dir: empty")
    _one_error(_train(config, tiny, tmp_path / "run", "output_dir=' '"), "output_dir: empty")
    assert list(work.iterdir()) == []


@pytest.mark.parametrize("below", ["", "run", "a/b"])
def test_an_output_dir_through_a_symlink_loop_names_the_loop(tmp_path, tiny, below):
    (tmp_path / "loop_a").symlink_to(tmp_path / "loop_b")
    (tmp_path / "loop_b").symlink_to(tmp_path / "loop_a")
    out = tmp_path / "loop_a" / below if below else tmp_path / "loop_a"
    config = _config(tmp_path, "seed: 0\n")
    text = _one_error(_train(config, tiny, out), f"output_dir: '{tmp_path / 'loop_a'}' is a symlink loop")
    assert "File exists" not in text
    _one_error(_show(str(config), "--set", f"output_dir={out}"), "symlink loop", str(tmp_path / "loop_a"))


def test_an_output_dir_through_a_working_symlink_is_accepted(tmp_path):
    (tmp_path / "target").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "target")
    assert load_config(None, [f"output_dir={tmp_path / 'link' / 'run'}"]).output_dir == str(tmp_path / "link/run")
