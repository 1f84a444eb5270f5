"""A user's data files and rewards either work or stop with one ``error:`` line, never silently: ``grove sft`` /
``grove rm`` data files and ``hf_dataset`` task files that are not UTF-8 name the file and the line, a reward model's
label beyond float32 names the file, the line and the value, and a reward that fails on a whole batch but not on its
samples alone is counted in ``reward_batch_retries/<name>`` and logged once."""

from __future__ import annotations

import json
import logging
import math
import os
import subprocess
from pathlib import Path

import pytest
from tests.test_train_e2e import base_overrides
from typer.testing import CliRunner

from forked_processes import run_grove
from grove.cli import app
from grove.config import dump_config
from grove.models.tiny import build_tiny_tokenizer, create_tiny_model_dir
from grove.resolve import load_config
from grove.rewards.scoring import compute_rewards, resolve_reward
from grove.sft.data import load_sft_examples

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
PYTHONPATH = os.pathsep.join(filter(None, [str(TESTS), str(ROOT / "src"), os.environ.get("PYTHONPATH")]))

CHAT = {"messages": [{"role": "user", "content": "add 1 and 2"}, {"role": "assistant", "content": "3"}]}
LATIN1 = {"messages": [{"role": "user", "content": "caf\xe9?"}, {"role": "assistant", "content": "oui"}]}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return create_tiny_model_dir(tmp_path_factory.mktemp("tiny") / "model", seed=0)


def run_command(command: str, tmp_path: Path, settings: dict) -> str:
    """``grove COMMAND config.yaml`` with ``settings``, which must end in one user error (exit code 2, no traceback):
    that error, on one line."""
    config = tmp_path / f"{command}.yaml"
    config.write_text(dump_config(load_config(None, [f"{k}={v}" for k, v in settings.items()])))
    result = CliRunner().invoke(app, [command, str(config)])
    escaped = result.exception if not isinstance(result.exception, SystemExit) else None
    assert escaped is None, f"an exception escaped: {escaped!r}\n{result.output}"
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and result.output.count("error:") == 1, result.output
    return " ".join(result.output[result.output.index("error:"):].split())


def common(tiny: Path, out: Path) -> dict:
    return {"model.name": tiny, "output_dir": out, "threads": 1, "train.micro_batch_size": 3, "checkpoint.every": 1,
            "logging.progress": False, "logging.plots": False, "logging.tensorboard": False}


def sft_settings(tiny: Path, data: Path, out: Path) -> dict:
    return {**common(tiny, out), "sft.data": f"[{data}]", "sft.eval_fraction": 0.0, "sft.steps": 2,
            "sft.batch_size": 2}


def rm_settings(tiny: Path, data: Path, out: Path, **extra) -> dict:
    return {**common(tiny, out), "rm.data": f"[{data}]", "rm.eval_fraction": 0.25, "rm.steps": 2, "rm.batch_size": 4,
            **extra}


# ------------------------------------------------------------------ data files that are not UTF-8
def not_utf8(path: Path) -> Path:
    """A data file whose third row is Latin-1 (``é`` as the one byte 0xE9), after a blank line."""
    good = json.dumps(CHAT)
    bad = json.dumps(LATIN1, ensure_ascii=False).encode("latin-1")
    if path.suffix == ".json":  # an array: one element per line
        path.write_bytes(f"[{good},\n{good},\n".encode() + bad + b"]\n")
    else:
        path.write_bytes(f"{good}\n\n{good}\n".encode() + bad + b"\n")
    return path


@pytest.mark.parametrize(("name", "line"), [("train.jsonl", 4), ("train.json", 3)])
def test_sft_refuses_a_data_file_that_is_not_utf8_naming_the_line(tiny, tmp_path, name, line):
    data = not_utf8(tmp_path / name)
    message = run_command("sft", tmp_path, sft_settings(tiny, data, tmp_path / "out"))
    assert message.startswith(f"error: {data}:{line}: not UTF-8 text (invalid continuation byte at byte "), message
    assert message.endswith("save the file as UTF-8"), message
    assert not (tmp_path / "out" / "model").exists()


def test_rm_refuses_a_data_file_that_is_not_utf8_naming_the_line(tiny, tmp_path):
    good = json.dumps({"prompt": "p", "chosen": "yes", "rejected": "no"})
    data = tmp_path / "pairs.jsonl"
    data.write_bytes(f"{good}\n{good}\n".encode() + b'{"prompt": "caf\xe9", "chosen": "yes", "rejected": "no"}\n')
    message = run_command("rm", tmp_path, rm_settings(tiny, data, tmp_path / "out"))
    assert f"{data}:3: not UTF-8 text" in message and "save the file as UTF-8" in message, message


def test_a_byte_order_mark_and_line_separators_inside_json_strings_are_text(tmp_path):
    """UTF-8 with a byte-order mark is read; U+2028 and U+0085, which ``json.dumps(ensure_ascii=False)`` writes
    raw inside a string, are not line ends: each row keeps its line number."""
    rows = [{"prompt": "one\u2028two", "completion": "three\x85four"}, {"prompt": "five", "completion": "six"}]
    data = tmp_path / "separators.jsonl"
    data.write_bytes(b"\xef\xbb\xbf" + "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows).encode())
    tokenizer = build_tiny_tokenizer()
    examples = load_sft_examples([data], tokenizer, max_length=512)
    assert [e.origin for e in examples] == [f"{data}:1", f"{data}:2"]


@pytest.mark.parametrize(("name", "content", "line"), [
    ("train.jsonl", b'{"prompt": "a", "answer": "1"}\n{"prompt": "caf\xe9", "answer": "2"}\n', 2),
    ("train.csv", b"prompt,answer\na,1\n\ncaf\xe9,2\n", 4),
], ids=["json", "csv"])
def test_hf_dataset_task_refuses_a_text_file_that_is_not_utf8_naming_the_line(tiny, tmp_path, name, content, line):
    data = tmp_path / name
    data.write_bytes(content)
    task = json.dumps({"id": "hf_dataset", "train_path": str(data), "eval_fraction": 0})
    settings = {**common(tiny, tmp_path / "out"), "task": task, "train.steps": 1}
    message = run_command("train", tmp_path, settings)
    assert f"{data}:{line}: not UTF-8 text" in message and "save the file as UTF-8" in message, message


# ------------------------------------------------------------------ reward-model labels beyond float32
def labelled(last: object) -> list[dict]:
    """Six labelled rows, then one labelled ``last``; an integer ``last`` beyond float64 is on a row with a chat
    prompt, so the file is read line by line (Arrow cannot put strings and lists in one column) and stays an int."""
    rows = [{"prompt": f"p{i}", "completion": "c", "labels": {"good": float(i)}} for i in range(6)]
    prompt = [{"role": "user", "content": "q"}] if isinstance(last, int) else "q"
    return [*rows, {"prompt": prompt, "completion": "c", "labels": {"good": last}}]


@pytest.mark.parametrize(
    ("value", "shown"), [(1e40, "1e+40"), (-4e38, "-4e+38"), (10**400, "beyond 1e308")],
    ids=["1e40", "-4e38", "10**400"],
)
def test_rm_refuses_a_label_beyond_float32_naming_file_line_and_value(tiny, tmp_path, value, shown):
    data = tmp_path / "labels.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in labelled(value)))
    out = tmp_path / "out"
    settings = rm_settings(tiny, data, out, **{"rm.objective": "regression", "rm.heads": "[good]"})
    message = run_command("rm", tmp_path, settings)
    assert message.startswith(f"error: {data}:7: labels.good is {shown}, beyond float32"), message
    assert "scale the values down" in message
    assert not (out / "model").exists()


def test_rm_refuses_a_margin_beyond_float32(tiny, tmp_path):
    rows = [{"prompt": f"p{i}", "chosen": "yes", "rejected": "no", "margin": 1.0} for i in range(4)]
    rows[2]["margin"] = 1e39
    data = tmp_path / "pairs.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    message = run_command("rm", tmp_path, rm_settings(tiny, data, tmp_path / "out", **{"rm.margin_column": "margin"}))
    assert f"{data}:3: margin is 1e+39, beyond float32" in message, message


# ------------------------------------------------------------------ rewards that fail only on a whole batch
def test_a_reward_malformed_on_the_batch_is_counted_and_logged_once(caplog):
    spec = resolve_reward("user_rewards:wrong_length", on_error="skip")
    stats: dict[str, float] = {}
    with caplog.at_level(logging.WARNING, logger="grove.rewards"):
        for _ in range(2):
            got = compute_rewards([spec], ["p0", "p1", "p2"], ["a", "b", "c"], {}, step=4, stats=stats)
    assert got[:, 0].tolist() == [1.0, 1.0, 1.0]  # each sample alone scores
    assert stats["reward_batch_retries/wrong_length"] == 2.0 and stats["reward_errors/wrong_length"] == 0.0
    logged = [r.getMessage() for r in caplog.records if r.name == "grove.rewards"]
    assert len(logged) == 1, logged
    assert logged[0].startswith("reward 'wrong_length' at step 4 returned 1 values for 3 completions"), logged
    assert "but every sample scored when called alone: the batch was re-scored one sample at a time" in logged[0]


def test_a_batch_that_failed_on_its_own_samples_is_counted_and_reported_as_their_failure(caplog):
    """A reward raising on one sample fails the whole batch: the batch is re-scored and counted, and the log names
    the failing sample (the batch's failure is that sample's)."""
    spec = resolve_reward("user_rewards:explodes_on_bad", on_error="zero")
    stats: dict[str, float] = {}
    with caplog.at_level(logging.WARNING, logger="grove.rewards"):
        got = compute_rewards([spec], ["p0", "p1"], ["fine", "a BAD one"], {}, step=2, stats=stats)
    assert got[:, 0].tolist() == [1.0, 0.0]
    assert stats["reward_batch_retries/explodes_on_bad"] == 1.0 and stats["reward_errors/explodes_on_bad"] == 1.0
    logged = [r.getMessage() for r in caplog.records if r.name == "grove.rewards"]
    assert len(logged) == 1 and "raised on sample 1: ZeroDivisionError" in logged[0], logged


def train(model: Path, out: Path, rewards: str) -> subprocess.CompletedProcess:
    """``grove train`` (2 steps of 12 samples) on the tiny model in a process of its own, user rewards importable
    from tests/."""
    values = {"rewards": rewards, "train.steps": 2, "eval.before_training": False, "logging.tensorboard": False}
    argv = ["train", "examples/arithmetic.yaml", *base_overrides(model, out, **values)]
    return run_grove(argv, {**os.environ, "PYTHONPATH": PYTHONPATH}, ROOT, out.parent / f"{out.name}-logs")


def test_train_counts_and_warns_once_about_a_reward_that_fails_only_on_the_batch(tiny, tmp_path):
    out = tmp_path / "run"
    rewards = ("[{id: 'user_rewards:batch_only_failure', on_error: zero}, "
               "{id: 'user_rewards:batch_only_failure', name: isolated, on_error: skip, isolation: process}]")
    result = train(tiny, out, rewards)
    assert result.returncode == 0, result.stderr
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    for name in ("batch_only_failure", "isolated"):
        assert [r[f"reward_batch_retries/{name}"] for r in rows] == [1.0, 1.0]
        assert [r[f"reward_errors/{name}"] for r in rows] == [0.0, 0.0]  # every sample scored alone
    assert all(math.isfinite(r["loss"]) for r in rows)
    for name in ("batch_only_failure", "isolated"):
        warning = (f"reward '{name}' at step 1 raised on the batch of 12 samples: RuntimeError: batch too large, "
                   "but every sample scored when called alone")
        assert result.stderr.count(warning) == 1, result.stderr
        assert result.stderr.count(f"metric reward_batch_retries/{name})") == 1, result.stderr
    assert 'raise RuntimeError("batch too large")' in result.stderr  # the batch call's traceback
