"""``grove.train``: a training run started from Python, the same run ``grove train`` (``grove sft``, ``grove rm``) starts.

The config is built as :func:`grove.api.config_building.make_config` builds it (Python rewards, in-memory data, an
environment factory), the :class:`~grove.training.trainer.Trainer` runs it in this process with the same
checks, logs, checkpoints, stop signals and summary, and the plots are drawn at the end. A run stopped by Ctrl-C
(a notebook's interrupt) stops after the step with a checkpoint, as on the command line, and is continued with
``resume=True``.

The arguments, the config, the section the kind trains from and the run directory are checked before the
in-memory rows are written, so a refused call leaves ``output_dir`` as it was.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from grove.api.config_building import ConfigSource, checked_config
from grove.api.in_memory_data import RowsFile
from grove.api.progress_bars import library_progress_bars_off
from grove.api.run_results import Run
from grove.config import ConfigError, GroveConfig
from grove.python_objects import is_python_reference

__all__ = ["train"]

log = logging.getLogger("grove")

#: the kinds of run: ``train`` (reinforcement learning, ``grove train``), ``sft`` (``grove sft``), ``rm`` (``grove rm``)
KINDS = ("train", "sft", "rm")


def _check_arguments(kind: Any, resume: Any, plots: Any) -> None:
    if not isinstance(kind, str) or kind not in KINDS:
        raise ConfigError(
            f"kind: expected 'train' (reinforcement learning, as grove train), 'sft' (supervised fine-tuning on the "
            f"config's sft section, as grove sft) or 'rm' (a reward model from its rm section, as grove rm), got "
            f"{kind!r}"
        )
    if not isinstance(resume, bool):
        hint = (
            f"; the run resumed is the one in output_dir: output_dir={os.fspath(resume)!r}, resume=True"
            if isinstance(resume, str | os.PathLike) else ""
        )
        raise ConfigError(
            f"resume: expected True (continue the run in output_dir) or False, got {type(resume).__name__} "
            f"{resume!r}{hint}"
        )
    if plots is not None and not isinstance(plots, bool):
        raise ConfigError(
            f"plots: expected True, False or None (as the config's logging.plots says), got {type(plots).__name__} "
            f"{plots!r}"
        )
    if plots is True:
        from grove.optional_packages import MATPLOTLIB, OptionalPackageMissing, require

        try:
            require(MATPLOTLIB, "plots=True")
        except OptionalPackageMissing as exc:
            raise ConfigError(f"{exc}; or pass plots=None to draw them where it is installed") from None


@contextlib.contextmanager
def _quiet(logger: str) -> Iterator[None]:
    """``logger``'s records dropped: a check run twice warns once (when the trainer runs it)."""
    target = logging.getLogger(logger)
    before = target.disabled
    target.disabled = True
    try:
        yield
    finally:
        target.disabled = before


def _check_run_dir(cfg: GroveConfig, run_dir: Path, resume: bool, files: list[RowsFile]) -> None:
    """Refuse, before the rows are written, what the trainer's start refuses about ``run_dir``: a directory another
    process is writing (:class:`grove.infra.run_lock.RunDirectoryBusy`), a new run where one trained, and a resume
    that cannot continue (looked at here only when the rows' files are not there yet: the rows of a run being
    resumed are there, and are not written again)."""
    from grove.infra import checkpoint as ckpt
    from grove.infra.run_lock import hold_run_directory
    from grove.training.resume_config import check_resumed_config
    from grove.training.run_checkpoint import holds_run

    with hold_run_directory(run_dir):  # released at once: the trainer takes it for the run
        pass
    if not resume:
        if holds_run(run_dir):
            raise ConfigError(
                f"output_dir {str(run_dir)!r} already holds a run; continue it with grove.train(..., resume=True), "
                "or choose a new output_dir"
            )
        return
    if all(rows.written() for rows in files):
        return
    if not run_dir.is_dir():
        raise ConfigError(
            f"resume=True: output_dir {str(run_dir)!r} holds no run (no such directory); check output_dir, or start "
            "a new run without resume=True"
        )
    found = ckpt.find_loadable(run_dir)
    if found.path is not None:
        with _quiet("grove.training.resume_config"):
            check_resumed_config(cfg, run_dir, ckpt.checkpoint_step(found.path))
    elif found.damaged:
        raise ConfigError(
            f"resume=True: none of the checkpoints in {run_dir} can be resumed from: "
            + "; ".join(f"{c.name}: {problem}" for c, problem in found.damaged)
            + f". Nothing in {run_dir} was changed. Restore a checkpoint from a copy if you have one, or start afresh "
            "with a new output_dir, without resume=True"
        )
    elif not (run_dir / "config.yaml").is_file():
        raise ConfigError(
            f"resume=True: nothing was saved in {run_dir} yet (no config.yaml: the run stopped during start-up); "
            "start it again without resume=True"
        )


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
        plots: draw ``plots/*.png`` at the end (``True`` needs matplotlib: ``grove[plots]``); ``None``: as the
            config's ``logging.plots`` says (unset: where matplotlib is installed).

    Returns:
        The run (its ``summary``, ``metrics``, ``evaluations``, ``samples()``, ``model_dir``); ``run.stopped_by``
        names the signal when Ctrl-C or SIGTERM stopped it after a step.

    Raises:
        grove.config.ConfigError: a problem with an argument or the config (naming it), an ``output_dir`` that
            already holds a run (without ``resume``) or none to resume (with it); nothing is written then.
        grove.infra.run_lock.RunDirectoryBusy: another process is writing ``output_dir``; nothing is written then.
        grove.rewards.RewardFunctionError: a reward failed on a sample (with ``on_error: raise``), naming both.
    """
    _check_arguments(kind, resume, plots)
    with library_progress_bars_off():
        plan, files = checked_config(
            config, kind=kind, overrides=overrides, rewards=rewards, train_dataset=train_dataset,
            eval_dataset=eval_dataset, env=env, **sections,
        )
        from grove.training.trainer import Trainer

        cfg = plan.cfg
        run_dir = Path(cfg.output_dir)
        _check_run_dir(cfg, run_dir, resume, files)
        for rows in files:
            rows.write()
        trainer = Trainer(plan, run_dir, resume=resume)
        if trainer.resume_from is not None:
            log.info("resuming %s from %s", run_dir, trainer.resume_from.name)
        summary = trainer.run()
    if summary.stopped_by is not None:
        references = [r.id for r in cfg.rewards] + ([cfg.env.id] if cfg.env is not None else [])
        importable = not any(is_python_reference(ref) for ref in references)
        where = (f"stopped after step {summary.steps} with a checkpoint" if summary.steps else
                 "stopped before the first step, once the evaluation before training had finished (nothing to save)")
        log.warning("%s received: %s; continue with %s", summary.stopped_by, where,
                    _resume_command(kind, run_dir, importable))
        return Run(run_dir, summary.stopped_by)
    run = Run(run_dir)
    from grove.infra.run_plots import draw_plots
    from grove.infra.write_failures import RunWriteError

    try:
        draw_plots(run_dir, cfg.logging.plots if plots is None else plots)
    except RunWriteError as exc:  # every step ran and is saved: the run is finished, without its pictures
        log.warning("warning: %s", exc)
    return run
