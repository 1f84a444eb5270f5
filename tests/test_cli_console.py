"""The console shows grove's own output only: ``grove --help`` answers without importing torch or transformers,
and a training run prints no progress bars or deprecation warnings of the libraries underneath."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from grove.models.tiny import create_tiny_model_dir

ROOT = Path(__file__).resolve().parent.parent


def test_the_command_line_loads_without_torch_or_transformers():
    code = "import sys, grove.cli; print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "[]", done.stdout + done.stderr


def test_a_training_run_prints_grove_output_only(tmp_path):
    model = create_tiny_model_dir(tmp_path / "tiny")
    settings = {"model.name": model, "output_dir": tmp_path / "run", "train.steps": 1, "eval.max_examples": 4,
                "rollout.max_new_tokens": 4, "logging.progress": False, "threads": 1}
    command = [sys.executable, "-m", "grove", "train", str(ROOT / "examples" / "arithmetic.yaml")]
    for key, value in settings.items():
        command += ["--set", f"{key}={value}"]
    env = {k: v for k, v in os.environ.items() if k != "HF_HUB_DISABLE_PROGRESS_BARS"}
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, env={**env, "PYTHONWARNINGS": "default"})
    assert done.returncode == 0, done.stderr
    output = done.stdout + done.stderr
    assert "held-out accuracy" in output
    for noise in ("Loading weights", "Writing model shards", "FutureWarning", "DeprecationWarning", "it/s]"):
        assert noise not in output, f"{noise!r} in the console:\n{output}"
