"""``grove.train``: a training run started from Python, the same run ``grove train`` (``grove sft``, ``grove rm``) starts.

The config is built by :func:`grove.api.config_building.make_config` (Python rewards, in-memory data, an
environment factory), the :class:`~grove.training.trainer.Trainer` runs it in this process with the same
checks, logs, checkpoints, stop signals and summary, and the plots are drawn at the end. A run stopped by Ctrl-C
(a notebook's interrupt) stops after the step with a checkpoint, as on the command line, and is continued with
``resume=True``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from grove.api.config_building import ConfigSource, make_config
from grove.api.progress_bars import library_progress_bars_off
from grove.api.run_results import Run
from grove.config import ConfigError
from grove.python_objects import is_python_reference

__all__ = ["train"]

log = logging.getLogger("grove")


def _resume_command(kind: str, run_dir: Path, importable: bool) -> str:
    if importable:
        return (
            f"grove.train(..., resume=True) with the same arguments, or: grove {kind} {run_dir}/config.yaml "
            f"--resume {run_dir}"
        )
    return "grove.train(..., resume=True) with the same arguments (and the same Python objects)"


def train(
    config: ConfigSource = None,
    *,
    rewards: Sequence[Callable[..., Any] | str | Mapping[str, Any]] | None = None,
    train_dataset: Any = None,
    eval_dataset: Any = None,
    env: Callable[..., Any] | str | Mapping[str, Any] | None = None,
    overrides: Sequence[str] | None = None,
    resume: bool = False,
    kind: Literal["train", "sft", "rm"] = "train",
    plots: bool | None = None,
    **sections: Any,
) -> Run:
    """Train a policy and return its :class:`~grove.api.run_results.Run`.

    ``config``, ``rewards``, ``train_dataset``, ``eval_dataset``, ``env``, ``overrides`` and ``**sections`` build
    the config as :func:`grove.make_config` does (for example ``output_dir="runs/nb"``, ``train={"steps": 10}``).

    Args:
        resume: continue the run in ``output_dir`` from its newest checkpoint (the config must resume exactly: the
            same rewards, data and algorithm, as ``--resume`` requires).
        kind: ``"train"`` (reinforcement learning, ``grove train``), ``"sft"`` (supervised fine-tuning on the
            config's ``sft`` section, ``grove sft``) or ``"rm"`` (a reward model from the config's ``rm`` section,
            ``grove rm``).
        plots: draw ``plots/*.png`` at the end; ``None``: as the config's ``logging.plots`` says (true unless set).

    Returns:
        The run (its ``summary``, ``metrics``, ``evaluations``, ``samples()``, ``model_dir``); ``run.stopped_by``
        names the signal when Ctrl-C or SIGTERM stopped it after a step.

    Raises:
        grove.config.ConfigError: a problem with the config (naming the key), or an ``output_dir`` that already
            holds a run (without ``resume``).
        grove.rewards.RewardFunctionError: a reward failed on a sample (with ``on_error: raise``), naming both.
    """
    with library_progress_bars_off():
        cfg = make_config(
            config, overrides=overrides, rewards=rewards, train_dataset=train_dataset, eval_dataset=eval_dataset,
            env=env, **sections,
        )
        from grove.training.run_checkpoint import holds_run
        from grove.training.trainer import Trainer

        run_dir = Path(cfg.output_dir)
        if not resume and holds_run(run_dir):
            raise ConfigError(
                f"output_dir {str(run_dir)!r} already holds a run; continue it with grove.train(..., resume=True), "
                "or choose a new output_dir"
            )
        trainer = Trainer(cfg, run_dir, resume=resume, kind=kind)
        if trainer.resume_from is not None:
            log.info("resuming %s from %s", run_dir, trainer.resume_from.name)
        summary = trainer.run()
    if summary.stopped_by is not None:
        references = [r.id for r in cfg.rewards] + ([cfg.env.id] if cfg.env is not None else [])
        importable = not any(is_python_reference(ref) for ref in references)
        log.warning(
            "%s received: stopped after step %d with a checkpoint; continue with %s",
            summary.stopped_by, summary.steps, _resume_command(kind, run_dir, importable),
        )
        return Run(run_dir, summary.stopped_by)
    run = Run(run_dir)
    if cfg.logging.plots if plots is None else plots:
        from grove.infra.write_failures import RunWriteError

        try:
            run.plot()
        except RunWriteError as exc:  # every step ran and is saved: the run is finished, without its pictures
            log.warning("warning: %s", exc)
    return run
