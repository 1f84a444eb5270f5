"""grove from Python: configs from dicts and keywords, Python rewards, in-memory rows and environment factories, runs
that resume across Python and the command line, evaluation and reading a run back."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

import grove
from forked_processes import run_grove, run_script
from grove.cli import app
from grove.config import ConfigError
from grove.models.tiny import create_tiny_model_dir
from grove.rewards import RewardFunctionError

ROOT = Path(__file__).resolve().parent.parent
runner = CliRunner()


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    return create_tiny_model_dir(tmp_path_factory.mktemp("tiny") / "model", seed=0)


ROWS = [{"prompt": f"What is {a} + {b}?", "answer": str(a + b), "level": a % 3} for a in range(10) for b in range(2)]


def small(model: Path, out: Path, **extra) -> dict:
    """Keyword sections of a one-step run on the tiny model."""
    sections = {
        "model": {"name": str(model)},
        "output_dir": str(out),
        "threads": 1,
        "rollout": {"max_new_tokens": 4},
        "train": {"steps": 1, "prompts_per_step": 2, "completions_per_prompt": 2, "micro_batch_size": 4},
        "logging": {"progress": False, "tensorboard": False, "plots": False},  # drawn where a test looks at them
    }
    for key, value in extra.items():
        sections[key] = {**sections[key], **value} if isinstance(value, dict) and key in sections else value
    return sections


def ends_with_answer(prompts, completions, answer, **_):
    return [1.0 if c.strip().endswith(a) else 0.0 for c, a in zip(completions, answer, strict=True)]


# ---------------------------------------------------------------- configs


def test_make_config_merges_keyword_sections_into_a_yaml_file_and_applies_overrides(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("train: {steps: 7, prompts_per_step: 4}\noptim: {lr: 0.001}\n")
    cfg = grove.make_config(path, train={"steps": 3}, overrides=["optim.lr=0.5"], output_dir=str(tmp_path / "r"))
    assert (cfg.train.steps, cfg.train.prompts_per_step, cfg.optim.lr) == (3, 4, 0.5)
    assert cfg.output_dir == str(tmp_path / "r")


def test_make_config_from_a_dict_or_a_config_and_presets_expand():
    cfg = grove.make_config({"algorithm": {"preset": "dr_grpo"}})
    again = grove.make_config(cfg, train={"steps": 2})
    assert again.algorithm.advantage.id == cfg.algorithm.advantage.id and again.train.steps == 2


def test_make_config_names_the_key_of_a_mistake():
    with pytest.raises(ConfigError, match=r"train\.stepz: unknown key.*Did you mean 'steps'"):
        grove.make_config(train={"stepz": 3})
    with pytest.raises(ConfigError, match="unknown reward function 'answer_matsh'|answer_match"):
        grove.make_config(rewards=["answer_matsh"])


def test_a_notebook_function_becomes_a_python_reference_and_two_lambdas_stay_apart():
    cfg = grove.make_config(
        rewards=[ends_with_answer, {"id": lambda p, c, **_: [0.0] * len(c), "weight": 0.0},
                 {"id": lambda p, c, **_: [1.0] * len(c), "weight": 0.0}]
    )
    ids = [r.id for r in cfg.rewards]
    # this test module is imported by pytest under its file name, which a command line could import too
    assert ids[0] in ("python:ends_with_answer", "test_python_api:ends_with_answer")
    assert ids[1:] == ["python:lambda", "python:lambda_2"]


def test_an_importable_function_is_named_by_its_import_path(tmp_path, monkeypatch):
    (tmp_path / "nb_rewards.py").write_text("def shout(prompts, completions, **_):\n    return [1.0] * len(completions)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import nb_rewards

    cfg = grove.make_config(rewards=[nb_rewards.shout])
    assert cfg.rewards[0].id == "nb_rewards:shout"


@pytest.mark.parametrize(
    ("rows", "problem"),
    [
        ({"train": ROWS}, r"train_dataset: expected rows.*got a mapping with the keys 'train'.*train_dataset=ds\['train'\]"),
        ("data.jsonl", "train_dataset: expected rows.*got str"),
        ([ROWS[0], "text"], "train_dataset row 1: expected a dict of columns, got str"),
        ([{"prompt": "p", "answer": object()}], "train_dataset row 0 column 'answer': cannot be stored as JSON"),
        ([], "train_dataset: no rows"),
    ],
)
def test_bad_rows_are_refused_naming_the_row_and_the_fix(tmp_path, rows, problem):
    with pytest.raises(ConfigError, match=problem):
        grove.make_config(train_dataset=rows, output_dir=str(tmp_path / "r"))
    assert not (tmp_path / "r" / "data" / "train.jsonl").exists()


def test_rows_never_replace_a_runs_data(tmp_path):
    out = tmp_path / "r"
    grove.make_config(train_dataset=ROWS, output_dir=str(out))
    before = (out / "data" / "train.jsonl").read_bytes()
    grove.make_config(train_dataset=ROWS, output_dir=str(out))  # the same rows: accepted, nothing rewritten
    with pytest.raises(ConfigError, match="already holds other rows.*choose a new output_dir"):
        grove.make_config(train_dataset=ROWS[:5], output_dir=str(out))
    assert (out / "data" / "train.jsonl").read_bytes() == before


def test_rows_replace_only_a_jsonl_task_whose_column_settings_they_keep(tmp_path):
    rows = [{"question": r["prompt"], "gold": r["answer"]} for r in ROWS]
    cfg = grove.make_config(
        task={"id": "jsonl", "prompt_column": "question", "answer_column": "gold"}, train_dataset=rows,
        output_dir=str(tmp_path / "r"),
    )
    assert cfg.task.params["prompt_column"] == "question" and cfg.task.params["train_path"].endswith("train.jsonl")
    with pytest.raises(ConfigError, match="train_dataset replaces the config's task \\('arithmetic'\\)"):
        grove.make_config(task={"id": "arithmetic"}, train_dataset=rows, output_dir=str(tmp_path / "s"))


# ---------------------------------------------------------------- training


def test_train_with_a_python_reward_on_a_datasets_dataset(tmp_path, tiny_model):
    import datasets

    seen: list[dict] = []

    def reward(prompts, completions, answer, level, **_):
        seen.append({"n": len(completions), "answer": list(answer), "level": list(level)})
        return [float(x % 2) for x in level]

    run = grove.train(
        rewards=[reward], train_dataset=datasets.Dataset.from_list(ROWS), eval_dataset=ROWS[:4],
        **small(tiny_model, tmp_path / "run", train={"steps": 2}), plots=True,
    )
    assert isinstance(run, grove.Run) and run.stopped_by is None
    assert [m["step"] for m in run.metrics] == [1, 2]
    assert run.summary["steps"] == 2 and run.summary["after"]["total"] == 4  # the eval rows, all of them
    assert all(s["answer"] == [str(int(a)) for a in s["answer"]] for s in seen)
    assert {n for s in seen for n in s["level"]} <= {0, 1, 2}
    assert run.evaluations[-1]["step"] == 2 and run.samples(step=1)
    assert run.config.rewards[0].id in ("python:reward",)
    assert (run.run_dir / "data" / "train.jsonl").read_text().count("\n") == len(ROWS)
    assert (run.run_dir / "plots" / "training.png").is_file()
    assert (run.model_dir / "config.json").is_file()
    assert grove.load_run(run.run_dir).metrics == run.metrics


def test_a_failing_python_reward_names_itself_and_the_sample(tmp_path, tiny_model):
    def broken(prompts, completions, **_):
        raise KeyError("no such column")

    with pytest.raises(RewardFunctionError, match="broken"):
        grove.train(rewards=[broken], train_dataset=ROWS, **small(tiny_model, tmp_path / "run"))
    tolerant = grove.train(
        rewards=[{"id": broken, "on_error": "zero"}, ends_with_answer],
        train_dataset=ROWS, **small(tiny_model, tmp_path / "tolerant"),
    )
    assert tolerant.metrics[0]["reward_errors/broken"] == 4


def test_a_notebook_function_cannot_run_in_a_worker_process():
    def local(prompts, completions, **_):
        return [0.0] * len(completions)

    with pytest.raises(ConfigError, match="cannot be imported there; define it at module level"):
        grove.make_config(rewards=[{"id": local, "isolation": "process"}])


def test_a_new_run_refuses_an_output_dir_that_holds_one(tmp_path, tiny_model):
    grove.train(rewards=[ends_with_answer], train_dataset=ROWS, **small(tiny_model, tmp_path / "run"))
    with pytest.raises(ConfigError, match=r"already holds a run; continue it with grove.train\(\.\.\., resume=True\)"):
        grove.train(rewards=[ends_with_answer], train_dataset=ROWS, **small(tiny_model, tmp_path / "run"))


def test_a_run_with_notebook_objects_resumes_from_python_and_the_command_line_says_why_not(tmp_path, tiny_model):
    def notebook_reward(prompts, completions, **_):
        return [float(len(c) % 2) for c in completions]

    run_dir = tmp_path / "run"
    grove.train(rewards=[notebook_reward], train_dataset=ROWS, **small(tiny_model, run_dir))
    result = run_grove(  # another process: the command line, which holds no notebook objects
        ["train", str(run_dir / "config.yaml"), "--resume", str(run_dir), "--set", "train.steps=2"], dict(os.environ),
        Path.cwd(), tmp_path / "cli-logs",
    )
    assert result.returncode == 2
    message = " ".join(result.stderr.split())
    assert "reward 'python:notebook_reward' names a Python object" in message
    assert "grove.train(..., resume=True)" in message and "'package.module:function'" in message
    resumed = grove.train(
        rewards=[notebook_reward], train_dataset=ROWS, resume=True,
        **small(tiny_model, run_dir, train={"steps": 2}),
    )
    assert [m["step"] for m in resumed.metrics] == [1, 2]


def test_an_interrupted_notebook_run_stops_after_the_step_and_resumes(tmp_path, tiny_model, caplog):
    import signal

    def interrupting(prompts, completions, **_):  # the notebook's interrupt arriving during the first step
        if not interrupted:
            interrupted.append(True)
            os.kill(os.getpid(), signal.SIGINT)
        return [0.0] * len(completions)

    interrupted: list[bool] = []
    sections = small(tiny_model, tmp_path / "run", train={"steps": 3}, eval={"before_training": False})
    stopped = grove.train(rewards=[interrupting], train_dataset=ROWS, **sections)
    assert stopped.stopped_by == "SIGINT" and [m["step"] for m in stopped.metrics] == [1]
    assert "grove.train(..., resume=True)" in caplog.text and "grove train" not in caplog.text  # no CLI resume
    resumed = grove.train(rewards=[interrupting], train_dataset=ROWS, resume=True, **sections)
    assert resumed.stopped_by is None and [m["step"] for m in resumed.metrics] == [1, 2, 3]


def test_importable_components_resume_across_python_and_the_command_line(tmp_path, tiny_model, monkeypatch):
    (tmp_path / "lab_rewards.py").write_text(textwrap.dedent("""
        def parity(prompts, completions, **_):
            return [float(len(c) % 2) for c in completions]
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)  # the command line imports the module from the working directory
    import lab_rewards

    run_dir = tmp_path / "run"
    grove.train(rewards=[lab_rewards.parity], train_dataset=ROWS, **small(tiny_model, run_dir))
    result = runner.invoke(
        app, ["train", str(run_dir / "config.yaml"), "--resume", str(run_dir), "--set", "train.steps=2"]
    )
    assert result.exit_code == 0, result.output
    again = grove.train(run_dir / "config.yaml", resume=True, train={"steps": 3})  # and back in Python
    assert [m["step"] for m in again.metrics] == [1, 2, 3]


def test_an_environment_factory_written_in_python(tmp_path, tiny_model):
    from grove.envs import EnvironmentSuite, Observation, Transition

    class Door:
        def reset(self, task_id: int, seed: int) -> Observation:
            return Observation("A door. Say open.", anchor="door", admissible_actions=("open", "wait"))

        def step(self, action: str) -> Transition:
            return Transition(Observation("Open.", anchor="open"), float(action == "open"), True, {"won": action == "open"})

    def door_suite(params: dict) -> EnvironmentSuite:
        return EnvironmentSuite(name="door", make=Door, train_tasks=range(10), eval_tasks=range(100, 103),
                                instructions="Answer with <action>open</action> or <action>wait</action>.")

    run = grove.train(
        env={"id": door_suite, "max_turns": 2}, algorithm={"advantage": {"id": "gigpo"}},
        **small(tiny_model, tmp_path / "run", eval={"before_training": False}),
    )
    assert run.config.env.id == "python:door_suite"
    assert run.summary["after"]["total"] == 3 and "success_rate" in run.summary["after"]


# ---------------------------------------------------------------- evaluation and results


def test_evaluate_a_run_its_model_and_in_memory_rows(tmp_path, tiny_model):
    run = grove.train(rewards=[ends_with_answer], train_dataset=ROWS, **small(tiny_model, tmp_path / "run"))
    assert not (run.run_dir / "plots").exists()  # plots=None: as logging.plots says
    result = grove.evaluate(run, rewards=[ends_with_answer], max_examples=2)
    assert result.report.total == 2
    rows = [{"prompt": "Say 7.", "answer": "7"}] * 3
    other = grove.evaluate(run, rewards=[ends_with_answer], eval_dataset=rows, samples=2)
    assert other.report.total == 3 and other.extra["sampled/samples_per_item"] == 2
    assert not list(tmp_path.glob("grove-eval-*"))  # the evaluation's rows lived for the call only
    base = grove.evaluate(model={"name": str(tiny_model)}, threads=1, rollout={"max_new_tokens": 4}, max_examples=3)
    assert base.report.total == 3  # the default task (arithmetic) with the config's model section


def test_load_run_of_a_directory_without_a_run_says_so(tmp_path):
    with pytest.raises(ConfigError, match="no run there"):
        grove.load_run(tmp_path)


def test_rows_without_a_gold_answer(tmp_path, tiny_model):
    rows = [{"prompt": f"Write about {w}."} for w in ("cats", "dogs", "owls", "bees", "ants")]
    run = grove.train(
        task={"id": "jsonl", "answer_column": None, "eval_fraction": 0.4},
        rewards=[lambda prompts, completions, **_: [float(len(c)) for c in completions]],
        train_dataset=rows, **small(tiny_model, tmp_path / "run", eval={"accuracy_reward": None}),
    )
    assert run.summary["steps"] == 1


def test_importing_grove_loads_neither_torch_nor_the_api():
    code = "import sys, grove; print(sorted(m for m in ('torch', 'transformers', 'grove.api') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_the_notebook_example_runs(tmp_path, tiny_model):
    env = {**os.environ, "GROVE_EXAMPLE_MODEL": str(tiny_model), "GROVE_EXAMPLE_STEPS": "2",
           "GROVE_EXAMPLE_OUT": str(tmp_path / "out")}
    done = run_script(ROOT / "examples" / "python_api.py", [], env, tmp_path, tmp_path / "logs")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "before (step  0)" in done.stdout and "after (step  2)" in done.stdout
    summary = json.loads((tmp_path / "out" / "addition" / "summary.json").read_text())
    assert summary["steps"] == 2
    assert (tmp_path / "out" / "counter" / "summary.json").is_file()
