"""One process at a time in a run directory (grove.infra.run_lock): a second ``grove train`` on a directory a run is
writing, a ``--resume`` of it, and ``grove.train`` from Python are refused with one line naming the holder's process
id and change nothing there; the lock of a killed run does not block its ``--resume``."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from grove.cli import app
from grove.infra.run_lock import RunDirectoryBusy, hold_run_directory
from grove.models.tiny import create_tiny_model_dir

TESTS = Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    return create_tiny_model_dir(tmp_path_factory.mktemp("tiny") / "model", seed=0)


def _settings(model: Path, out: Path, steps: int = 2) -> list[str]:
    values = {
        "model.name": model, "output_dir": out, "threads": 1, "task.train_size": 8, "task.eval_size": 2,
        "rewards": "[{id: 'gated_rewards:waits_for_gate'}]", "rollout.max_new_tokens": 4, "train.steps": steps,
        "train.prompts_per_step": 2, "train.completions_per_prompt": 2, "train.micro_batch_size": 4,
        "checkpoint.every": 1, "eval.before_training": False, "eval.max_examples": 2, "logging.progress": False,
        "logging.plots": False, "logging.tensorboard": False,
    }
    return [part for k, v in values.items() for part in ("--set", f"{k}={v}")]


def _cli(args: list[str]):
    return CliRunner().invoke(app, args, catch_exceptions=False)


def test_a_second_run_is_refused_naming_the_holder_and_a_killed_holder_blocks_nothing(
    tiny_model, tmp_path, monkeypatch
) -> None:
    out, gate = tmp_path / "run", tmp_path / "gate"
    monkeypatch.setenv("GROVE_TEST_GATE", str(gate))
    monkeypatch.syspath_prepend(str(TESTS))
    args = ["train", "examples/arithmetic.yaml", *_settings(tiny_model, out)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])}
    first = subprocess.Popen([sys.executable, "-m", "grove.cli", *args], env=env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 120
        while time.time() < deadline and not Path(f"{gate}.waiting").exists() and first.poll() is None:
            time.sleep(0.05)
        assert Path(f"{gate}.waiting").exists(), first.stderr.read() if first.poll() is not None else "no step began"
        config_before = (out / "config.yaml").read_text()
        listing = sorted(p.name for p in out.iterdir())

        ungated = ["--set", "rewards=[{id: 'user_rewards:char_count'}]"]  # without the lock these would run through
        second = _cli([*args, *ungated, "--set", "seed=7"])
        assert second.exit_code == 2
        line = " ".join(second.output.split())
        assert f"is in use by process {first.pid}" in line and "choose another output_dir" in line
        resumed = _cli([*args, *ungated, "--resume", str(out)])
        assert resumed.exit_code == 2 and f"in use by process {first.pid}" in " ".join(resumed.output.split())
        import grove

        with pytest.raises(RunDirectoryBusy, match=f"in use by process {first.pid}"):
            grove.train("examples/arithmetic.yaml", overrides=[a for a in _settings(tiny_model, out) if a != "--set"]
                        + ["seed=7", ungated[1]], resume=True, plots=False)
        assert (out / "config.yaml").read_text() == config_before  # the refused runs wrote nothing
        assert sorted(p.name for p in out.iterdir()) == listing
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait()
    gate.write_text("open")
    after_kill = _cli([*args, "--resume", str(out)])  # the killed holder's lock went with its process
    assert after_kill.exit_code == 0, after_kill.output
    steps = [line for line in (out / "metrics.jsonl").read_text().splitlines() if '"loss"' in line]
    assert len(steps) == 2


def test_the_holder_is_named_and_the_directory_is_free_once_released(tmp_path) -> None:
    held = hold_run_directory(tmp_path)
    with pytest.raises(RunDirectoryBusy, match=f"in use by process {os.getpid()}"):
        hold_run_directory(tmp_path)
    held.release()
    with hold_run_directory(tmp_path) as again:
        assert again.held
    assert list(tmp_path.iterdir()) == []  # no lock file: the directory itself is locked
