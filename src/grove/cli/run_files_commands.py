"""``grove demos``, ``grove plot`` and ``grove export``: commands that write files from a config or a run."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from grove.cli.terminal import SetOption, console, err, fail, load_for_command
from grove.command_failures import user_error_types, user_message

__all__ = ["demos", "export", "plot"]


def demos(
    config: Annotated[Path, typer.Argument(help="YAML config with the `env` (or `task`) to demonstrate.")],
    out: Annotated[Path, typer.Option("--out", help="The demonstration file to write (JSONL).")],
    episodes: Annotated[int, typer.Option("--episodes", min=1, help="Episodes to play (examples, for a task).")] = 100,
    noise: Annotated[
        float, typer.Option("--noise", min=0.0, max=1.0, help="Fraction of turns that take a random other admissible action.")
    ] = 0.0,
    keep: Annotated[str, typer.Option("--keep", help="'won': only the episodes that succeeded; 'all': every one.")] = "won",
    seed: Annotated[int, typer.Option("--seed", help="Seeds the order of the training tasks and the noise.")] = 0,
    progress_every: Annotated[
        float, typer.Option("--progress-every", min=0.0, help="Seconds between progress lines on stderr (0: none).")
    ] = 10.0,
    set_: SetOption = None,
) -> None:
    """Expert demonstrations of the config's environment (its oracle) or task (its gold answers), on training tasks
    only, rendered exactly as the RL rollouts render them: the data for `grove sft`."""
    if keep not in ("won", "all"):
        fail(f"--keep {keep!r}: choose 'won' or 'all'")
    cfg = load_for_command(config, set_)
    import signal
    from types import SimpleNamespace

    from transformers import AutoConfig

    from grove.demos import DemonstrationsInterrupted, write_demonstrations
    from grove.models.pretrained import load_tokenizer, resolve_model_path
    from grove.rollout.engine import context_length

    def report(line: str) -> None:
        err.print(line, markup=False, highlight=False)

    interrupted = 128 + signal.SIGINT.value
    try:
        path = resolve_model_path(cfg.model.name)
        model_config = AutoConfig.from_pretrained(path, local_files_only=True)
        tokenizer = load_tokenizer(path, model_config)  # a vision-language model's comes with its processor
        summary = write_demonstrations(
            cfg, tokenizer, out, episodes=episodes, noise=noise, keep=keep, seed=seed,
            model_context=context_length(SimpleNamespace(config=model_config), tokenizer),  # no weights needed
            progress=report, progress_every_s=progress_every,
        )
    except (*user_error_types(), ValueError, OSError) as exc:
        fail(user_message(exc))
    except DemonstrationsInterrupted as exc:
        fail(f"{exc}; run it again (fewer --episodes make a shorter run)", code=interrupted)
    except KeyboardInterrupt:
        fail(f"interrupted (Ctrl-C) while loading the tokenizer; nothing was written to {out}", code=interrupted)
    console.print(summary.describe())


def plot(run_dir: Annotated[Path, typer.Argument(help="A run directory.")]) -> None:
    """Write PNG curves (reward, accuracy, KL, entropy, length, clip fraction, grad norm) to RUN_DIR/plots (needs
    matplotlib: pip install 'grove[plots]')."""
    from grove.infra.run_plots import draw_plots
    from grove.infra.write_failures import RunWriteError
    from grove.optional_packages import OptionalPackageMissing

    try:
        paths = draw_plots(run_dir) or []
    except (FileNotFoundError, RunWriteError, OptionalPackageMissing) as exc:
        fail(str(exc))
    for p in paths:
        console.print(str(p))


def export(
    checkpoint_dir: Annotated[Path, typer.Argument(help="A checkpoint directory, RUN/checkpoints/step-N.")],
    out_dir: Annotated[Path, typer.Argument(help="Where to write the model (must not exist, or be empty).")],
) -> None:
    """Write a checkpoint as a plain transformers model: LoRA adapters merged into their base model, a full
    checkpoint copied; loadable with AutoModelForCausalLM.from_pretrained, without grove or peft."""
    from rich.markup import escape

    from grove.infra.write_failures import RunWriteError
    from grove.training.checkpoint_export import export_checkpoint

    try:
        path = export_checkpoint(checkpoint_dir, out_dir)
    except (FileNotFoundError, FileExistsError, ValueError, RunWriteError) as exc:
        err.print(f"[red]error:[/red] {escape(str(exc))}", highlight=False)
        raise typer.Exit(2) from None
    console.print(str(path), markup=False, highlight=False, soft_wrap=True)
    console.print(f"load it with AutoModelForCausalLM.from_pretrained({str(path)!r})", markup=False,
                  highlight=False, soft_wrap=True)
