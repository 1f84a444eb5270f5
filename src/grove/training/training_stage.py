"""What a kind of training run is made of: the trainer's one loop runs any :class:`TrainingStage`.

    collect (the stage's experience source) → credit → batch stages → update (the stage's loss and schedule)

Reinforcement learning (``grove train``, :mod:`grove.training.reinforcement_stage`) collects scored rollouts and
assigns credit with the configured estimator; supervised fine-tuning (``grove sft``,
:mod:`grove.training.supervised_stage`) is a source of demonstrations and the ``nll`` loss, with no credit to assign
and no batch stages. Both share the loop, the policy models, checkpoints and exact resume, logs, stop signals, the
time budget, evaluation and the summary (:class:`grove.training.trainer.Trainer`). A stage kind is a
:class:`StageKind`: the checks of its config against the world, the config its policy models are built from, and
its builder.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import torch

from grove.batch import RolloutBatch
from grove.config import GroveConfig
from grove.distributed.world import World
from grove.experience.source import ExperienceSource
from grove.pipeline.batch_stages import BatchStages
from grove.pipeline.credit import Credit
from grove.pipeline.step_coefficients import StepCoefficients
from grove.pipeline.update import LossComponents, UpdateSchedule
from grove.training.policy_models import PolicyModels

__all__ = ["StageInputs", "StageKind", "TrainingStage"]


@dataclass(frozen=True)
class TrainingStage:
    """One kind of run, built once by its :class:`StageKind`.

    ``steps``: the run's training steps; ``optimizer_steps``: the learning-rate schedule's length. ``eval_every``:
    steps between held-out evaluations (0: before and after only); ``evaluates_policy``: whether an evaluation runs
    the source's policy evaluation (rank 0); ``held_out``: demonstrations whose mean cross-entropy each evaluation
    reports (every rank computes it). ``generates_each_step``: the generation copy of the weights is refreshed
    after each update (rollouts); otherwise it is refreshed only to evaluate. ``exports_model``: the run ends by
    writing ``RUN_DIR/model/`` (adapters merged). ``summary``: the stage's fields of ``summary.json``."""

    label: str
    steps: int
    optimizer_steps: int
    source: ExperienceSource
    credit: Credit
    stages: BatchStages
    loss: LossComponents
    schedule: UpdateSchedule
    coefficients: StepCoefficients
    eval_every: int
    evaluates_policy: bool = True
    held_out: tuple[RolloutBatch, ...] = ()
    generates_each_step: bool = True
    exports_model: bool = False
    summary: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class StageInputs:
    """What the trainer has built when it builds its stage."""

    cfg: GroveConfig
    run_dir: Path
    models: PolicyModels
    engine: Any  # the rollout engine (grove.rollout.engine.RolloutEngine)
    world: World
    generator: torch.Generator


class StageKind(Protocol):
    """A kind of training run (``train``, ``sft``)."""

    def check(self, cfg: GroveConfig, world: World) -> None:
        """Refuse, with a :class:`grove.config.ConfigError` naming the field, a config this kind cannot run."""
        ...

    def models_config(self, cfg: GroveConfig) -> GroveConfig:
        """The config the policy models are built from."""
        ...

    def build(self, inputs: StageInputs) -> TrainingStage: ...
