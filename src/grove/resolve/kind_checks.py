"""What a kind of run needs of its config and of the world it runs in, checked by the front door before anything
else: ``grove train`` shares each step's prompt groups among the processes, ``grove sft`` and ``grove rm`` their
sections' examples."""

from __future__ import annotations

from typing import TYPE_CHECKING

from grove.config import ConfigError, GroveConfig

if TYPE_CHECKING:
    from grove.resolve.run_entries import RunKind

__all__ = ["check_kind"]


def check_kind(cfg: GroveConfig, kind: RunKind, world_size: int) -> None:
    """Refuse, with a :class:`ConfigError` naming the field, a config ``kind`` cannot run on ``world_size``
    processes."""
    if kind == "train" and cfg.train.prompts_per_step < world_size:
        raise ConfigError(
            f"train.prompts_per_step ({cfg.train.prompts_per_step}) is smaller than the number of processes "
            f"({world_size}); each rank needs at least one prompt group: raise it or launch fewer processes"
        )
    if kind == "sft":
        if cfg.sft is None:
            raise ConfigError(
                "grove sft needs an `sft` section naming its data, e.g. sft: {data: [demos.jsonl]} (docs/warm-start.md)"
            )
        _enough_examples("sft.batch_size", cfg.sft.batch_size, world_size)
    if kind == "rm":
        if cfg.rm is None:
            raise ConfigError(
                "grove rm needs an `rm` section naming its data, e.g. rm: {data: [pairs.jsonl], objective: "
                "bradley_terry} (docs/reward-model-training.md)"
            )
        _enough_examples("rm.batch_size", cfg.rm.batch_size, world_size)


def _enough_examples(key: str, batch_size: int, world_size: int) -> None:
    if batch_size < world_size:
        raise ConfigError(
            f"{key} ({batch_size}) is smaller than the number of processes ({world_size}); each rank needs at "
            "least one example per step: raise it or launch fewer processes"
        )
