"""What a kind of training run is made of: the trainer's one loop runs any :class:`TrainingStage`.

    collect (the stage's experience source) → credit → batch stages → update (the stage's loss and schedule)

Reinforcement learning (``grove train``, :mod:`grove.training.reinforcement_stage`) collects scored rollouts and
assigns credit with the configured estimator; supervised fine-tuning (``grove sft``,
:mod:`grove.training.supervised_stage`) is a source of demonstrations and the ``nll`` loss, with no credit to assign
and no batch stages; reward-model training (``grove rm``, :mod:`grove.training.reward_model_stage`) is a source of
preference pairs or labelled completions, a sequence classifier instead of the policy, and an update and a
held-out evaluation of its own. All share the loop, checkpoints and exact resume, logs, stop signals, the time
budget, evaluation and the summary (:class:`grove.training.trainer.Trainer`). A stage kind is a :class:`StageKind`:
its models and its builder; what it needs of the config was checked by the front door
(:func:`grove.resolve.resolve`), whose :class:`grove.resolve.RunPlan` it builds from.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import torch
from torch import nn

from grove.batch import RolloutBatch
from grove.config import GroveConfig
from grove.distributed.world import World
from grove.experience.source import ExperienceSource
from grove.models.merged_export import export_merged
from grove.pipeline.batch_stages import BatchStages
from grove.pipeline.credit import Credit
from grove.pipeline.loss_token_filter import EVERY_LOSS_TOKEN, TokenFilterSchedule
from grove.pipeline.step_coefficients import FixedCoefficients, StepCoefficients
from grove.pipeline.supervised_targets import SupervisedTargets
from grove.pipeline.update import PolicyUpdate
from grove.pipeline.update_seam import LossComponents, UpdateContext, Updater, UpdaterBuilder, UpdateSchedule
from grove.resolve import RunPlan
from grove.rollout.engine import RolloutEngine, release_memory
from grove.training.policy_models import PolicyModels

__all__ = ["StageInputs", "StageKind", "TrainingStage", "stored_example_loss", "stored_example_stage"]


@dataclass(frozen=True)
class TrainingStage:
    """One kind of run, built once by its :class:`StageKind`.

    ``steps``: the run's training steps; ``optimizer_steps``: the learning-rate schedule's length. ``eval_every``:
    steps between held-out evaluations (0: before and after only); ``evaluates_policy``: whether an evaluation runs
    the source's policy evaluation (rank 0); ``held_out``: demonstrations whose mean cross-entropy each evaluation
    reports (every rank computes it). ``generates_each_step``: the generation copy of the weights is refreshed
    after each update (rollouts); otherwise it is refreshed only to evaluate. ``exports_model``: the run ends by
    writing ``RUN_DIR/model/`` (adapters merged) with ``export(checkpoint_dir, out_dir)``. ``summary``: the stage's
    fields of ``summary.json``. ``updater``: builds the stage's update from the run's context once the optimizer
    exists (:mod:`grove.pipeline.update_seam`); ``token_filter``: the loss tokens each step's update trains on
    (D^3S's token level, or every one); ``held_out_evaluation``: ``model -> record`` of the held-out evaluation (every rank), replacing the
    held-out batches' cross-entropy. ``records_token_details``: whether ``logging.token_details`` applies (a
    model with token log-probs)."""

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
    updater: UpdaterBuilder | None = None  # None: the policy update of ``loss`` and ``schedule``
    token_filter: TokenFilterSchedule = EVERY_LOSS_TOKEN
    held_out_evaluation: Callable[[nn.Module], dict[str, float]] | None = None
    export: Callable[..., Path] = export_merged  # (checkpoint_dir, out_dir, *, retry_hint) -> out_dir
    records_token_details: bool = True

    def build_updater(self, context: UpdateContext) -> Updater:
        """The stage's update, built once with the run's ``context``."""
        if self.updater is not None:
            return self.updater(context)
        return PolicyUpdate(context, self.loss, self.schedule)


@dataclass(frozen=True)
class StageInputs:
    """What the run has built when it builds its stage: the resolved ``plan``, the run directory, the models, the
    world and the run's generator; the rollout engine is built on first use (a stage that generates nothing builds
    none)."""

    plan: RunPlan
    run_dir: Path
    models: PolicyModels
    build_engine: Callable[[], RolloutEngine]
    world: World
    generator: torch.Generator

    @property
    def cfg(self) -> GroveConfig:
        return self.plan.cfg

    @functools.cached_property
    def engine(self) -> RolloutEngine:
        """The rollout engine (:class:`grove.rollout.engine.RolloutEngine`) of the models' generation weights."""
        return self.build_engine()

    def release_engine_memory(self) -> None:
        """Let the engine, if one was built, give back the memory it holds between calls (before the update)."""
        if "engine" in self.__dict__:  # built (a cached property)
            release_memory(self.engine)


class StageKind(Protocol):
    """A kind of training run (``train``, ``sft``, ``rm``)."""

    def build_models(self, plan: RunPlan, world: World, resume_from: Path | None) -> PolicyModels:
        """The run's models, placed and wrapped for ``world``, with the weights of ``resume_from`` (a full
        checkpoint) when given."""
        ...

    def build(self, inputs: StageInputs) -> TrainingStage: ...


def stored_example_loss(plan: RunPlan, max_length: int, *, forward: str) -> LossComponents:
    """The loss of stored examples (``grove sft``'s demonstrations, the loop's token-level settings of ``grove rm``):
    the front door's ``nll`` and ``token_mean`` (:attr:`grove.resolve.RunPlan.components`) at temperature 1, no KL
    term, no zero-advantage skip, sequences up to ``max_length`` tokens in the ``forward`` layout, without the
    rollout metrics."""
    return dataclasses.replace(
        plan.components.loss, kl_estimator=None, temperature=1.0, max_response_length=max_length, forward=forward,
        skip_zero_advantage=False, rollout_metrics=False,
    )


def stored_example_stage(
    cfg: GroveConfig, label: str, steps: int, source: ExperienceSource, loss: LossComponents, eval_every: int,
    **fields: Any,
) -> TrainingStage:
    """A stage that trains on stored examples (``grove sft``'s demonstrations, ``grove rm``'s rows): their targets
    are the labels themselves (:class:`grove.pipeline.supervised_targets.SupervisedTargets`, no batch stages), one
    optimizer step per step over ``train.micro_batch_size`` micro-batches, fixed coefficients, no generation between
    steps, and the model written to ``RUN_DIR/model/`` at the end; ``fields``: the kind's other fields."""
    return TrainingStage(
        label=label,
        steps=steps,
        optimizer_steps=steps,
        source=source,
        credit=SupervisedTargets(),
        stages=BatchStages(),
        loss=loss,
        schedule=UpdateSchedule(1, 1, cfg.train.micro_batch_size, cfg.train.max_grad_norm),
        coefficients=FixedCoefficients(),
        eval_every=eval_every,
        generates_each_step=False,
        exports_model=True,
        **fields,
    )
