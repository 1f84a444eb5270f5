"""A training run's directory and checkpoints, with every rank taking its part.

* :func:`prepare_run_dir`: a new run writes its ``config.yaml`` (rank 0, then all ranks meet); ``--resume``
  takes the newest checkpoint that matches its manifest and loads, warning about each newer damaged one, refuses
  (:class:`NoLoadableCheckpointError`) when none does, and checks the resumed config against the run's own
  (:mod:`grove.training.resume_config`). A refused resume changes nothing in the run directory.
* :func:`save_run_checkpoint`: all ranks gather the full model and optimizer states and their RNG streams to
  rank 0, which writes the checkpoint (:mod:`grove.infra.checkpoint`); the others wait for it. With
  ``checkpoint.format: sharded``, every rank writes its shard of the model and optimizer states into rank 0's
  temporary directory first (:func:`grove.distributed.checkpoint_state.save_sharded_state`), then rank 0 adds
  the rest and renames it into place, as for a full checkpoint.
* :func:`restore_run_checkpoint`: every rank reads the same checkpoint, keeps its shard of the optimizer state
  and its own RNG streams (a rank the writing run did not have starts a fresh stream of its own). The model
  weights of a full checkpoint were already loaded with the model (:mod:`grove.training.policy_models`); those of
  a sharded one are read here, with the optimizer state, into the wrapped module's layout.
"""

from __future__ import annotations

import errno
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from grove.config import ConfigError, GroveConfig, dump_config
from grove.distributed.checkpoint_state import (
    gather_full_optimizer_state,
    load_full_optimizer_state,
    load_sharded_state,
    save_sharded_state,
)
from grove.distributed.world import World, derived_seed
from grove.infra import checkpoint as ckpt
from grove.infra.run_lock import RunDirectoryLock, hold_run_directory
from grove.infra.write_failures import reporting_write_failures
from grove.training.policy_models import PolicyModels
from grove.training.resume_config import ConfigChange, check_resumed_config, record_config_changes
from grove.vision.processors import tokenizer_files

__all__ = [
    "NoLoadableCheckpointError",
    "RunStart",
    "RunState",
    "holds_run",
    "prepare_run_dir",
    "record_resumed_config",
    "restore_run_checkpoint",
    "save_run_checkpoint",
]

log = logging.getLogger(__name__)


class NoLoadableCheckpointError(ConfigError):
    """``--resume`` found checkpoints, but none of them loads."""


@dataclass(frozen=True)
class RunStart:
    """Where a run starts: the checkpoint to resume from (``None``: step 0) and the accepted changes of the
    resumed config (``None``: there was no valid ``config.yaml`` to compare with), recorded by
    :func:`record_resumed_config` once the checkpoint is loaded."""

    checkpoint: Path | None = None
    config_changes: list[ConfigChange] | None = field(default_factory=list)


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
    sharded: bool = False  # checkpoint.format: sharded


def holds_run(run_dir: Path) -> bool:
    """Whether ``run_dir`` holds a run that trained (a checkpoint, or a step's metrics): a new run may not start
    there."""
    return bool(ckpt.list_checkpoints(run_dir)) or (run_dir / "metrics.jsonl").exists()


def take_run_directory(run_dir: Path, world: World, resume: bool) -> RunDirectoryLock:
    """``run_dir`` held by this run for its whole life (:mod:`grove.infra.run_lock`; rank 0 holds it for every rank):
    a new run's directory is refused when it already holds a run, else created, then taken; a resumed run's is taken
    as it is (one that does not exist is refused by :func:`prepare_run_dir`). Raises
    :class:`grove.infra.run_lock.RunDirectoryBusy` when another process holds it."""
    if not world.is_main:
        return RunDirectoryLock(run_dir, None)
    if not resume:
        _refuse_a_run_there(run_dir)
        with reporting_write_failures(run_dir / "config.yaml", "the run's config", "start the run again"):
            run_dir.mkdir(parents=True, exist_ok=True)
    return hold_run_directory(run_dir)


def _refuse_a_run_there(run_dir: Path) -> None:
    if holds_run(run_dir):
        raise ConfigError(
            f"output_dir {str(run_dir)!r} already holds a run; continue it with "
            f"--resume {run_dir}, or choose a new one with --set output_dir=..."
        )


def prepare_run_dir(cfg: GroveConfig, run_dir: Path, world: World, resume: bool) -> RunStart:
    """Where the run starts, after checking or creating ``run_dir`` (taken by :func:`take_run_directory`)."""
    if resume:
        return _resume_from(cfg, run_dir, world)
    _refuse_a_run_there(run_dir)
    if world.is_main:
        with reporting_write_failures(run_dir / "config.yaml", "the run's config", "start the run again"):
            run_dir.mkdir(parents=True, exist_ok=True)
            (run_dir / "config.yaml").write_text(dump_config(cfg))
    world.barrier("run directory")
    return RunStart()


def _resume_from(cfg: GroveConfig, run_dir: Path, world: World) -> RunStart:
    """The checkpoint ``--resume`` continues from (``None``: the run was stopped before its first checkpoint and
    starts over in the same directory, under ``cfg``) and the accepted config changes. Nothing in ``run_dir``
    changes before the resume is accepted."""
    if not run_dir.is_dir():
        raise ConfigError(
            f"--resume {run_dir}: there is no run there (no such directory); check the path, or start a new run "
            "without --resume"
        )
    found = ckpt.find_loadable(run_dir)
    if found.path is None and found.damaged:
        raise NoLoadableCheckpointError(
            f"--resume {run_dir}: none of its checkpoints can be resumed from: "
            + "; ".join(f"{c.name}: {problem}" for c, problem in found.damaged)
            + f". Nothing in {run_dir} was changed. Restore a checkpoint from a copy if you have one, or start "
            "afresh in a new directory: the same command without --resume, with --set output_dir=NEW"
        )
    if found.path is None:
        if not (run_dir / "config.yaml").is_file():
            raise ConfigError(
                f"--resume {run_dir}: nothing was saved there yet (no config.yaml: the run stopped during start-up); "
                "start it again without --resume"
            )
        if world.is_main:  # nothing was trained: the run starts over, under the config given now
            with reporting_write_failures(run_dir / "config.yaml", "the run's config", f"continue with --resume {run_dir}"):
                (run_dir / "config.yaml").write_text(dump_config(cfg))
        world.barrier("run directory")
        return RunStart()
    for damaged, problem in found.damaged:
        log.warning("warning: checkpoint %s is damaged (%s); falling back to the previous one", damaged, problem)
    if not (found.path / ckpt.MANIFEST).is_file():
        log.warning(
            "warning: checkpoint %s has no %s, so its files cannot be checked against their checksums (grove writes "
            "one last in every checkpoint); it loads, and the run resumes from it", found.path, ckpt.MANIFEST,
        )
    return RunStart(found.path, check_resumed_config(cfg, run_dir, ckpt.checkpoint_step(found.path)))


def record_resumed_config(cfg: GroveConfig, run_dir: Path, start: RunStart, world: World) -> None:
    """Once the checkpoint is loaded: ``config.yaml`` becomes the config now running, the accepted changes are
    logged (:func:`grove.training.resume_config.record_config_changes`; rank 0)."""
    if start.checkpoint is not None and world.is_main:
        record_config_changes(cfg, run_dir, ckpt.checkpoint_step(start.checkpoint), start.config_changes)


def _write_shards(run_dir: Path, step: int, state: RunState) -> None:
    """Every rank writes its shard of the model and optimizer states into the checkpoint's temporary directory,
    which rank 0 creates first; a failure on any rank is a :class:`CheckpointWriteError` on every rank, after
    rank 0 has removed the temporary directory."""
    world = state.world
    failure: str | None = None
    if world.is_main:
        try:
            ckpt.start_checkpoint(run_dir, step)
        except ckpt.CheckpointWriteError as exc:
            failure = str(exc)
    failure = world.broadcast_object(failure, "checkpoint: rank 0 creating the directory")
    if failure is None:
        shards = ckpt.temporary_dir(run_dir, step) / ckpt.SHARDED_DIR
        try:
            with world.phase("checkpoint: sharded write"):
                save_sharded_state(state.models.train_module, state.optimizer, shards)
        except Exception as exc:  # DCP raises on every rank when one rank's write fails
            failure = f"{world.label}: writing its shard into {shards} failed: {' '.join(str(exc).split())[:600]}"
    failures = [f for f in world.gather_objects(failure, "checkpoint: sharded write done") if f is not None]
    if failures:
        if world.is_main:
            ckpt.discard_checkpoint(run_dir, step)
        world.barrier("checkpoint: discarded")
        previous = ckpt.latest_checkpoint(run_dir)
        intact = f"the previous checkpoint {previous.name} is intact" if previous else "no earlier checkpoint exists"
        raise ckpt.CheckpointWriteError(
            errno.EIO, f"checkpoint step-{step:06d} could not be written: {failures[0]}; continue with --resume "
            f"{run_dir} ({intact})",
        )


def save_run_checkpoint(run_dir: Path, step: int, state: RunState, keep_last: int) -> None:
    """Write the checkpoint of ``step`` (every rank must call this), full or sharded (``state.sharded``)."""
    world, models, sharded = state.world, state.models, state.sharded
    if sharded:
        _write_shards(run_dir, step, state)
        model_state, optimizer_state = {}, {}
    else:
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
        write_model = models.write_config() if sharded else models.write_model(model_state)
        try:
            ckpt.save_checkpoint(run_dir, write_model, tokenizer_files(models.tokenizer), trainer_state, keep_last,
                                 started=sharded)
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
    if ckpt.is_sharded(path):
        _load_shards(path, state)
    else:
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


def _load_shards(path: Path, state: RunState) -> None:
    """Read a sharded checkpoint's model and optimizer states into the current layout (DCP reshards), then
    refresh the copy generation decodes from; states that do not fit the model are a :class:`ConfigError`."""
    try:
        with state.world.phase("resume: sharded read"):
            load_sharded_state(state.models.train_module, state.optimizer, path / ckpt.SHARDED_DIR)
    except (RuntimeError, ValueError, KeyError) as exc:  # DCP's CheckpointException is a RuntimeError
        raise ConfigError(
            f"the sharded states of checkpoint {path} do not fit this run's model ({' '.join(str(exc).split())[:300]});"
            " resume with the model settings the run was started with (its config.yaml)"
        ) from exc
    state.models.refresh_generation_weights()
