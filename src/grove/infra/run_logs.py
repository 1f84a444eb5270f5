"""Run outputs: ``metrics.jsonl``, ``eval.jsonl``, ``samples.jsonl`` and TensorBoard events.

Every record carries its ``step``. When a run resumes from the checkpoint of step ``s``, records
with a step after ``s`` (written after that checkpoint, before the kill) are dropped, so the logs
of a resumed run read exactly like those of an uninterrupted one.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from grove.infra import fault_points


def _clean(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


class JsonlLog:
    def __init__(self, path: Path) -> None:
        self.path = path

    def append(self, record: dict[str, Any]) -> None:
        line = json.dumps({k: _clean(v) for k, v in record.items()}, ensure_ascii=False)
        with self.path.open("a", encoding="utf-8") as f:
            f.write(line + "\n")
            f.flush()
            os.fsync(f.fileno())

    def truncate_after(self, step: int, *, drop_final_at_step: bool = False) -> None:
        """Keep only records with ``step <= step`` (and drop a half-written last line); with
        ``drop_final_at_step``, also the records of ``step`` marked ``final`` (an end-of-run evaluation, written
        after that step's checkpoint: a resumed run repeats it)."""
        if not self.path.exists():
            return
        kept = []
        for line in self.path.read_text(encoding="utf-8").splitlines():
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            at = record.get("step", 0)
            if at < step or (at == step and not (drop_final_at_step and record.get("final"))):
                kept.append(line)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text("".join(k + "\n" for k in kept), encoding="utf-8")
        tmp.replace(self.path)

    def read(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        return [json.loads(line) for line in self.path.read_text(encoding="utf-8").splitlines() if line.strip()]


class RunLogger:
    """Writes the per-step metrics, evaluation results and sample completions of one run."""

    def __init__(self, run_dir: Path, *, tensorboard: bool, resume_step: int | None = None) -> None:
        self.metrics = JsonlLog(run_dir / "metrics.jsonl")
        self.evals = JsonlLog(run_dir / "eval.jsonl")
        self.samples = JsonlLog(run_dir / "samples.jsonl")
        if resume_step is not None:
            for log in (self.metrics, self.samples):
                log.truncate_after(resume_step)
            self.evals.truncate_after(resume_step, drop_final_at_step=True)
        self._tb = None
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            purge = None if resume_step is None else max(resume_step + 1, 0)
            self._tb = SummaryWriter(str(run_dir / "tensorboard"), purge_step=purge)

    def log_step(self, step: int, metrics: dict[str, float]) -> None:
        self.metrics.append({"step": step, **metrics})
        fault_points.reached("logging", step)
        self._scalars(step, metrics, prefix="train/")

    def log_eval(self, step: int, report: dict[str, Any]) -> None:
        self.evals.append({"step": step, **report})
        numbers = {k: v for k, v in report.items() if isinstance(v, int | float) and not isinstance(v, bool)}
        self._scalars(step, numbers, prefix="eval/")  # not flags such as ``final``

    def log_samples(self, step: int, samples: list[dict[str, Any]]) -> None:
        for sample in samples:
            self.samples.append({"step": step, **sample})

    def _scalars(self, step: int, values: dict[str, float], prefix: str) -> None:
        if self._tb is None:
            return
        for key, value in values.items():
            if isinstance(value, int | float) and math.isfinite(value):
                self._tb.add_scalar(prefix + key, value, step)
        self._tb.flush()

    def close(self) -> None:
        if self._tb is not None:
            self._tb.close()


class NullRunLogger:
    """The logger of ranks other than 0 in a multi-process run: rank 0 alone writes the run's logs."""

    def log_step(self, step: int, metrics: dict[str, float]) -> None:
        pass

    def log_eval(self, step: int, report: dict[str, Any]) -> None:
        pass

    def log_samples(self, step: int, samples: list[dict[str, Any]]) -> None:
        pass

    def close(self) -> None:
        pass
