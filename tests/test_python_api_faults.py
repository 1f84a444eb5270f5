"""grove from Python called the wrong way: a refused call leaves its output_dir as it was (so the corrected call
runs), ``grove.evaluate(model=RUN_DIR)`` evaluates the run's trained model, and an argument of the wrong type is one
error naming it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import grove
from grove.config import ConfigError
from grove.infra.run_lock import RunDirectoryBusy, hold_run_directory
from grove.models.pretrained import ModelLoadError
from grove.models.tiny import create_tiny_model_dir


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    return create_tiny_model_dir(tmp_path_factory.mktemp("tiny") / "model", seed=0)


ROWS = [{"prompt": f"What is {a} + {b}?", "answer": str(a + b)} for a in range(10) for b in range(2)]
OTHER_ROWS = ROWS[:12]
ARITHMETIC = {"id": "arithmetic", "train_size": 20, "eval_size": 2}


def small(tiny: Path, out: Path, **extra) -> dict:
    """Keyword sections of a one-step run on the tiny model."""
    sections = {
        "model": {"name": str(tiny)},
        "output_dir": str(out),
        "threads": 1,
        "rollout": {"max_new_tokens": 4},
        "train": {"steps": 1, "prompts_per_step": 2, "completions_per_prompt": 2, "micro_batch_size": 4},
        "eval": {"before_training": False},
        "logging": {"progress": False, "tensorboard": False, "plots": False},
    }
    for key, value in extra.items():
        sections[key] = {**sections[key], **value} if isinstance(value, dict) and key in sections else value
    return sections


def ends_with_answer(prompts, completions, answer, **_):
    return [1.0 if c.strip().endswith(a) else 0.0 for c, a in zip(completions, answer, strict=True)]


def snapshot(directory: Path) -> dict[str, bytes] | None:
    """Every file and folder under ``directory`` with its bytes; ``None``: there is no such directory."""
    if not directory.exists():
        return None
    return {str(p.relative_to(directory)): p.read_bytes() if p.is_file() else b"" for p in directory.rglob("*")}


# ---------------------------------------------------------------- a refused call writes nothing


@pytest.mark.parametrize(
    ("mistake", "problem"),
    [
        ({"train": {"stepz": 1}}, r"train\.stepz: unknown key.*Did you mean 'steps'"),
        ({"resume": True}, r"resume=True: output_dir .* holds no run \(no such directory\)"),
        ({"kind": "sft"}, r"kind='sft' needs the config's `sft` section naming its data"),
        ({"kind": "rm"}, r"kind='rm' needs the config's `rm` section naming its data"),
        ({"kind": "foo"}, "kind: expected 'train'"),
        ({"eval_dataset": [{"prompt": "p", "answer": object()}]}, "eval_dataset row 0 column 'answer'"),
    ],
    ids=["unknown-key", "resume-without-a-run", "sft-without-its-section", "rm-without-its-section", "unknown-kind",
         "bad-eval-row"],
)
def test_a_refused_call_leaves_no_rows_and_the_corrected_call_runs(tmp_path, tiny_model, mistake, problem):
    out = tmp_path / "run"
    with pytest.raises(ConfigError, match=problem):
        grove.train(rewards=[ends_with_answer], train_dataset=ROWS, **small(tiny_model, out, **mistake))
    assert snapshot(out) is None
    run = grove.train(rewards=[ends_with_answer], train_dataset=OTHER_ROWS, **small(tiny_model, out))
    assert run.summary["steps"] == 1
    assert (out / "data" / "train.jsonl").read_text().count("\n") == len(OTHER_ROWS)


def test_make_config_refused_on_the_eval_rows_writes_no_train_rows(tmp_path):
    out = tmp_path / "run"
    with pytest.raises(ConfigError, match="eval_dataset: no rows"):
        grove.make_config(train_dataset=ROWS, eval_dataset=[], output_dir=str(out))
    assert snapshot(out) is None
    cfg = grove.make_config(train_dataset=OTHER_ROWS, output_dir=str(out))
    assert Path(cfg.task.params["train_path"]).read_text().count("\n") == len(OTHER_ROWS)


def test_rows_refused_by_a_directory_that_holds_another_run_leave_it_unchanged(tmp_path, tiny_model):
    out = tmp_path / "run"
    grove.train(task=ARITHMETIC, **small(tiny_model, out))  # a run of a registered task: no data/ of its own
    before = snapshot(out)
    with pytest.raises(ConfigError, match=r"already holds a run; continue it with grove.train\(\.\.\., resume=True\)"):
        grove.train(rewards=[ends_with_answer], train_dataset=ROWS, **small(tiny_model, out))
    assert snapshot(out) == before
    with pytest.raises(ConfigError, match="--resume .*: the config differs .* in keys that would not resume exactly"):
        grove.train(rewards=[ends_with_answer], train_dataset=ROWS, resume=True, **small(tiny_model, out))
    assert snapshot(out) == before
    resumed = grove.train(task=ARITHMETIC, resume=True, **small(tiny_model, out, train={"steps": 2}))
    assert [m["step"] for m in resumed.metrics] == [1, 2]
    assert not (out / "data").exists()


def test_rows_refused_by_a_directory_another_process_writes_are_not_written_there(tmp_path, tiny_model):
    out = tmp_path / "run"
    out.mkdir()
    with hold_run_directory(out), pytest.raises(RunDirectoryBusy, match="is in use by process"):
        grove.train(rewards=[ends_with_answer], train_dataset=ROWS, **small(tiny_model, out))
    assert snapshot(out) == {}
    run = grove.train(rewards=[ends_with_answer], train_dataset=OTHER_ROWS, **small(tiny_model, out))
    assert run.summary["steps"] == 1


# ---------------------------------------------------------------- evaluate a run directory


def test_evaluate_a_reinforcement_learning_run_directory_with_lora(tmp_path, tiny_model):
    out = tmp_path / "rl"
    lora = {"r": 4, "alpha": 8, "target_modules": ["q_proj", "v_proj"]}
    run = grove.train(
        rewards=[ends_with_answer], train_dataset=ROWS,
        **small(tiny_model, out, model={"lora": lora}, optim={"lr": 1e-2}),
    )
    assert not (out / "model").exists() and (run.model_dir / "adapter_config.json").is_file()
    by_run_dir = grove.evaluate(out / "config.yaml", model=out, max_examples=2)
    by_model_dir = grove.evaluate(out / "config.yaml", model=run.model_dir, max_examples=2)
    assert by_run_dir.report.total == 2
    assert [s["completion"] for s in by_run_dir.samples] == [s["completion"] for s in by_model_dir.samples]
    assert grove.evaluate(out / "config.yaml", model=str(out), max_examples=2).report == by_run_dir.report


def test_evaluate_a_supervised_run_directory(tmp_path, tiny_model):
    demos = tmp_path / "demos.jsonl"
    demos.write_text("".join(
        json.dumps({"messages": [{"role": "user", "content": f"add {a} and 1"},
                                 {"role": "assistant", "content": f"{a + 1}"}]}) + "\n"
        for a in range(8)
    ))
    out = tmp_path / "sft"
    run = grove.train(
        kind="sft", task=ARITHMETIC,
        sft={"data": [str(demos)], "steps": 2, "batch_size": 2, "eval_fraction": 0.0},
        **small(tiny_model, out),
    )
    assert run.model_dir == out / "model"
    by_run_dir = grove.evaluate(out / "config.yaml", model=out)
    by_model_dir = grove.evaluate(out / "config.yaml", model=out / "model")
    assert by_run_dir.report.total == 2
    assert [s["completion"] for s in by_run_dir.samples] == [s["completion"] for s in by_model_dir.samples]


def test_evaluate_a_run_directory_without_a_trained_model_says_so(tmp_path):
    (tmp_path / "config.yaml").write_text("seed: 0\n")
    with pytest.raises(ModelLoadError, match="model '.*' holds no model: no config.json, no model/ and no checkpoints/"):
        grove.evaluate(model=tmp_path, max_examples=1)


# ---------------------------------------------------------------- arguments of the wrong type


@pytest.mark.parametrize(
    ("call", "problem"),
    [
        (lambda sections: grove.train(kind="foo", **sections), r"kind: expected 'train' .*'sft' .*'rm' .*got 'foo'"),
        (lambda sections: grove.train(kind=None, **sections), r"kind: expected 'train' .*got None"),
        (lambda sections: grove.train(resume="runs/x", **sections), r"resume: expected True .*output_dir='runs/x', resume=True"),
        (lambda sections: grove.train(plots="yes", **sections), "plots: expected True, False or None"),
        (lambda sections: grove.load_run(None), r"run_dir: expected a run directory path \(a str or Path.*got NoneType"),
        (lambda sections: grove.load_run(5), "run_dir: expected a run directory path.*got int 5"),
        (lambda sections: grove.Run(None), "run_dir: expected a run directory path"),
        (lambda sections: grove.make_config(rewards=5), "rewards: expected a list of reward functions.*got int"),
        (lambda sections: grove.make_config(overrides=5), "overrides: expected a list of 'key.path=value' strings, got int"),
        (lambda sections: grove.make_config(overrides=["train.steps=2", 3]), "overrides.1: expected a 'key.path=value' string"),
        (lambda sections: grove.evaluate(model=5), "model: expected a model directory, a run directory .*got int 5"),
    ],
    ids=["kind", "kind-none", "resume-path", "plots", "load-run-none", "load-run-number", "run-none", "rewards",
         "overrides", "override-item", "evaluate-model-number"],
)
def test_an_argument_of_the_wrong_type_is_one_error_naming_it(tmp_path, tiny_model, call, problem):
    with pytest.raises(ConfigError, match=problem) as refused:
        call(small(tiny_model, tmp_path / "run"))
    assert "\n" not in str(refused.value)
    assert list(tmp_path.iterdir()) == []


def test_paths_and_a_single_override_are_taken_as_a_config_holds_them(tmp_path):
    cfg = grove.make_config(output_dir=tmp_path / "r", overrides="train.steps=3")
    assert (cfg.output_dir, cfg.train.steps) == (str(tmp_path / "r"), 3)
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "config.yaml").write_text("seed: 0\n")
    assert grove.Run(str(tmp_path / "r")).config.seed == 0
