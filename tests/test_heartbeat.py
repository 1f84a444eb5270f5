"""A line now and then during a long quiet phase (grove.infra.heartbeat), wherever the output goes: a run whose
output is a pipe says what it is doing while its evaluation before training and its steps print nothing."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from grove.infra.heartbeat import Heartbeat, report_progress
from grove.models.tiny import create_tiny_model_dir

TESTS = Path(__file__).resolve().parent


def test_a_piped_run_says_what_it_does_during_quiet_phases(tmp_path) -> None:
    tiny = create_tiny_model_dir(tmp_path / "tiny")
    values = {
        "model.name": tiny, "output_dir": tmp_path / "run", "threads": 1, "task.train_size": 8, "task.eval_size": 4,
        "rewards": "[{id: 'gated_rewards:slow'}]", "rollout.max_new_tokens": 4, "train.steps": 1,
        "train.prompts_per_step": 2, "train.completions_per_prompt": 2, "train.micro_batch_size": 4,
        "eval.max_examples": 4, "logging.heartbeat_seconds": 1, "logging.plots": False, "logging.tensorboard": False,
    }
    args = [part for k, v in values.items() for part in ("--set", f"{k}={v}")]
    env = {**os.environ, "GROVE_TEST_SLEEP": "2.5",
           "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])}
    run = subprocess.run([sys.executable, "-m", "grove.cli", "train", "examples/arithmetic.yaml", *args], env=env,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert "evaluation before training: still running, " in run.stderr, run.stderr
    assert "step 1: still running, " in run.stderr, run.stderr


def test_a_beat_names_the_phase_its_progress_and_its_time_and_is_silent_while_lines_flow() -> None:
    lines: list[str] = []
    with Heartbeat(0.2, lines.append) as heartbeat:
        with heartbeat.phase("evaluation before training"):
            report_progress(120, 300, "held-out episodes")
            time.sleep(0.7)
        assert any(line.startswith("evaluation before training: 120 of 300 held-out episodes, ") for line in lines)
        lines.clear()
        with heartbeat.phase("step 3"):
            for _ in range(6):  # a line printed every 0.1 s: no beat needed
                heartbeat.touch()
                time.sleep(0.1)
        assert lines == []
    report_progress(1, 2, "x")  # no heartbeat running: nothing happens
    with Heartbeat(0, lines.append) as off, off.phase("anything"):
        time.sleep(0.3)
    assert lines == []
