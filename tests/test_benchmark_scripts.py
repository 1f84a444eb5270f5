"""The benchmark scripts that call grove in-process run end to end on tiny shapes (the output projection's
gradient check included), so a refactor cannot silently break them."""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def test_output_projection_benchmark_runs_and_checks_gradients(monkeypatch, capsys) -> None:
    monkeypatch.setattr(sys, "argv", ["output_projection.py", "--rows", "37", "--vocab", "300", "--hidden", "8",
                                      "--repeats", "1", "--threads", "1", "--host-allocator", "system"])
    runpy.run_path(str(BENCHMARKS / "output_projection.py"), run_name="__main__")
    out = capsys.readouterr().out
    assert "gradients equal to naive's" in out
    for name in ("naive", "checkpointed", "grove-cache", "grove-recompute"):
        assert f"| {name} |" in out


def test_update_speed_benchmark_runs_on_a_tiny_model(tmp_path, monkeypatch, capsys) -> None:
    """benchmarks/update_speed.py drives the pipeline stages directly (collect, update): run it end to end."""
    from grove.models.tiny import create_tiny_model_dir

    model = create_tiny_model_dir(tmp_path / "tiny")
    monkeypatch.setattr(sys, "argv", ["update_speed.py", "--repeats", "1", "--threads", "1",
                                      "--variants", "packed-fp32", "padded-fp32",
                                      "--set", f"model.name={model}", "--set", "rollout.max_new_tokens=4",
                                      "--set", "host_allocator=system"])
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    runpy.run_path(str(BENCHMARKS / "update_speed.py"), run_name="__main__")
    out = capsys.readouterr().out
    assert "| packed-fp32 |" in out and "| padded-fp32 |" in out
