"""``write_demonstrations``: a config's expert demonstrations, written as a demonstration file.

With ``cfg.env`` set, the rows are expert episodes of the environment (:mod:`grove.demos.expert_episodes`);
without, gold completions of the single-turn task (:mod:`grove.demos.task_demos`). The file
(:mod:`grove.sft.demonstration_format`) is written to a temporary file beside ``out`` and renamed over it when
complete, so ``out`` is either the whole new file or what it was before: a run in which not one episode is kept
(:class:`grove.demos.summary.NoDemonstrationsError`), that fails, or that is interrupted (Ctrl-C:
:class:`DemonstrationsInterrupted`, which says how far it had come) leaves it as it was.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from grove.atomic_files import write_jsonl_atomic
from grove.config import GroveConfig
from grove.demos.demo_progress import DemoProgress
from grove.demos.expert_episodes import EnvironmentDemonstrations
from grove.demos.summary import DemoCounts, DemoSummary
from grove.demos.task_demos import TaskDemonstrations

__all__ = ["DemonstrationsInterrupted", "write_demonstrations"]


class DemonstrationsInterrupted(KeyboardInterrupt):
    """Ctrl-C (``KeyboardInterrupt``) while demonstrations were played: ``str()`` says how many episodes were
    played and that ``out`` was left as it was; ``counts``: the counts so far."""

    def __init__(self, counts: DemoCounts, out: Path, episodes: int, kind: str, existed: bool) -> None:
        played = (
            f"{counts.rows} of {episodes} gold completions" if kind == "task"
            else f"{counts.episodes} of {episodes} episodes ({counts.won} won, {counts.rows} rows to write)"
        )
        state = "is unchanged" if existed else "was not created"
        super().__init__(
            f"interrupted (Ctrl-C) after {played}; nothing was written: {out} {state} (the file is written whole "
            "once every episode is played)"
        )
        self.counts = counts


def write_demonstrations(
    cfg: GroveConfig,
    tokenizer: Any,
    out: Path,
    *,
    episodes: int,
    noise: float = 0.0,
    keep: Literal["won", "all"] = "won",
    seed: int = 0,
    model_context: int | None = None,
    progress: Callable[[str], None] | None = None,
    progress_every_s: float = 10.0,
) -> DemoSummary:
    """Write ``episodes`` expert demonstrations of ``cfg`` to ``out`` (JSON lines) and say what was written.

    * ``cfg.env`` set: ``episodes`` episodes on the environment's training tasks, each action the oracle's or, with
      probability ``noise``, a random other admissible action; ``keep="won"`` writes only the won episodes,
      ``"all"`` every one that took a turn. The environment's calls run with the rollout's limits
      (``env.step_timeout_s``, ``env.max_turns``);
      a vision-language policy's samples whose tokens hold pictures have their pixels saved in
      ``<out's stem>_images/`` beside ``out`` (one safetensors file each, named by the row's ``pixels``);
    * a single-turn task: gold completions of ``episodes`` training examples (``noise`` must be 0); prompts with
      images are written as ``messages`` rows, their images as PNG files in ``<out's stem>_images/`` beside ``out``;
    * ``tokenizer``: the policy's (the ids and the file's fingerprint are its); ``seed``: the order of tasks or
      examples, the environment seeds and the noise; ``model_context``: the model's context length in tokens (the
      rollout's prompt budget; default: the tokenizer's ``model_max_length`` when known);
    * ``progress``: called with a line of progress at most every ``progress_every_s`` seconds (0: never).

    Raises :class:`grove.demos.summary.NoDemonstrationsError` when not one episode is kept, and
    :class:`DemonstrationsInterrupted` on Ctrl-C; ``out`` is then left as it was.
    """
    if episodes < 1:
        raise ValueError(f"episodes must be at least 1, got {episodes}")
    if not 0.0 <= noise <= 1.0:
        raise ValueError(f"noise is a probability: it must be in [0, 1], got {noise}")
    if keep not in ("won", "all"):
        raise ValueError(f"keep must be 'won' or 'all', got {keep!r}")
    out = Path(out)
    if out.is_dir():
        raise ValueError(f"the demonstration file {str(out)!r} is a directory; give a file path such as demos.jsonl")
    if cfg.env is None and noise:
        raise ValueError(
            f"noise {noise} applies to environment demonstrations (random admissible actions in place of the "
            f"oracle's); task {cfg.task.id!r} is single-turn: use noise 0"
        )
    kind = "environment" if cfg.env is not None else "task"
    counts, existed = DemoCounts(), out.exists()
    ticks = DemoProgress(progress, progress_every_s, episodes, kind)
    try:
        if cfg.env is not None:
            demos = EnvironmentDemonstrations(cfg, tokenizer, model_context=model_context)
            rows = demos.rows(counts, episodes=episodes, noise=noise, keep=keep, seed=seed, progress=ticks,
                              image_dir=out.parent / f"{out.stem}_images")
            source = demos.name
        else:
            task_demos = TaskDemonstrations(cfg, tokenizer, model_context=model_context)
            rows = task_demos.rows(counts, episodes=episodes, seed=seed, progress=ticks,
                                   image_dir=out.parent / f"{out.stem}_images")
            source = task_demos.name
        write_jsonl_atomic(out, rows)
    except KeyboardInterrupt as exc:
        raise DemonstrationsInterrupted(counts, out, episodes, kind, existed) from exc
    return DemoSummary.of(counts, source=source, out=out, kind=kind)
