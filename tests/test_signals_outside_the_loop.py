"""A stop signal outside the training steps: a SIGTERM during the evaluation before training stops the run once that
evaluation is done, with the line that says how to go on (exit 143), instead of ending it without a word. (A reward
raising ``KeyboardInterrupt`` there is that reward's failure: tests/test_user_code_exits.py.)"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from grove.models.tiny import create_tiny_model_dir

TESTS = Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    return create_tiny_model_dir(tmp_path_factory.mktemp("tiny") / "model", seed=0)


def _settings(model: Path, out: Path, reward: str) -> list[str]:
    values = {
        "model.name": model, "output_dir": out, "threads": 1, "task.train_size": 8, "task.eval_size": 4,
        "rewards": f"[{{id: '{reward}'}}]", "rollout.max_new_tokens": 4, "train.steps": 2,
        "train.prompts_per_step": 2, "train.completions_per_prompt": 2, "train.micro_batch_size": 4,
        "checkpoint.every": 1, "eval.before_training": True, "eval.max_examples": 4, "logging.progress": False,
        "logging.plots": False, "logging.tensorboard": False,
    }
    return [part for k, v in values.items() for part in ("--set", f"{k}={v}")]


def test_sigterm_during_the_evaluation_before_training_stops_with_the_resume_line(tiny_model, tmp_path) -> None:
    out, gate = tmp_path / "run", tmp_path / "gate"
    args = ["train", "examples/arithmetic.yaml", *_settings(tiny_model, out, "gated_rewards:waits_for_gate")]
    env = {**os.environ, "GROVE_TEST_GATE": str(gate),
           "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])}
    run = subprocess.Popen([sys.executable, "-m", "grove.cli", *args], env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.time() + 120
        while time.time() < deadline and not Path(f"{gate}.waiting").exists() and run.poll() is None:
            time.sleep(0.05)
        assert Path(f"{gate}.waiting").exists(), run.communicate()[0]
        run.send_signal(signal.SIGTERM)  # inside the evaluation's reward call
        time.sleep(0.5)
        gate.write_text("open")
        output, _ = run.communicate(timeout=120)
    finally:
        if run.poll() is None:
            run.kill()
    line = " ".join(output.split())
    assert run.returncode == 128 + signal.SIGTERM, output
    assert "SIGTERM received: stopped before the first step, once the evaluation before training had finished" in line
    assert f"--resume {out}" in line
    assert not (out / "metrics.jsonl").exists() or "loss" not in (out / "metrics.jsonl").read_text()

