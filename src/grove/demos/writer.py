"""``write_demonstrations``: a config's expert demonstrations, written as a demonstration file.

With ``cfg.env`` set, the rows are expert episodes of the environment (:mod:`grove.demos.expert_episodes`);
without, gold completions of the single-turn task (:mod:`grove.demos.task_demos`). The file
(:mod:`grove.sft.demonstration_format`) is written to a temporary file beside ``out`` and renamed over it when
complete, so ``out`` is either the whole new file or what it was before.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from grove.atomic_files import write_jsonl_atomic
from grove.config import GroveConfig
from grove.demos.expert_episodes import EnvironmentDemonstrations
from grove.demos.summary import DemoCounts, DemoSummary
from grove.demos.task_demos import TaskDemonstrations

__all__ = ["write_demonstrations"]


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
) -> DemoSummary:
    """Write ``episodes`` expert demonstrations of ``cfg`` to ``out`` (JSON lines) and say what was written.

    * ``cfg.env`` set: ``episodes`` episodes on the environment's training tasks, each action the oracle's or, with
      probability ``noise``, a random other admissible action; ``keep="won"`` writes only the won episodes,
      ``"all"`` every episode that took a turn;
    * a single-turn task: gold completions of ``episodes`` training examples (``noise`` must be 0);
    * ``tokenizer``: the policy's (the ids and the file's fingerprint are its); ``seed``: the order of tasks or
      examples, the environment seeds and the noise; ``model_context``: the model's context length in tokens (the
      rollout's prompt budget; default: the tokenizer's ``model_max_length`` when known).
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
    counts = DemoCounts()
    if cfg.env is not None:
        demos = EnvironmentDemonstrations(cfg, tokenizer, model_context=model_context)
        write_jsonl_atomic(out, demos.rows(counts, episodes=episodes, noise=noise, keep=keep, seed=seed))
        return DemoSummary.of(counts, source=demos.name, out=out, kind="environment")
    if noise:
        raise ValueError(
            f"noise {noise} applies to environment demonstrations (random admissible actions in place of the "
            f"oracle's); task {cfg.task.id!r} is single-turn: use noise 0"
        )
    task_demos = TaskDemonstrations(cfg, tokenizer, model_context=model_context)
    write_jsonl_atomic(out, task_demos.rows(counts, episodes=episodes, seed=seed))
    return DemoSummary.of(counts, source=task_demos.name, out=out, kind="task")
