"""``grove train``, ``grove sft`` and ``grove rm``: a training run with its error handling, stop signals and summary."""

from __future__ import annotations

import gc
import json
import shlex
import traceback
from pathlib import Path
from typing import Annotated, NoReturn

import typer
from rich.markup import escape
from rich.table import Table

from grove.cli.terminal import ResumeOption, SetOption, console, err, fail, read_for_command
from grove.command_failures import (
    early_stop,
    output_dir_problem,
    unreported_write_failure,
    user_error_types,
    user_message,
)
from grove.evaluation.stats import describe_sampled

__all__ = ["rm", "sft", "train"]


def train(
    config: Annotated[Path, typer.Argument(help="YAML config file.")],
    set_: SetOption = None,
    resume: ResumeOption = None,
) -> None:
    """Train a policy with the configured algorithm, evaluating before and after."""
    _run_training("train", config, set_, resume)


def sft(
    config: Annotated[Path, typer.Argument(help="YAML config file with an `sft` section.")],
    set_: SetOption = None,
    resume: ResumeOption = None,
) -> None:
    """Supervised fine-tuning on the config's `sft.data` (the warm start before RL), evaluating before and after;
    writes RUN_DIR/model for `model.init_from`."""
    _run_training("sft", config, set_, resume)


def rm(
    config: Annotated[Path, typer.Argument(help="YAML config file with an `rm` section.")],
    set_: SetOption = None,
    resume: ResumeOption = None,
) -> None:
    """Train a reward model on the config's `rm.data` (Bradley–Terry preference pairs or multi-head regression
    labels), reporting held-out agreement before and after; writes RUN_DIR/model, a sequence classifier."""
    _run_training("rm", config, set_, resume)


def _run_training(command: str, config: Path, set_: list[str] | None, resume: Path | None) -> None:
    """Run a training command (``train``, ``sft`` or ``rm``, the trainer's kind of run) with its error handling, stop signals
    and summary."""
    overrides = list(set_ or [])
    if resume is not None:
        overrides.append(f"output_dir={json.dumps(str(resume))}")  # quoted: the path is a string, not YAML
    cfg = read_for_command(config, overrides)
    from grove.distributed.world import init_world
    from grove.infra.write_failures import RunWriteError
    from grove.resolve import (
        resolve,  # the front door: every check, user code included, before the model loads
    )
    from grove.training.nonfinite_guard import NonFiniteTrainingError
    from grove.training.trainer import Trainer

    # besides the user's mistakes (a checkpoint or log that could not be written among them): a run that kept
    # producing NaN, whose message names the last good checkpoint
    user_errors = (*user_error_types(), NonFiniteTrainingError)
    resume_command = shlex.join(
        ["grove", command, str(config), "--resume", str(cfg.output_dir), *(a for o in set_ or [] for a in ("--set", o))]
    )
    world = init_world(cfg.distributed.timeout_seconds, cfg.distributed.device)  # one process without torchrun
    where = f"{world.label}: " if world.distributed else ""

    trainer = None

    def leave(exc: BaseException | None = None, together: bool = False) -> None:
        """Leave the process group with nothing distributed left alive: PyTorch aborts a rank at exit ("terminate
        called without an active exception") when a DDP or FSDP2 module or its optimizer outlives the group."""
        nonlocal trainer
        if world.distributed:
            trainer = None
            if exc is not None:  # the traceback's frames hold the trainer too
                traceback.clear_frames(exc.__traceback__)
            gc.collect()
        world.close(together)

    def stop(message: str, exc: BaseException | None = None) -> NoReturn:
        leave(exc)
        fail(message, where)

    try:  # every check of the config, user code and model files included, before anything is written
        plan = resolve(cfg, command, world_size=world.size)
    except user_errors as exc:
        stop(user_message(exc), exc)
    # a --resume directory that does not exist is not created here: the trainer says there is no run there
    probe = world.is_main and (resume is None or Path(cfg.output_dir).is_dir())
    problem = output_dir_problem(Path(cfg.output_dir)) if probe else None
    if problem is not None:
        stop(f"output_dir {cfg.output_dir!r} is not writable: {problem}; choose another with --set output_dir=...")
    try:
        trainer = Trainer(plan, Path(cfg.output_dir), resume=resume is not None, world=world)
        if trainer.resume_from is not None and world.is_main:
            err.print(f"resuming {cfg.output_dir} from {trainer.resume_from.name}")
        summary = trainer.run()
    except user_errors as exc:
        stop(user_message(exc), exc)
    except (KeyboardInterrupt, SystemExit) as exc:  # a second signal, a Ctrl-C outside the loop, user code exiting
        step = None if trainer is None else trainer.step
        leave(exc)
        message, code = early_stop(exc, step, Path(cfg.output_dir), resume_command)
        fail(message, where, code)
    except Exception as exc:
        full = unreported_write_failure(exc, Path(cfg.output_dir))
        if full is not None:  # a write outside the run's own files (a cache, a library's file) met a full disk
            stop(full, exc)
        if world.distributed:  # say which rank failed, before the traceback torchrun collects
            err.print(f"[red]error:[/red] {escape(f'{where}{type(exc).__name__}: {exc}')}", highlight=False)
        raise
    leave(together=True)  # every rank finished (or stopped after the same step)
    if summary.stopped_by is not None:  # SIGTERM / Ctrl-C: stopped after a step, with a checkpoint
        import signal

        if world.is_main:
            where = (f"stopped after step {summary.steps} with a checkpoint. Continue with" if summary.steps else
                     "stopped before the first step, once the evaluation before training had finished; no checkpoint "
                     "was written yet. Start it over in the same directory with")
            err.print(f"{summary.stopped_by} received: {where}:\n  {resume_command}", markup=False, highlight=False)
        raise typer.Exit(128 + signal.Signals[summary.stopped_by].value)
    if world.is_main:
        from grove.infra.run_plots import draw_plots

        try:  # None: not drawn (logging.plots: false, or unset without matplotlib)
            plots: list[Path] | None = draw_plots(summary.run_dir, cfg.logging.plots)
        except RunWriteError as exc:  # every step ran and is saved: the run is finished, without its pictures
            err.print(f"[yellow]warning:[/yellow] {escape(str(exc))}", highlight=False)
            plots = []
        _print_summary(summary.run_dir, plots)


def _print_summary(run_dir: Path, plots: list[Path] | None) -> None:
    import json

    data = json.loads((run_dir / "summary.json").read_text())
    evaluated = [label for label in ("before", "after") if data.get(label) and "accuracy" in data[label]]
    if evaluated:
        table = Table(title="held-out accuracy (greedy)")
        for col in ("", "accuracy", "correct / n", "95% CI"):
            table.add_column(col)
        for label in evaluated:
            e = data[label]
            table.add_row(
                f"{label} (step {e['step']})",
                f"{100 * e['accuracy']:.1f}%",
                f"{e['correct']}/{e['total']}",
                f"{100 * e['ci_low']:.1f}–{100 * e['ci_high']:.1f}%",
            )
        console.print(table)
    if len(evaluated) == 2:
        gain = 100 * (data["after"]["accuracy"] - data["before"]["accuracy"])
        console.print(f"change: {gain:+.1f} points")
    for label in evaluated:
        line = describe_sampled(data[label])
        if line:
            console.print(f"{label} (step {data[label]['step']}), {line}")
    losses = [(label, data[label]["held_out_loss"]) for label in ("before", "after")
              if data.get(label) and "held_out_loss" in data[label]]
    if losses:
        shown = ", ".join(f"{label} {'n/a (not finite)' if value is None else f'{value:.4f}'}" for label, value in losses)
        console.print("held-out loss: " + shown)
    if data.get("heads"):  # a reward model: its held-out agreement, and how a run uses it as a reward
        _print_agreement(data)
        console.print(f"reward model: {data['model']}  (heads {', '.join(data['heads'])}; score rollouts with it: "
                      f"rewards: [{{id: sequence_classifier, model: {data['model']}}}])", markup=False)
    elif data.get("model"):
        console.print(f"model: {data['model']}  (start RL from it with --set model.init_from={run_dir})")
    if plots is None:
        from grove.infra.run_plots import how_to_see_plots

        console.print(f"run directory: {run_dir}  (plots: {how_to_see_plots(run_dir)})", markup=False)
        return
    shown = ", ".join(str(p) for p in plots) or "none written"
    console.print(f"run directory: {run_dir}  (plots: {shown})")


def _print_agreement(data: dict) -> None:
    """The reward model's held-out agreement before and after training (its summary's evaluations)."""
    table = Table(title="held-out agreement (95% intervals)")
    for col in ("", "head", "pairwise accuracy", "Pearson r", "MSE"):
        table.add_column(col)

    def interval(record: dict, value: str, low: str, high: str, percent: bool) -> str:
        if record.get(value) is None or record[value] != record[value]:
            return "–"
        scale, unit = (100, "%") if percent else (1, "")
        return (f"{scale * record[value]:.1f}{unit} [{scale * record[low]:.1f}–{scale * record[high]:.1f}]" if percent
                else f"{record[value]:.3f} [{record[low]:.3f}, {record[high]:.3f}]")

    for label in ("before", "after"):
        record = data.get(label)
        if not record:
            continue
        step = f"{label} (step {record['step']})"
        if "pairwise_accuracy" in record:
            table.add_row(step, data["heads"][0], interval(record, "pairwise_accuracy", "pairwise_ci_low",
                                                           "pairwise_ci_high", True), "–", "–")
            continue
        for head in data["heads"]:
            table.add_row(
                step, head,
                interval(record, f"pairwise_accuracy/{head}", f"pairwise_ci_low/{head}", f"pairwise_ci_high/{head}", True),
                interval(record, f"pearson_r/{head}", f"pearson_ci_low/{head}", f"pearson_ci_high/{head}", False),
                f"{record.get(f'mse/{head}', float('nan')):.4f}",
            )
    console.print(table)
