"""The rich progress bar (step, ETA, reward, accuracy, tokens/s; for supervised fine-tuning the loss), or one line
per step outside a terminal."""

from __future__ import annotations

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)


class TrainProgress:
    """``enabled``: the live bar (when stderr is a terminal); ``silent``: print nothing at all (ranks other than 0
    of a multi-process run); ``console``: the console to print on (default: a new one on stderr)."""

    def __init__(
        self, total: int, completed: int, enabled: bool, silent: bool = False, label: str = "train",
        console: Console | None = None,
    ) -> None:
        self.console = console or Console(stderr=True, quiet=silent)
        # a live bar needs a terminal; in a log file (nohup, CI) print one line per step instead
        self.enabled = enabled and self.console.is_terminal
        self._progress = Progress(
            TextColumn(f"[bold]{label}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            TextColumn("{task.fields[stats]}"),
            console=self.console,
            disable=not self.enabled,
        )
        self._task = self._progress.add_task("train", total=total, completed=completed, stats="")

    def __enter__(self) -> TrainProgress:
        self._progress.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self._progress.__exit__(*exc)

    def update(self, step: int, m: dict[str, float]) -> None:
        stats = _sft_stats(m) if "reward_mean" not in m else _rollout_stats(m)
        self._progress.update(self._task, completed=step, stats=stats)
        if not self.enabled:
            self.console.print(f"step {step}: {stats}")

    def note(self, text: str) -> None:
        self.console.print(text)


def _rollout_stats(m: dict[str, float]) -> str:
    if "success_rate" in m:  # agent experience: episodes instead of single completions
        quality = f"success {m['success_rate']:.2f}  turns {m['turns_per_episode']:.1f}  "
        quality += f"invalid {m['invalid_action_rate']:.2f}"
    else:
        quality = f"acc {m['accuracy']:.2f}  len {m['completion_length_mean']:.0f}"
    return (
        f"reward {m['reward_mean']:.3f}  {quality}  "
        f"gen {m['generated_tokens_per_second']:.0f} tok/s  step {m['step_seconds']:.1f}s"
    )


def _sft_stats(m: dict[str, float]) -> str:
    """Supervised fine-tuning: a loss, no rollouts."""
    return (
        f"loss {m['loss']:.4f}  lr {m['lr']:.2e}  train {m['trained_tokens_per_second']:.0f} tok/s  "
        f"step {m['step_seconds']:.1f}s"
    )
