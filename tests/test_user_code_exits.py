"""User code cannot end a run silently: ``grove train`` exits 0 only when every step ran, and otherwise says where
the run stopped, what is saved and how to go on. A reward that hangs cannot hold the run against a second SIGTERM.

Rewards and environment steps that call ``sys.exit`` are handled like any other failure of theirs (their
``on_error``; tests/test_reward_isolation.py and the environment tests); here: user code elsewhere (a user
component registered through ``imports:``), a ``KeyboardInterrupt`` outside the training loop, and signals.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from forked_processes import ForkedProcess, start_grove
from grove.cli import app
from grove.infra import checkpoint as ckpt
from grove.models.tiny import create_tiny_model_dir
from grove.user_code import ImmediateStop, UserCodeExit, grove_handles_stop_signals, user_code

ROOT = Path(__file__).resolve().parents[1]
TESTS = Path(__file__).parent
runner = CliRunner()


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return create_tiny_model_dir(tmp_path_factory.mktemp("exits") / "tiny")


@pytest.fixture(autouse=True)
def _tests_importable(monkeypatch):
    monkeypatch.syspath_prepend(str(TESTS))


def _args(model: Path, out: Path, **extra) -> list[str]:
    values = {
        "model.name": model, "output_dir": out, "threads": 1, "task": "{id: arithmetic, train_size: 16, eval_size: 2}",
        "rewards": "[{id: 'user_rewards:char_count'}]", "rollout.max_new_tokens": 4, "train.steps": 4,
        "train.prompts_per_step": 2, "train.completions_per_prompt": 2, "checkpoint.every": 1,
        "logging.progress": False, "logging.plots": False, "logging.tensorboard": False, "eval.before_training": False,
        "eval.max_examples": 2, **extra,
    }
    return ["train", "examples/arithmetic.yaml", *(a for k, v in values.items() for a in ("--set", f"{k}={v}"))]


@pytest.fixture(scope="module", autouse=True)
def _registered_user_estimator():
    """The tests' user estimator leaves the registries as they were (other tests list every estimator)."""
    yield
    from grove.registry import ADVANTAGE_ESTIMATORS

    ADVANTAGE_ESTIMATORS._entries.pop("exits_at_second_step", None)
    sys.modules.pop("stopping_user_code", None)


def test_user_code_calling_sys_exit_0_is_not_a_success(tiny, tmp_path):
    out = tmp_path / "run"
    result = runner.invoke(app, _args(tiny, out, imports="[stopping_user_code]",
                                      **{"algorithm.advantage": "{id: exits_at_second_step}"}))
    assert result.exit_code == 1, result.output
    text = " ".join(result.output.split())
    assert "Traceback" not in result.output
    assert "sys.exit(0)" in text and "during step 2" in text and "the last checkpoint is step-000001" in text
    assert f"--resume {out}" in text
    assert [c.name for c in ckpt.list_checkpoints(out)] == ["step-000001"]


def test_a_reward_raising_keyboard_interrupt_before_the_first_step_is_that_reward_s_failure(tiny, tmp_path):
    """In the evaluation before training grove's stop handlers are installed too, so a ``KeyboardInterrupt`` raised
    by a reward is not a Ctrl-C: the reward is named (exit 2), never reported as an interruption."""
    out = tmp_path / "run"
    result = runner.invoke(app, _args(tiny, out, rewards="[{id: 'stopping_user_code:interrupts'}]",
                                      **{"eval.before_training": True}))
    assert result.exit_code == 2, result.output
    text = " ".join(result.output.split())
    assert "reward 'interrupts' in the evaluation before training" in text and "raised KeyboardInterrupt" in text, text
    assert "interrupted (Ctrl-C" not in text and "Traceback" not in text


def test_user_code_converts_exits_but_not_a_second_signal():
    with pytest.raises(UserCodeExit, match=r"reward 'r' called sys.exit\(3\)"):
        with user_code("reward 'r'"):
            sys.exit(3)
    with pytest.raises(KeyboardInterrupt):  # no grove handlers: may be the user's Ctrl-C, so it stops the run
        with user_code("reward 'r'"):
            raise KeyboardInterrupt
    with grove_handles_stop_signals():
        with pytest.raises(UserCodeExit, match="raised KeyboardInterrupt"):
            with user_code("reward 'r'"):
                raise KeyboardInterrupt
        with pytest.raises(ImmediateStop):
            with user_code("reward 'r'"):
                raise ImmediateStop("SIGTERM")


def _start_train(args: list[str], env_extra: dict[str, str], log: Path) -> ForkedProcess:
    """``grove ARGS`` in a process of its own (forked with grove imported), its output in ``log``."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(TESTS)]),
           **env_extra}
    return start_grove(args, env, ROOT, log)


def test_a_second_sigterm_stops_a_run_whose_reward_hangs(tiny, tmp_path):
    out = tmp_path / "run"
    args = _args(tiny, out, rewards="[{id: 'stopping_user_code:hangs_from_call'}]")
    log = tmp_path / "train.log"
    proc = _start_train(args, {"GROVE_TEST_HANG_FROM": "2"}, log)  # step 1 scores, step 2's reward hangs
    deadline = time.time() + 120
    while not ckpt.list_checkpoints(out):
        assert time.time() < deadline and proc.poll() is None, log.read_text()[-3000:]
        time.sleep(0.2)
    time.sleep(1.0)  # into step 2's hung reward
    proc.send_signal(signal.SIGTERM)
    time.sleep(1.5)
    assert proc.poll() is None  # the first signal waits for the step, which hangs
    proc.send_signal(signal.SIGTERM)
    code = proc.wait(timeout=60)
    stderr = log.read_text()
    assert code == 128 + signal.SIGTERM, stderr[-3000:]
    text = " ".join(stderr.split())
    assert "Traceback" not in stderr
    assert "send SIGTERM or Ctrl-C again" in text  # what the first signal said
    assert "SIGTERM received a second time: stopped at once during step 2" in text
    assert "the last checkpoint is step-000001" in text and f"--resume {out}" in text
    resumed = _start_train([*args, "--resume", str(out)], {"GROVE_TEST_HANG_FROM": "1000"}, tmp_path / "resume.log")
    assert resumed.wait(timeout=300) == 0, (tmp_path / "resume.log").read_text()[-3000:]
    steps = [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2, 3, 4]
