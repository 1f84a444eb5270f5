"""Building a run from its plan: the run directory and its lock, the runtime, the models, the stage (its source,
credit, batch stages, loss, schedule and coefficients), the optimizer, the update, the checkpointed state (restored
when resuming), the logs and the token-details recorder; the rollout engine on first use.

:func:`build_run` is what :class:`grove.training.trainer.Trainer` runs on. The config was resolved by the front door
(:func:`grove.resolve.resolve`); nothing here looks a component up or checks the config again.
"""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from rich.console import Console

from grove.config import ConfigError
from grove.config.derived import generates_from_bf16_copy, generation_rollout
from grove.distributed.world import World, derived_seed
from grove.infra.heartbeat import Heartbeat
from grove.infra.precision import slow_bf16_warning
from grove.infra.run_lock import RunDirectoryLock
from grove.infra.run_logs import NullRunLogger, RunLogger
from grove.infra.runtime import configure_runtime
from grove.infra.shared_cpu import CoreShare
from grove.pipeline.token_details import TokenDetailsRecorder
from grove.pipeline.update_seam import UpdateContext, Updater
from grove.resolve import RunPlan
from grove.rollout_engines import build_rollout_engine
from grove.training.micro_batch_budget import MicroBatchBudget
from grove.training.nonfinite_guard import NonFiniteGuard
from grove.training.optim import build_optimizer
from grove.training.policy_models import PolicyModels
from grove.training.reinforcement_stage import ReinforcementLearning
from grove.training.reward_model_stage import RewardModelTraining
from grove.training.run_checkpoint import (
    RunState,
    prepare_run_dir,
    record_resumed_config,
    restore_run_checkpoint,
    take_run_directory,
)
from grove.training.supervised_stage import SupervisedFineTuning
from grove.training.training_stage import StageInputs, StageKind, TrainingStage

__all__ = ["STAGE_KINDS", "BuiltRun", "build_run", "seed_everything"]

log = logging.getLogger(__name__)

#: the kinds of run, by the command that starts them
STAGE_KINDS: dict[str, StageKind] = {
    "train": ReinforcementLearning(), "sft": SupervisedFineTuning(), "rm": RewardModelTraining(),
}


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


@dataclass
class BuiltRun:
    """Everything a run's loop uses (see the module docstring). ``step``: the step the checkpoint restored (0 for a
    new run); ``resume_from``: that checkpoint (``None``: none); ``lock``: held for the run's life."""

    plan: RunPlan
    run_dir: Path
    world: World
    lock: RunDirectoryLock
    console: Console
    heartbeat: Heartbeat
    core_share: CoreShare
    models: PolicyModels
    generator: torch.Generator
    inputs: StageInputs
    stage: TrainingStage
    optimizer: torch.optim.Optimizer
    scheduler: Any
    updater: Updater
    state: RunState
    step: int
    resume_from: Path | None
    nonfinite_guard: NonFiniteGuard
    logger: RunLogger | NullRunLogger
    token_details: TokenDetailsRecorder


def build_run(plan: RunPlan, run_dir: Path, world: World, resume: bool) -> BuiltRun:
    """The run of ``plan`` in ``run_dir`` (a new one, or the one there continued with ``resume``); the run
    directory is taken (one process at a time) and given back if building fails."""
    lock = take_run_directory(run_dir, world, resume)
    try:
        return _build(plan, run_dir, world, resume, lock)
    except BaseException:
        lock.release()
        raise


def _build(plan: RunPlan, run_dir: Path, world: World, resume: bool, lock: RunDirectoryLock) -> BuiltRun:
    cfg = plan.cfg
    console = Console(stderr=True, quiet=not world.is_main)
    # a line now and then in a long quiet phase, wherever stderr goes (rank 0)
    heartbeat = Heartbeat(cfg.logging.heartbeat_seconds if world.is_main else 0.0,
                          lambda line: console.print(line, markup=False, highlight=False))
    start = prepare_run_dir(cfg, run_dir, world, resume)
    configure_runtime(**cfg.runtime_settings())
    # on a CPU shared with other processes, torch's threads follow the free cores (threads: null, one process)
    core_share = CoreShare(follow=cfg.threads is None and not world.distributed, watch=world.device.type == "cpu")
    slow_bf16 = slow_bf16_warning(cfg.train.precision, generates_from_bf16_copy(cfg), world.device)
    if slow_bf16 is not None and world.is_main:
        log.warning("warning: %s", slow_bf16)
    seed_everything(cfg.seed)
    models = STAGE_KINDS[plan.kind].build_models(plan, world, start.checkpoint)
    generator = torch.Generator().manual_seed(derived_seed(cfg.seed, world.rank))
    engine_entry = plan.entries.rollout_engine
    inputs = StageInputs(
        plan, run_dir, models,
        lambda: build_rollout_engine(generation_rollout(cfg), models.generation_model, models.tokenizer, engine_entry),
        world, generator,
    )
    stage = STAGE_KINDS[plan.kind].build(inputs)
    if stage.exports_model and cfg.checkpoint.format == "sharded":
        raise ConfigError(
            "checkpoint.format: sharded cannot be used here: this run writes RUN_DIR/model/ from its last "
            "checkpoint, which needs a full one; set checkpoint.format: full"
        )
    optimizer, scheduler = build_optimizer(models.train_module, cfg.optim, stage.optimizer_steps, seed=cfg.seed)
    budget = MicroBatchBudget(
        setting=cfg.train.micro_batch_tokens, model=models.causal_lm, precision=stage.loss.precision,
        checkpointing=cfg.train.activation_checkpointing, device=world.device,
    )
    updater = stage.build_updater(
        UpdateContext(models.train_module, optimizer, scheduler, models.strategy, generator, budget)
    )
    state = RunState(
        models=models, optimizer=optimizer, scheduler=scheduler, source=stage.source, generator=generator,
        controllers=stage.coefficients.controllers, world=world, seed=cfg.seed,
        sharded=cfg.checkpoint.format == "sharded",
    )
    step = 0 if start.checkpoint is None else restore_run_checkpoint(start.checkpoint, state)
    record_resumed_config(cfg, run_dir, start, world)
    logger = _run_logger(plan, run_dir, world, resume, step, start.checkpoint)
    details = cfg.logging.token_details
    token_details = TokenDetailsRecorder(
        details.every if stage.records_token_details else 0, details.max_samples, stage.loss, models.tokenizer,
        logger.log_token_details,
    )
    return BuiltRun(
        plan=plan, run_dir=run_dir, world=world, lock=lock, console=console, heartbeat=heartbeat,
        core_share=core_share, models=models, generator=generator, inputs=inputs, stage=stage, optimizer=optimizer,
        scheduler=scheduler, updater=updater, state=state, step=step, resume_from=start.checkpoint,
        nonfinite_guard=NonFiniteGuard(
            cfg.train.max_skipped_steps, stage.schedule.ppo_epochs * stage.schedule.mini_batches, run_dir
        ),
        logger=logger,
        token_details=token_details,
    )


def _run_logger(
    plan: RunPlan, run_dir: Path, world: World, resume: bool, step: int, checkpoint: Path | None
) -> RunLogger | NullRunLogger:
    """Rank 0's logs; resuming keeps the records up to the checkpoint's step, and a run killed before its first
    checkpoint starts over, so none of its records are kept (step -1)."""
    if not world.is_main:
        return NullRunLogger()
    resume_step = None if not resume else (step if checkpoint is not None else -1)
    return RunLogger(run_dir, tensorboard=plan.cfg.logging.tensorboard, resume_step=resume_step)
