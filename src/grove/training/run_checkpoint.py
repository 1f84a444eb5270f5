"""A training run's directory and checkpoints, with every rank taking its part.

* :func:`prepare_run_dir`: a new run writes its ``config.yaml`` (rank 0, then all ranks meet); ``--resume``
  finds the latest checkpoint.
* :func:`save_run_checkpoint`: all ranks gather the full model and optimizer states and their RNG streams to
  rank 0, which writes the checkpoint (:mod:`grove.infra.checkpoint`); the others wait for it.
* :func:`restore_run_checkpoint`: every rank reads the same checkpoint, keeps its shard of the optimizer state
  and its own RNG streams (a rank the writing run did not have starts a fresh stream of its own). The model
  weights were already loaded with the model (:mod:`grove.training.policy_models`).
"""

from __future__ import annotations

import errno
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from grove.config import ConfigError, GroveConfig, dump_config
from grove.distributed.checkpoint_state import gather_full_optimizer_state, load_full_optimizer_state
from grove.distributed.world import World, derived_seed
from grove.infra import checkpoint as ckpt
from grove.training.policy_models import PolicyModels

__all__ = ["RunState", "prepare_run_dir", "restore_run_checkpoint", "save_run_checkpoint"]


@dataclass
class RunState:
    """Everything of a run that a checkpoint holds besides the step number."""

    models: PolicyModels
    optimizer: torch.optim.Optimizer
    scheduler: Any
    source: Any  # the experience source (its position: task order, environment seeds)
    generator: torch.Generator  # this rank's rollout sampling stream
    controllers: dict[str, Any]  # name → object with state_dict / load_state_dict (KL, entropy coefficients)
    world: World
    seed: int


def prepare_run_dir(cfg: GroveConfig, run_dir: Path, world: World, resume: bool) -> Path | None:
    """The checkpoint to resume from (``None``: start at step 0), after checking or creating ``run_dir``."""
    config_path = run_dir / "config.yaml"
    if resume:
        latest = ckpt.latest_checkpoint(run_dir)
        if latest is None and not config_path.exists():
            raise ConfigError(f"--resume {run_dir}: no such run (no config.yaml there)")
        return latest  # None: killed before the first checkpoint, start over in the same directory
    if ckpt.list_checkpoints(run_dir) or (run_dir / "metrics.jsonl").exists():
        raise ConfigError(
            f"output_dir {str(run_dir)!r} already holds a run; continue it with "
            f"--resume {run_dir}, or choose a new one with --set output_dir=..."
        )
    if world.is_main:
        run_dir.mkdir(parents=True, exist_ok=True)
        config_path.write_text(dump_config(cfg))
    world.barrier("run directory")
    return None


def save_run_checkpoint(run_dir: Path, step: int, state: RunState, keep_last: int) -> None:
    """Write the checkpoint of ``step`` (every rank must call this)."""
    world, models = state.world, state.models
    with world.phase("checkpoint: gather"):
        model_state = models.gather_state()
        optimizer_state = gather_full_optimizer_state(models.train_module, state.optimizer)
    rank_states = world.gather_objects(
        {"generator": state.generator.get_state(), "rng": ckpt.capture_rng()}, "checkpoint: RNG states"
    )
    failure: ckpt.CheckpointWriteError | None = None
    if world.is_main:
        trainer_state = ckpt.TrainerState(
            step=step,
            optimizer=optimizer_state,
            scheduler=state.scheduler.state_dict(),
            sampler=state.source.state_dict(),
            generator=rank_states[0]["generator"],
            rng=rank_states[0]["rng"],
            controllers={name: c.state_dict() for name, c in state.controllers.items()},
            rank_states=rank_states,
        )
        try:
            ckpt.save_checkpoint(run_dir, models.write_model(model_state), models.tokenizer, trainer_state, keep_last)
        except ckpt.CheckpointWriteError as exc:
            failure = exc
    # every rank learns whether rank 0's write worked, so all stop together when it did not
    message = world.broadcast_object(None if failure is None else str(failure), "checkpoint: rank 0 writing")
    if failure is not None:
        raise failure
    if message is not None:
        raise ckpt.CheckpointWriteError(errno.EIO, f"rank 0 could not write the checkpoint: {message}")


def restore_run_checkpoint(path: Path, state: RunState) -> int:
    """Restore the optimizer, schedules, source position, controllers and RNG streams; return the step."""
    saved = ckpt.load_trainer_state(path)
    load_full_optimizer_state(state.models.train_module, state.optimizer, saved.optimizer)
    state.scheduler.load_state_dict(saved.scheduler)
    state.source.load_state_dict(saved.sampler)
    ranks = saved.rank_states or [{"generator": saved.generator, "rng": saved.rng}]
    rank = state.world.rank
    if rank < len(ranks):
        state.generator.set_state(ranks[rank]["generator"])
        ckpt.restore_rng(ranks[rank]["rng"])
    else:  # more ranks than the run that wrote the checkpoint: a fresh stream of this rank's own
        state.generator.manual_seed(derived_seed(state.seed * 1_000_003 + saved.step, rank))
    for name, controller in state.controllers.items():
        controller.load_state_dict(saved.controllers[name])
    return saved.step
