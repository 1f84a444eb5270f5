"""The ``reasoning_gym`` task and reward on reasoning-gym's real generators (offline): seeded disjoint splits, clear
parameter errors, reasoning-gym's verifier as the reward, and a tiny GRPO run and evaluation through the CLI."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from grove.cli import app
from grove.hubs.reasoning_gym.reasoning_gym_tasks import EVAL_SEED_OFFSET
from grove.rewards.scoring import bind_reward
from grove.tasks.task import Example, TaskDataError, TaskParamsError, build_task, columns_for_rewards

pytest.importorskip("reasoning_gym")

ROOT = Path(__file__).resolve().parent.parent
SMALL_SUMS = {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1}  # few distinct questions


def questions(examples) -> list[str]:
    return [e.columns["question"] for e in examples]


def score(examples, completions, **params) -> list[float | None]:
    reward = bind_reward("reasoning_gym", params)
    return reward(prompts=[e.prompt for e in examples], completions=completions, **columns_for_rewards(examples))


def test_splits_are_reproducible_by_seed_and_disjoint():
    params = {"dataset": "leg_counting", "train_size": 40, "eval_size": 15, "seed": 3}
    task = build_task("reasoning_gym", params)
    again = build_task("reasoning_gym", params)
    assert (len(task.train), len(task.eval)) == (40, 15)
    assert [(e.prompt, e.answer) for e in task.train] == [(e.prompt, e.answer) for e in again.train]
    assert [(e.prompt, e.answer) for e in task.eval] == [(e.prompt, e.answer) for e in again.eval]
    assert not set(questions(task.train)) & set(questions(task.eval))
    assert {e.columns["reasoning_gym_seed"] for e in task.train} == {3}
    assert {e.columns["reasoning_gym_seed"] for e in task.eval} == {3 + EVAL_SEED_OFFSET}
    first = task.eval[0]
    assert first.columns["reasoning_gym_entry"]["answer"] == first.answer
    assert first.prompt.startswith(first.columns["question"]) and "<answer></answer>" in first.prompt
    other_seed = build_task("reasoning_gym", {**params, "seed": 4})
    assert questions(other_seed.eval) != questions(task.eval)
    # the eval split does not depend on train_size
    bigger = build_task("reasoning_gym", {**params, "train_size": 60})
    assert questions(bigger.eval) == questions(task.eval) and questions(bigger.train)[:40] == questions(task.train)


def test_small_config_keeps_eval_questions_distinct_and_out_of_train():
    task = build_task("reasoning_gym", {"dataset": "chain_sum", "config": SMALL_SUMS, "train_size": 120,
                                        "eval_size": 30})
    eval_questions = questions(task.eval)
    assert len(set(eval_questions)) == 30
    assert not set(questions(task.train)) & set(eval_questions)
    assert len(set(questions(task.train))) < 120  # the space is small: train repeats questions, never eval's
    with pytest.raises(TaskDataError, match=r"eval_size"):
        build_task("reasoning_gym", {"dataset": "chain_sum", "config": SMALL_SUMS, "train_size": 1, "eval_size": 500})


def test_mix_draws_from_every_dataset_and_scores_each_with_its_own_verifier():
    task = build_task("reasoning_gym", {
        "datasets": [{"name": "leg_counting", "config": {"max_animals": 4}}, {"name": "prime_factorization", "weight": 2}],
        "train_size": 12, "eval_size": 4,
    })
    sources = {e.columns["reasoning_gym_dataset"] for e in task.train}
    assert sources == {"leg_counting", "prime_factorization"}
    leg = next(e for e in task.train if e.columns["reasoning_gym_dataset"] == "leg_counting")
    assert leg.columns["reasoning_gym_config"] == {"max_animals": 4}
    examples = list(task.train)
    assert score(examples, [f"<answer>{e.answer}</answer>" for e in examples]) == [1.0] * 12
    # prime_factorization's scorer raises ValueError on text: scored as wrong (0.0), or raised when asked to
    assert score(examples, ["<answer>no idea</answer>"] * 12) == [0.0] * 12
    prime = next(e for e in examples if e.columns["reasoning_gym_dataset"] == "prime_factorization")
    with pytest.raises(ValueError):
        score([prime], ["<answer>no idea</answer>"], on_scorer_error="raise")


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({"dataset": "leg_count"}, r"unknown reasoning-gym dataset 'leg_count'.*'leg_counting'"),
        ({"dataset": "leg_counting", "config": {"max_legs": 3}}, r"config\.max_legs: not a setting.*max_animals"),
        ({"dataset": "leg_counting", "config": {"min_animals": 5, "max_animals": 2}}, r"max_animals must be >="),
        ({"dataset": "leg_counting", "config": {"min_animals": "3"}}, r"config\.min_animals: expected an integer"),
        ({"dataset": "leg_counting", "config": {"seed": 1}}, r"config\.seed: set by the task"),
        ({"datasets": [{"name": "chain_sum", "config": {"bad": 1}}]}, r"(?s)datasets\.0.*config\.bad"),
        ({"dataset": "chain_sum", "datasets": [{"name": "chain_sum"}]}, r"either 'dataset'.*or 'datasets'"),
        ({"dataset": "chain_sum", "prompt_template": "no placeholder"}, r"\{question\}"),
    ],
)
def test_bad_parameters_are_errors_naming_the_field(params, expected):
    with pytest.raises(TaskParamsError, match=expected):
        build_task("reasoning_gym", params)


def test_reward_scores_right_wrong_and_missing_answers():
    task = build_task("reasoning_gym", {"dataset": "basic_arithmetic", "train_size": 3, "eval_size": 1})
    examples = list(task.train)
    gold = [e.answer for e in examples]
    assert score(examples, [f"Thinking...\n<answer> {g} </answer>" for g in gold]) == [1.0] * 3
    assert score(examples, [f"<answer>{int(g) + 1}</answer>" for g in gold]) == [0.0] * 3
    assert score(examples, [g for g in gold]) == [0.0] * 3  # no <answer> tags: no answer, 0.0
    assert score(examples, [f"so the result is {g}" for g in gold], extract="last_number") == [1.0] * 3
    assert score(examples, [f"work\n{g}\n" for g in gold], extract="last_line") == [1.0] * 3
    no_entry = [Example(prompt="p", answer="1", columns={"reasoning_gym_entry": None, "reasoning_gym_dataset": None})]
    assert score(no_entry, ["<answer>1</answer>"]) == [None]


def test_grove_imports_without_reasoning_gym_and_names_the_install_command(monkeypatch):
    code = "import sys, grove.tasks, grove.rewards; print('reasoning_gym' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "False"
    monkeypatch.setitem(sys.modules, "reasoning_gym", None)  # as if it were not installed
    with pytest.raises(TaskParamsError, match=r"pip install reasoning-gym==0\.1\.25"):
        build_task("reasoning_gym", {"dataset": "chain_sum"})


def test_grpo_run_and_eval_through_the_cli(tmp_path):
    from grove.models.tiny import create_tiny_model_dir

    model = create_tiny_model_dir(tmp_path / "tiny", seed=0)
    out = tmp_path / "run"
    settings = {
        "model.name": model, "output_dir": out, "threads": 1,
        "task": "{id: reasoning_gym, dataset: chain_sum, config: {max_terms: 2, max_digits: 1}, train_size: 8, "
                "eval_size: 3}",
        "rewards": "[{id: reasoning_gym, extract: last_number}]", "rollout.max_new_tokens": 4, "train.steps": 2,
        "train.prompts_per_step": 2, "train.completions_per_prompt": 2, "train.micro_batch_size": 4,
        "checkpoint.every": 2, "logging.progress": False, "logging.plots": False, "logging.tensorboard": False,
        "eval.before_training": False, "eval.max_examples": 3,
    }
    args = [a for k, v in settings.items() for a in ("--set", f"{k}={v}")]
    runner = CliRunner()
    trained = runner.invoke(app, ["train", "examples/reasoning_gym_grpo.yaml", *args], catch_exceptions=False)
    assert trained.exit_code == 0, trained.output
    steps = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [row["step"] for row in steps] == [1, 2] and "reward/reasoning_gym_mean" in steps[0]
    trained_model = out / "checkpoints/step-000002/model"
    evaluated = runner.invoke(app, ["eval", "--config", str(out / "config.yaml"), "--model", str(trained_model),
                                    "--max-examples", "3"], catch_exceptions=False)
    assert evaluated.exit_code == 0, evaluated.output
    printed = " ".join(evaluated.output.split())  # the console wraps long lines
    assert re.search(r"on reasoning_gym: \d+\.\d% \(\d/3, 95% CI", printed), printed
