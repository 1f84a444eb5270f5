"""A run directory read back in Python: its config, summary, metrics, evaluations, samples and model.

Every file is read when it is asked for, so a :class:`Run` of a run still going (another process, or
``tensorboard`` beside it) shows what has been written so far.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grove.config import ConfigError, GroveConfig, read_config

__all__ = ["Run", "load_run", "trained_model_dir"]


def _run_path(run_dir: Any) -> Path:
    if not isinstance(run_dir, str | os.PathLike) or not os.fspath(run_dir):
        raise ConfigError(
            f"run_dir: expected a run directory path (a str or Path: the output_dir of a run), got "
            f"{type(run_dir).__name__} {run_dir!r}"
        )
    return Path(run_dir)


def trained_model_dir(directory: str | Path, argument: str = "run_dir") -> Path:
    """The trained weights in a run or checkpoint ``directory`` as a model directory: its ``model/`` (a supervised
    run's final model, a checkpoint's weights), else the newest intact checkpoint's ``model/`` (a LoRA adapter
    there loads merged into its base model).

    Raises:
        grove.models.pretrained.ModelLoadError: there is none (or only a sharded checkpoint), naming
            ``argument`` and what the directory holds.
    """
    from grove.infra import checkpoint as ckpt
    from grove.models.initial_weights import newest_checkpoint_model

    path = Path(directory).expanduser()
    model = path / "model"
    if ((model / "config.json").is_file() or (model / "adapter_config.json").is_file()) and not ckpt.is_sharded(path):
        return model
    return newest_checkpoint_model(path, f"{argument} {str(directory)!r}")

def _jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    from grove.infra.run_logs import JsonlLog

    return JsonlLog(path).read()


@dataclass(frozen=True)
class Run:
    """The run in ``run_dir``; ``stopped_by``: the signal that stopped it after a step (``"SIGINT"`` for an
    interrupted notebook cell), when it ended early with a checkpoint to resume from."""

    run_dir: Path
    stopped_by: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "run_dir", _run_path(self.run_dir))

    @property
    def config(self) -> GroveConfig:
        """The run's ``config.yaml`` (the schema checked; its components are not looked up, so a run that used
        objects of another process still loads)."""
        return read_config(self.run_dir / "config.yaml")

    @property
    def summary(self) -> dict[str, Any]:
        """``summary.json``: steps, seconds and the held-out evaluation before and after training (empty while
        the run has not finished)."""
        path = self.run_dir / "summary.json"
        return json.loads(path.read_text()) if path.is_file() else {}

    @property
    def metrics(self) -> list[dict[str, Any]]:
        """One record per training step (``metrics.jsonl``): rewards, advantages, loss, KL, timings, ..."""
        return _jsonl(self.run_dir / "metrics.jsonl")

    @property
    def evaluations(self) -> list[dict[str, Any]]:
        """One record per held-out evaluation (``eval.jsonl``): accuracy with its 95% interval, per objective, ..."""
        return _jsonl(self.run_dir / "eval.jsonl")

    def samples(self, step: int | None = None) -> list[dict[str, Any]]:
        """The logged training samples (``samples.jsonl``): prompt, completion, rewards, advantage; of one step when
        ``step`` is given."""
        rows = _jsonl(self.run_dir / "samples.jsonl")
        return rows if step is None else [r for r in rows if r.get("step") == step]

    def eval_samples(self, step: int | None = None) -> list[dict[str, Any]]:
        """The held-out completions of the evaluation at ``step`` (default: the newest)."""
        files = sorted(self.run_dir.glob("eval_samples_step*.jsonl"))
        if step is not None:
            files = [f for f in files if f.name == f"eval_samples_step{step:06d}.jsonl"]
        return _jsonl(files[-1]) if files else []

    @property
    def model_dir(self) -> Path:
        """The run's trained weights as a model directory: its final ``model/`` (supervised runs write one), else the
        newest intact checkpoint's ``model/`` (LoRA adapters merged on loading)."""
        return trained_model_dir(self.run_dir)

    def plot(self) -> list[Path]:
        """Write the run's plots (``plots/*.png``: rewards, loss, accuracy, objectives) and return their paths;
        :class:`~grove.optional_packages.OptionalPackageMissing` (a ``ValueError``) without matplotlib
        (``pip install 'grove[plots]'``)."""
        from grove.infra.run_plots import draw_plots

        return draw_plots(self.run_dir) or []

    def __repr__(self) -> str:
        after = self.summary.get("after") or {}
        accuracy = f", accuracy after {100 * after['accuracy']:.1f}%" if "accuracy" in after else ""
        return f"Run({str(self.run_dir)!r}, steps {len(self.metrics)}{accuracy})"


def load_run(run_dir: str | Path) -> Run:
    """The run in ``run_dir`` (started from Python or from the command line).

    Raises:
        grove.config.ConfigError: ``run_dir`` is not a path, or holds no run (no ``config.yaml``).
    """
    path = _run_path(run_dir)
    if not (path / "config.yaml").is_file():
        raise ConfigError(f"{run_dir}: no run there (no config.yaml); give the output_dir of a run")
    return Run(path)
