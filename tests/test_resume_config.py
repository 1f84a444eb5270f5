"""``grove train --resume`` with a config that differs from the run's ``config.yaml``: changes that would not resume
exactly are refused with one ``error:`` line naming each key (old → new) and the way on, changing nothing; the
safe ones are applied and recorded (``config.yaml``, ``config_changes.jsonl``, a warning)."""

from __future__ import annotations

import json
import logging

import pytest
import yaml
from tests.tiny_runs import (
    TESTS,
    copy_run,
    finished_run,
    records,
    run_config,
    same_weights,
    snapshot,
    weights,
)
from typer.testing import CliRunner

from grove.cli import app
from grove.config import ConfigError
from grove.models.tiny import create_tiny_model_dir
from grove.training.resume_config import RESUMABLE_CHANGES, resumable
from grove.training.trainer import Trainer


@pytest.fixture(autouse=True)
def _user_rewards(monkeypatch):
    monkeypatch.syspath_prepend(str(TESTS))


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return create_tiny_model_dir(tmp_path_factory.mktemp("resume-config") / "tiny")


@pytest.fixture(scope="module")
def finished(tiny, tmp_path_factory):
    """A finished 3-step run (a checkpoint after every step)."""
    return finished_run(tiny, tmp_path_factory.mktemp("finished") / "run")


def _resume(run, *sets: str):
    args = ["train", str(run / "config.yaml"), "--resume", str(run)]
    for s in sets:
        args += ["--set", s]
    return CliRunner().invoke(app, args)


def _one_error_line(output: str) -> str:
    lines = [line for line in output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and "Traceback" not in output, output
    return lines[0]


def test_a_changed_learning_rate_is_refused_and_nothing_changes(finished, tmp_path):
    run = copy_run(finished, tmp_path / "run", 2)
    before = snapshot(run)
    result = _resume(run, "optim.lr=0.02")
    assert result.exit_code == 2
    line = _one_error_line(result.output)
    assert "optim.lr 0.01 → 0.02" in line and "--set optim.lr=0.01" in line
    assert f"model.name={run / 'checkpoints' / 'step-000002' / 'model'}" in line and "output_dir=NEW" in line
    assert snapshot(run) == before


def test_every_refused_key_is_named_at_once(finished, tmp_path):
    run = copy_run(finished, tmp_path / "run", 2)
    before = snapshot(run)
    result = _resume(
        run, "seed=7", "train.prompts_per_step=4", "rewards=[{id: 'user_rewards:char_count', weight: 2}]",
        "train.steps=5",  # allowed, and not listed
    )
    assert result.exit_code == 2
    line = _one_error_line(result.output)
    assert "seed 0 → 7" in line and "train.prompts_per_step 2 → 4" in line and "rewards [" in line
    assert "train.steps" not in line
    assert snapshot(run) == before


def test_fewer_steps_than_the_checkpoint_are_refused(tiny, finished, tmp_path):
    run = copy_run(finished, tmp_path / "run", 2)
    with pytest.raises(ConfigError, match="train.steps 1 is fewer than the checkpoint's step 2"):
        Trainer(run_config(tiny, run, 1), run, resume=True)


def test_safe_changes_are_applied_and_recorded(tiny, finished, tmp_path, caplog):
    """More steps, another logging and evaluation setting: accepted; ``config.yaml`` says what now runs,
    ``config_changes.jsonl`` and a warning list the changes, and the resume directory is not one of them."""
    run = copy_run(finished, tmp_path / "run", 3)
    with caplog.at_level(logging.WARNING):
        result = _resume(run, "train.steps=4", "logging.samples_per_step=2", "eval.max_examples=1")
    assert result.exit_code == 0, result.output
    changes = [json.loads(line) for line in (run / "config_changes.jsonl").read_text().splitlines()]
    assert changes == [
        {"step": 3, "key": "output_dir", "old": str(finished), "new": str(run)},  # a moved run
        {"step": 3, "key": "train.steps", "old": 3, "new": 4},
        {"step": 3, "key": "eval.max_examples", "old": 2, "new": 1},
        {"step": 3, "key": "logging.samples_per_step", "old": 4, "new": 2},
    ]
    saved = yaml.safe_load((run / "config.yaml").read_text())
    assert saved["train"]["steps"] == 4 and saved["eval"]["max_examples"] == 1 and saved["output_dir"] == str(run)
    assert "train.steps 3 → 4" in caplog.text and "config_changes.jsonl" in caplog.text

    caplog.clear()
    with caplog.at_level(logging.WARNING):  # the same command again: nothing differs any more
        Trainer(run_config(tiny, run, 4, **{"logging.samples_per_step": 2, "eval.max_examples": 1}), run, resume=True)
    assert "changed config" not in caplog.text
    assert len((run / "config_changes.jsonl").read_text().splitlines()) == 4


def test_more_steps_continue_the_run_as_if_started_with_them(tiny, finished, tmp_path):
    """A finished 3-step run resumed with train.steps 4 (constant learning rate) ends as a 4-step run."""
    four = tmp_path / "four"
    Trainer(run_config(tiny, four, 4), four).run()
    run = copy_run(finished, tmp_path / "run", 3)
    Trainer(run_config(tiny, run, 4), run, resume=True).run()
    assert records(run / "metrics.jsonl") == records(four / "metrics.jsonl")
    assert records(run / "eval.jsonl") == records(four / "eval.jsonl")
    assert same_weights(weights(run, 4), weights(four, 4))


def test_a_config_yaml_that_no_longer_validates_is_not_compared(tiny, finished, tmp_path, caplog):
    run = copy_run(finished, tmp_path / "run", 2)
    old = run / "config.yaml"
    old.write_text(old.read_text() + "retired_section: {x: 1}\n")  # a key this grove does not know
    text = old.read_text()
    with caplog.at_level(logging.WARNING):
        trainer = Trainer(run_config(tiny, run, 3, **{"optim.lr": 0.5}), run, resume=True)
    assert trainer.step == 2
    assert "no longer validates" in caplog.text and "retired_section" in caplog.text
    assert (run / "config.before-step-000002.yaml").read_text() == text
    assert yaml.safe_load(old.read_text())["optim"]["lr"] == 0.5


def test_the_list_of_resumable_keys_names_real_keys():
    """Every entry of RESUMABLE_CHANGES is a key (or section) of the config; a key outside it is refused."""
    dumped = run_config(TESTS, TESTS, 1).model_dump(mode="json")
    for pattern in RESUMABLE_CHANGES:
        node = dumped
        for part in pattern.removesuffix(".*").split("."):
            assert isinstance(node, dict) and part in node, pattern
            node = node[part]
    assert resumable("eval.every") and resumable("train.steps") and resumable("distributed.strategy")
    assert not resumable("optim.lr") and not resumable("train.stepsize") and not resumable("evaluation")
