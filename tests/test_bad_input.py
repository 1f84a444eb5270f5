"""User mistakes get a one-paragraph ``error: ...`` on stderr and exit code 2, never a traceback.

Each test drives the real CLI (``typer.testing.CliRunner``) with one mistake: a malformed data file, an empty
split, a prompt longer than the model's context, an unknown or corrupt model, an unwritable output directory,
a bad ``--set`` or config file, a failing reward function. Real bugs still raise (last test).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from grove.cli import app
from grove.models.tiny import create_tiny_model_dir

runner = CliRunner()


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    return create_tiny_model_dir(tmp_path_factory.mktemp("tiny") / "model", seed=0)


@pytest.fixture(scope="module")
def short_model(tmp_path_factory) -> Path:
    """A tiny model whose context is only 48 tokens."""
    return create_tiny_model_dir(tmp_path_factory.mktemp("short") / "model", seed=0, max_position_embeddings=48)


def overrides(model: Path, out: Path, **extra) -> list[str]:
    values = {
        "model.name": str(model),
        "output_dir": str(out),
        "threads": 1,
        "task": "{id: arithmetic, train_size: 8, eval_size: 4}",
        "rewards": "[{id: answer_match, extract: last_number}]",
        "rollout.max_new_tokens": 4,
        "train.steps": 1,
        "train.prompts_per_step": 2,
        "train.completions_per_prompt": 2,
        "train.micro_batch_size": 4,
        "logging.progress": False, "logging.plots": False,
        "logging.tensorboard": False,
    }
    values.update(extra)
    args: list[str] = []
    for key, value in values.items():
        args += ["--set", f"{key}={value}"]
    return args


def write_config(tmp_path: Path) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text("seed: 0\n")
    return path


def train(tmp_path: Path, model: Path, **extra):
    return runner.invoke(app, ["train", str(write_config(tmp_path)), *overrides(model, tmp_path / "run", **extra)])


def evaluate(model: Path, *args: str):
    return runner.invoke(app, ["eval", "--model", str(model), "--set", "threads=1", *args])


def user_error(result, *fragments: str) -> str:
    """Assert a clean user error (exit 2, ``error:``, no traceback) containing ``fragments``; return its text."""
    escaped = result.exception if not isinstance(result.exception, SystemExit) else None
    assert escaped is None, f"an exception escaped: {escaped!r}\n{result.output}"
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert "error:" in result.output, result.output
    message = result.output[result.output.index("error:") :]
    flat = " ".join(message.split())
    for fragment in fragments:
        assert fragment in flat, f"{fragment!r} not in the error message:\n{message}"
    return flat


def write_jsonl(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines))
    return path


def jsonl_task(train_path: Path, **params) -> str:
    return json.dumps({"id": "jsonl", "train_path": str(train_path), **params})


GOOD = json.dumps({"prompt": "What is 2+2?", "answer": "4"})


# ---------------------------------------------------------------------------------- 1. malformed JSONL task file
def test_jsonl_invalid_json_names_file_and_line(tmp_path, tiny_model):
    data = write_jsonl(tmp_path / "data.jsonl", [GOOD, "", '{"prompt": "x", "answer": 1', GOOD])
    result = train(tmp_path, tiny_model, task=jsonl_task(data))
    user_error(result, f"{data}:3", "invalid JSON")


def test_jsonl_missing_answer_field_names_file_line_and_fix(tmp_path, tiny_model):
    data = write_jsonl(tmp_path / "data.jsonl", [GOOD, json.dumps({"prompt": "What is 1+1?", "solution": "2"})])
    result = train(tmp_path, tiny_model, task=jsonl_task(data))
    user_error(result, f"{data}:2", "'answer'", "available columns: prompt, solution", "answer_column")


def test_jsonl_wrong_prompt_type_names_file_and_line(tmp_path, tiny_model):
    data = write_jsonl(tmp_path / "data.jsonl", [GOOD, GOOD, json.dumps({"prompt": 42, "answer": "4"})])
    result = train(tmp_path, tiny_model, task=jsonl_task(data))
    user_error(result, f"{data}:3", "'prompt'", "string or a list of chat messages", "got int")


def test_jsonl_chat_message_without_content_names_file_and_line(tmp_path, tiny_model):
    data = write_jsonl(tmp_path / "data.jsonl", [GOOD, json.dumps({"prompt": [{"role": "user"}], "answer": "4"})])
    result = train(tmp_path, tiny_model, task=jsonl_task(data))
    user_error(result, f"{data}:2", "'content'")


def test_jsonl_not_an_object_names_file_and_line(tmp_path, tiny_model):
    data = write_jsonl(tmp_path / "data.jsonl", [GOOD, "[1, 2]"])
    result = train(tmp_path, tiny_model, task=jsonl_task(data))
    user_error(result, f"{data}:2", "expected a JSON object, got list")


def test_jsonl_missing_file_names_path(tmp_path, tiny_model):
    missing = tmp_path / "nope.jsonl"
    user_error(train(tmp_path, tiny_model, task=jsonl_task(missing)), str(missing), "does not exist",
               "task.train_path")
    data = write_jsonl(tmp_path / "data.jsonl", [GOOD] * 2)
    user_error(evaluate(tiny_model, "--set", f"task={jsonl_task(data, eval_path=str(missing))}"), str(missing),
               "task.eval_path")


def test_jsonl_not_utf8_names_file_and_line(tmp_path, tiny_model):
    data = tmp_path / "data.jsonl"
    data.write_bytes((GOOD + "\n").encode() + b'{"prompt": "caf\xe9", "answer": "1"}\n')
    user_error(train(tmp_path, tiny_model, task=jsonl_task(data)), f"{data}:2", "UTF-8")


# ---------------------------------------------------------------------------------------------- 2. empty splits
def test_empty_train_file_names_task_and_split(tmp_path, tiny_model):
    data = write_jsonl(tmp_path / "data.jsonl", ["", ""])
    user_error(train(tmp_path, tiny_model, task=jsonl_task(data)), "task 'jsonl'", "train split", str(data))


def test_empty_eval_file_names_task_and_split(tmp_path, tiny_model):
    data = write_jsonl(tmp_path / "data.jsonl", [GOOD] * 4)
    empty = write_jsonl(tmp_path / "eval.jsonl", [])
    result = train(tmp_path, tiny_model, task=jsonl_task(data, eval_path=str(empty)))
    user_error(result, "task 'jsonl'", "eval split", str(empty))


def test_empty_eval_split_of_a_generated_task(tmp_path, tiny_model):
    result = evaluate(tiny_model, "--set", "task={id: arithmetic, train_size: 4, eval_size: 0}")
    user_error(result, "task 'arithmetic'", "eval split", "no examples")


def test_empty_train_split_of_a_generated_task(tmp_path, tiny_model):
    result = train(tmp_path, tiny_model, task="{id: arithmetic, train_size: 0, eval_size: 4}")
    user_error(result, "task 'arithmetic'", "train split", "no examples")


def test_holding_out_every_row_names_task_and_split(tmp_path, tiny_model):
    data = write_jsonl(tmp_path / "data.jsonl", [GOOD])
    result = train(tmp_path, tiny_model, task=jsonl_task(data, eval_fraction=0.9))
    user_error(result, "task 'jsonl'", "train split")


# ---------------------------------------------------------------------------- 3. prompt longer than the context
LONG = "Let me think step by step. First, add the numbers. Then, divide by two. " * 12


def test_prompt_overflow_in_training_names_example_tokens_limit_and_fixes(tmp_path, tiny_model):
    data = write_jsonl(tmp_path / "data.jsonl", [GOOD, json.dumps({"prompt": LONG, "answer": "1"})] * 2)
    result = train(
        tmp_path, tiny_model, task=jsonl_task(data, eval_path=str(data)), **{"eval.before_training": False,
                                                                               "rollout.max_new_tokens": 400}
    )
    message = user_error(result, "train example", LONG[:60], "512", "rollout.max_new_tokens",
                         "rollout.prompt_overflow: truncate_left")
    assert "tokens" in message


def test_an_overlong_prompt_is_found_when_the_task_loads_not_when_it_is_drawn(tmp_path, tiny_model):
    """One long row among many: reported before the first step, however late the sampler would reach it."""
    rows = [json.dumps({"prompt": f"What is {i}+{i}?", "answer": str(2 * i)}) for i in range(40)]
    rows[29] = json.dumps({"prompt": LONG, "answer": "1"})
    data = write_jsonl(tmp_path / "data.jsonl", rows)
    eval_data = write_jsonl(tmp_path / "eval.jsonl", [GOOD])
    result = train(tmp_path, tiny_model, task=jsonl_task(data, eval_path=str(eval_data)),
                   **{"eval.before_training": False, "rollout.max_new_tokens": 400, "train.steps": 10})
    user_error(result, "train example 29", LONG[:60], "512")
    assert not (tmp_path / "run" / "metrics.jsonl").exists()  # no step ran


def test_check_prompts_fit_encodes_only_prompts_that_could_be_too_long(tiny_model):
    from grove.models.pretrained import load_policy
    from grove.rollout.engine import PromptTooLongError, check_prompts_fit

    _, tokenizer = load_policy(tiny_model)
    calls = []
    real = tokenizer.apply_chat_template

    def counting(messages, **kw):
        calls.append(messages[-1]["content"])
        return real(messages, **kw)

    tokenizer.apply_chat_template = counting
    prompts = ["short"] * 50 + ["é" * 400]  # 800 bytes: could be too long, so it is encoded
    with pytest.raises(PromptTooLongError, match="prompt 50"):
        check_prompts_fit(tokenizer, prompts, context_length=512, max_new_tokens=8)
    assert "short" not in calls and "é" * 400 in calls
    check_prompts_fit(tokenizer, prompts[:50], context_length=512, max_new_tokens=8)  # fits: no error


def test_prompt_overflow_in_evaluation(tmp_path, tiny_model):
    data = write_jsonl(tmp_path / "data.jsonl", [json.dumps({"prompt": LONG, "answer": "1"})] * 2)
    result = evaluate(tiny_model, "--set", f"task={jsonl_task(data, eval_path=str(data))}",
                      "--set", "rollout.max_new_tokens=400")
    user_error(result, "eval example 0", LONG[:60], "512", "rollout.prompt_overflow: truncate_left")


def test_max_new_tokens_beyond_the_context_is_an_error_even_when_truncating(tmp_path, short_model):
    result = evaluate(short_model, "--set", "task={id: arithmetic, train_size: 4, eval_size: 2}",
                      "--set", "rollout.max_new_tokens=48", "--set", "rollout.prompt_overflow=truncate_left")
    user_error(result, "48", "rollout.max_new_tokens")


def test_prompt_overflow_truncate_left_trains_and_logs(tmp_path, short_model, caplog):
    data = write_jsonl(tmp_path / "data.jsonl", [json.dumps({"prompt": LONG, "answer": "1"})] * 4)
    with caplog.at_level(logging.WARNING):
        result = train(tmp_path, short_model, task=jsonl_task(data, eval_path=str(data)),
                       **{"rollout.prompt_overflow": "truncate_left", "rollout.max_new_tokens": 8})
    assert result.exit_code == 0, result.output
    assert "truncate_left" in caplog.text and "truncated" in caplog.text


def test_fit_prompts_keeps_the_tail():
    from grove.rollout.engine import PromptTooLongError, fit_prompts

    ids, truncated = fit_prompts([[1, 2, 3], list(range(10))], context_length=8, max_new_tokens=3,
                                 overflow="truncate_left")
    assert ids == [[1, 2, 3], [5, 6, 7, 8, 9]] and truncated == 1
    with pytest.raises(PromptTooLongError, match="prompt 1 .*10 tokens"):
        fit_prompts([[1], list(range(10))], context_length=8, max_new_tokens=3)
    assert fit_prompts([list(range(100))], context_length=None, max_new_tokens=3) == ([list(range(100))], 0)


def test_context_length_prefers_the_smaller_sane_limit():
    from types import SimpleNamespace

    from grove.rollout.engine import context_length

    model = SimpleNamespace(config=SimpleNamespace(max_position_embeddings=2048))
    assert context_length(model, SimpleNamespace(model_max_length=1024)) == 1024
    assert context_length(model, SimpleNamespace(model_max_length=int(1e30))) == 2048  # transformers' "unset"
    assert context_length(None, SimpleNamespace(model_max_length=int(1e30))) is None


# ------------------------------------------------------------------------------------ 4. unknown or corrupt model
def test_unknown_model_name(tmp_path, tiny_model):
    user_error(train(tmp_path, tiny_model, **{"model.name": "not-a-model"}), "Unknown model 'not-a-model'")
    user_error(evaluate(Path("not-a-model")), "Unknown model 'not-a-model'")


def _corrupt(tiny_model: Path, tmp_path: Path, damage) -> Path:
    broken = tmp_path / "broken-model"
    shutil.copytree(tiny_model, broken)
    damage(broken)
    return broken


def test_model_without_weights(tmp_path, tiny_model):
    broken = _corrupt(tiny_model, tmp_path, lambda d: (d / "model.safetensors").unlink())
    user_error(train(tmp_path, broken), str(broken), "weights")
    user_error(evaluate(broken), str(broken), "weights")


def test_model_with_truncated_weights(tmp_path, tiny_model):
    def truncate(d: Path) -> None:
        weights = d / "model.safetensors"
        weights.write_bytes(weights.read_bytes()[:1000])

    broken = _corrupt(tiny_model, tmp_path, truncate)
    user_error(evaluate(broken), str(broken), "model.safetensors")


@pytest.mark.parametrize(
    ("text", "problem"),
    [("{not json", "not valid JSON"), ("[1, 2]", "JSON object"), ('{"hidden_size": 4}', "model_type")],
    ids=["syntax", "not-an-object", "no-model-type"],
)
def test_model_with_malformed_config_json(tmp_path, tiny_model, text, problem):
    broken = _corrupt(tiny_model, tmp_path, lambda d: (d / "config.json").write_text(text))
    user_error(evaluate(broken), f"{broken / 'config.json'}", problem)


def test_model_with_broken_tokenizer(tmp_path, tiny_model):
    broken = _corrupt(tiny_model, tmp_path, lambda d: (d / "tokenizer.json").write_text("{bad"))
    user_error(evaluate(broken), str(broken), "tokenizer")


# ---------------------------------------------------------------------------------------- 5. unwritable output_dir
def test_output_dir_under_a_file(tmp_path, tiny_model):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    out = blocker / "run"
    result = train(tmp_path, tiny_model, output_dir=str(out))
    user_error(result, f"output_dir '{out}' is not writable", f"{blocker} is a file", "--set output_dir=")
    result = train(tmp_path, tiny_model, output_dir=str(blocker))
    user_error(result, f"output_dir '{blocker}' is not writable", "--set output_dir=")


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores directory permissions")
def test_output_dir_in_a_read_only_directory(tmp_path, tiny_model):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    try:
        result = train(tmp_path, tiny_model, output_dir=str(locked / "run"))
    finally:
        locked.chmod(0o755)
    user_error(result, "is not writable", "Permission denied", "--set output_dir=")


# ------------------------------------------------------------------------------- 6. bad --set values and configs
@pytest.mark.parametrize(
    ("override", "fragment"),
    [
        ("train.steps=abc", "train.steps"),
        ("train.steps=1.5", "train.steps"),
        ("rollout=3", "rollout"),
        ("nonexistent.key=1", "nonexistent"),
        ("rewards=[{id: x", "rewards"),
        ("train.steps", "train.steps"),
        ("algorithm.preset=[1]", "algorithm.preset"),
        ("imports=[.relative]", "imports"),
        ('train.steps="[/x]"', "[/x]"),
        ("model.name=[bold]x", "[bold]x"),
    ],
)
def test_bad_set_values_name_the_key(override, fragment):
    result = runner.invoke(app, ["config", "show", "--no-memory", "--set", override])
    user_error(result, fragment)


def test_bad_config_files_name_the_file(tmp_path):
    missing = tmp_path / "missing.yaml"
    user_error(runner.invoke(app, ["config", "show", str(missing), "--no-memory"]), str(missing), "does not exist")
    listing = tmp_path / "list.yaml"
    listing.write_text("- 1\n- 2\n")
    user_error(runner.invoke(app, ["config", "show", str(listing), "--no-memory"]), str(listing), "mapping")
    broken = tmp_path / "broken.yaml"
    broken.write_text("train:\n  steps: 3\n  lr: [1,\n")
    user_error(runner.invoke(app, ["config", "show", str(broken), "--no-memory"]), f"{broken}:", "line")
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(b"seed: \xff\xfe\n")
    user_error(runner.invoke(app, ["config", "show", str(binary), "--no-memory"]), str(binary), "UTF-8")
    user_error(runner.invoke(app, ["config", "show", str(tmp_path), "--no-memory"]), str(tmp_path), "not a file")


def test_train_prints_config_errors(tmp_path, tiny_model):
    result = train(tmp_path, tiny_model, **{"train.steps": "abc"})
    user_error(result, "train.steps")


# ------------------------------------------------------------------------------------------- 7. reward functions
def test_failing_reward_function_is_a_user_error(tmp_path, tiny_model):
    result = evaluate(tiny_model, "--set", "task={id: arithmetic, train_size: 4, eval_size: 2}",
                      "--set", "rewards=[{id: 'user_rewards:wrong_length'}]", "--set", "rollout.max_new_tokens=2")
    user_error(result, "reward 'wrong_length'")
    result = evaluate(tiny_model, "--set", "task={id: arithmetic, train_size: 4, eval_size: 2}",
                      "--set", "rewards=[{id: 'user_rewards:batch_only_failure'}]", "--set", "rollout.max_new_tokens=2")
    user_error(result, "reward 'batch_only_failure'", "RuntimeError: batch too large", "user_rewards.py:",
               "in batch_only_failure")


def test_a_reward_failing_in_an_evaluation_names_which_evaluation(tmp_path, tiny_model):
    before = train(tmp_path, tiny_model, rewards="[{id: 'user_rewards:wrong_length'}]",
                   **{"eval.before_training": True})
    message = user_error(before, "reward 'wrong_length' in the evaluation before training")
    assert "step -1" not in message
    outside = evaluate(tiny_model, "--set", "task={id: arithmetic, train_size: 4, eval_size: 2}",
                       "--set", "rewards=[{id: 'user_rewards:wrong_length'}]", "--set", "rollout.max_new_tokens=2")
    assert "step -1" not in user_error(outside, "reward 'wrong_length' in evaluation")


def test_real_bugs_still_raise(tmp_path, tiny_model, monkeypatch):
    from grove.training.trainer import Trainer

    def broken_run(self):
        raise ZeroDivisionError("a real bug")

    monkeypatch.setattr(Trainer, "run", broken_run)
    result = train(tmp_path, tiny_model)
    assert isinstance(result.exception, ZeroDivisionError)
