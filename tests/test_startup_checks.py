"""Mistakes a config carries are found before the model loads, by `grove train` and `grove config show` alike, and
come out as one ``error:`` line naming the key: rewards that do not resolve, a user environment that does not import
or rejects its parameters, AdamW betas out of range, LoRA targets that match nothing, a group-relative estimator
with one completion per prompt, duplicate keys in a YAML file."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

import grove.core  # noqa: F401  (registration)
from grove.cli import app
from grove.config import ConfigError
from grove.core.advantages import run_estimator
from grove.models.tiny import create_tiny_model_dir
from grove.registry import ADVANTAGE_ESTIMATORS, Requires
from grove.resolve import load_config
from test_advantages_group_norm import make_test_batch

runner = CliRunner()
TESTS = Path(__file__).parent


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return create_tiny_model_dir(tmp_path_factory.mktemp("startup") / "model", seed=0)


@pytest.fixture(autouse=True)
def _tests_importable(monkeypatch):
    monkeypatch.syspath_prepend(str(TESTS))


def _args(model: Path, out: Path, *sets: str) -> list[str]:
    base = {
        "model.name": str(model), "output_dir": str(out), "threads": 1,
        "task": "{id: arithmetic, train_size: 8, eval_size: 2}", "rollout.max_new_tokens": 4, "train.steps": 1,
        "train.prompts_per_step": 2, "train.completions_per_prompt": 2, "logging.progress": False, "logging.plots": False,
        "logging.tensorboard": False, "eval.before_training": False,
    }
    args = [a for k, v in base.items() for a in ("--set", f"{k}={v}")]
    return args + [a for s in sets for a in ("--set", s)]


def _one_error_line(result, *fragments: str) -> str:
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    text = " ".join(result.output[result.output.index("error:"):].split())
    for fragment in fragments:
        assert fragment in text, text
    return text


MISTAKES = {
    "reward module": (["rewards=[{id: 'no_such_module:fn'}]"], ["rewards.0", "cannot import module 'no_such_module'"]),
    "reward function": (["rewards=[{id: 'user_rewards:no_such_fn'}]"], ["rewards.0", "no attribute 'no_such_fn'"]),
    "params to a user reward": (
        ["rewards=[{id: 'user_rewards:char_count', params: {scale: 2}}]"], ["rewards.0", "takes no params"]
    ),
    "environment import": (["env={id: 'no_such_module:suite'}"], ["env:", "cannot import module 'no_such_module'"]),
    "environment parameters": (
        ["env={id: 'strict_envs:strict_corridor', params: {lenght: 3}}"], ["env:", "strict_corridor", "lenght"]
    ),
    "betas": (["optim.betas=[1.5, 0.9]"], ["optim.betas.0", "less than 1"]),
    "lora targets": (
        ["model.lora={r: 4, target_modules: [q_proj, no_such_proj]}"],
        ["model.lora.target_modules", "no_such_proj", "q_proj"],
    ),
    "group of one": (["train.completions_per_prompt=1"], ["train.completions_per_prompt: 1", "'grpo'"]),
    "every weight zero": (["rewards=[{id: answer_match, weight: 0}]"], ["every reward and objective has weight 0"]),
    "reward module exits on import": (["rewards=[{id: 'exits_on_import:reward'}]"], ["rewards.0", "sys.exit(0)"]),
}


@pytest.mark.parametrize("name", sorted(MISTAKES))
def test_train_and_config_show_report_the_same_mistake_before_the_model_loads(tiny, tmp_path, monkeypatch, name):
    sets, fragments = MISTAKES[name]
    from grove.training import reinforcement_stage

    def no_model_load(*a, **k):
        raise AssertionError("the model was loaded before the config's mistake was reported")

    monkeypatch.setattr(reinforcement_stage, "build_policy_models", no_model_load)  # what `grove train` loads with
    trained = runner.invoke(app, ["train", "examples/arithmetic.yaml", *_args(tiny, tmp_path / "run", *sets)])
    train_text = _one_error_line(trained, *fragments)
    shown = runner.invoke(app, ["config", "show", "examples/arithmetic.yaml", "--no-memory",
                                *_args(tiny, tmp_path / "run", *sets)])
    assert _one_error_line(shown, *fragments) == train_text
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_a_valid_user_environment_and_lora_pass_the_checks(tiny, tmp_path):
    shown = runner.invoke(app, ["config", "show", "examples/arithmetic.yaml", "--no-memory", *_args(
        tiny, tmp_path / "run", "env={id: 'strict_envs:strict_corridor', params: {length: 3}}",
        "algorithm.advantage={id: episode_grpo}", "model.lora={r: 4, target_modules: [q_proj, v_proj]}",
    )])
    assert shown.exit_code == 0, shown.output


def test_outcome_estimators_declare_groups_exactly_when_their_advantages_depend_on_the_groups():
    """The ``groups`` requirement (which refuses completions_per_prompt: 1) is declared by exactly the estimators
    whose advantages change when the same scores are grouped differently."""
    scores = torch.tensor([0.0, 1.0, 0.25, 1.0, 0.5, 0.0, 1.0, 0.75])
    lengths = [4, 3, 4, 2, 4, 1, 3, 4]
    pairs, quads = make_test_batch([0, 0, 1, 1, 2, 2, 3, 3], lengths), make_test_batch([0, 0, 0, 0, 1, 1, 1, 1], lengths)
    for entry in ADVANTAGE_ESTIMATORS:
        if {Requires.STEPS, Requires.GREEDY_BASELINE} & entry.requires or not entry.fn.__module__.startswith("grove."):
            continue  # grove's own outcome estimators (tests register examples of their own)
        params = entry.params(k=2) if entry.id == "passk_analytic" else entry.params()
        by_pairs = run_estimator(entry.fn, pairs, scores, params).advantages
        by_quads = run_estimator(entry.fn, quads, scores, params).advantages
        assert (not torch.allclose(by_pairs, by_quads)) == entry.needs(Requires.GROUPS), entry.id


def test_group_estimators_with_one_completion_are_refused_and_others_accepted():
    with pytest.raises(ConfigError, match="completions_per_prompt: 1"):
        load_config(None, ["train.completions_per_prompt=1", "algorithm.advantage={id: rloo}"])
    cfg = load_config(None, ["train.completions_per_prompt=1", "algorithm.advantage={id: reinforce_pp}"])
    assert cfg.train.completions_per_prompt == 1
    with pytest.raises(ConfigError, match="at least 4"):
        load_config(None, ["train.completions_per_prompt=2", "algorithm.advantage={id: passk_analytic, k: 4}"])


def test_duplicate_keys_in_a_config_file_name_the_key_and_both_lines(tmp_path):
    path = tmp_path / "dup.yaml"
    path.write_text("seed: 1\ntrain:\n  steps: 3\n  prompts_per_step: 2\n  steps: 5\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    message = str(info.value)
    assert "train.steps" in message and "line 3" in message and "line 5" in message


def test_a_key_repeated_in_different_sections_is_not_a_duplicate(tmp_path):
    path = tmp_path / "ok.yaml"
    path.write_text("train:\n  steps: 3\neval:\n  every: 2\ncheckpoint:\n  every: 2\n")
    assert load_config(path).train.steps == 3
