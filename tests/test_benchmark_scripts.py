"""The output-projection benchmark runs end to end on a tiny shape (its gradient check included)."""

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
