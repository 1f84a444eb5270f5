"""The update seam: what an update is built with, what each step hands it, and what it returns.

An :class:`Updater` is built once per run from an :class:`UpdateContext` and the stage's own settings; each training
step calls ``updater.step(batch, coefficients, tokens)``: the batch to train on, the step's loss coefficients
(:class:`Coefficients`) and its loss-token filter (:class:`grove.pipeline.loss_token_filter.LossTokenFilter`). The
policy's update is :class:`grove.pipeline.update.PolicyUpdate` (with the run's :class:`LossComponents` and
:class:`UpdateSchedule`); ``grove rm``'s is :class:`grove.rm.score_update.ScoreUpdate`. A stage names its updater by
a builder, ``UpdateContext -> Updater`` (:data:`UpdaterBuilder`), so the trainer calls every kind of update alike.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import torch
from pydantic import BaseModel
from torch import Tensor

from grove.batch import RolloutBatch
from grove.core.aggregation import AggregationScale, SequenceCount
from grove.core.losses import PolicyLossFn
from grove.distributed.strategies import Strategy
from grove.distributed.world import World
from grove.kernels.output_projection import DEFAULT_CACHE_BYTES, DEFAULT_CHUNK_SIZE
from grove.pipeline.loss_token_filter import LossTokenFilter

__all__ = [
    "Coefficients",
    "LossComponents",
    "MicroBatchTokens",
    "UpdateContext",
    "UpdateOutcome",
    "UpdateSchedule",
    "Updater",
    "UpdaterBuilder",
]


@dataclass(frozen=True)
class LossComponents:
    """The loss of an update: the resolved registry functions with their validated parameters and the training
    forward's settings."""

    policy_loss: PolicyLossFn
    policy_params: BaseModel
    loss_aggregation: Callable[[Tensor, Tensor, AggregationScale], Tensor]  # the token loss reduced to one number
    kl_estimator: Callable[[Tensor, Tensor], Tensor] | None  # set when the KL term is in the loss
    temperature: float
    max_response_length: int
    chunk_size: int = DEFAULT_CHUNK_SIZE
    logit_cache_bytes: int = DEFAULT_CACHE_BYTES  # softmax of a micro-batch kept for backward up to this size
    forward: str = "padded"  # training-forward layout: "packed" | "shared_prefix" | "padded" (grove.models.forward_layouts)
    precision: str = "fp32"  # "bf16": forward under bfloat16 autocast
    sequence_count: SequenceCount = "all_rows"  # which rows the seq_mean_* aggregations count (grove.core.aggregation)
    skip_zero_advantage: bool = False  # leave zero-advantage samples out (exact for this config; samples_with_signal)
    # the batch's old log-probs and advantages are a rollout's: the metrics compare them with the training forward
    # (logprob_mismatch_*) and count skipped zero-advantage samples; off for demonstrations (supervised fine-tuning)
    rollout_metrics: bool = True


@dataclass(frozen=True)
class UpdateSchedule:
    """μ epochs × mini-batches (optimizer steps) × micro-batches of at most ``micro_batch_size`` samples (and, with
    ``micro_batch_tokens``, at most that many tokens); the gradient norm clipped to ``max_grad_norm``."""

    ppo_epochs: int
    mini_batches: int
    micro_batch_size: int
    max_grad_norm: float | None
    recompute_old_logprobs: bool = False
    micro_batch_tokens: int | None = None  # a fixed token budget per micro-batch (the context's budget overrides it)

    @property
    def on_policy(self) -> bool:
        return self.ppo_epochs == 1 and self.mini_batches == 1

    @property
    def old_from_current_forward(self) -> bool:
        return self.on_policy and not self.recompute_old_logprobs


@dataclass(frozen=True)
class Coefficients:
    """The step's loss coefficients (controllers may change them between steps)."""

    kl: float = 0.0
    entropy: float = 0.0


class MicroBatchTokens(Protocol):
    """The token budget of a step's micro-batches, asked when its update starts (free memory changes)."""

    def __call__(self, batch: RolloutBatch, micro_batch_size: int) -> int | None: ...


@dataclass(frozen=True)
class UpdateContext:
    """What an updater is built with, once per run: the trained module, its optimizer and learning-rate schedule,
    the distributed strategy (default: one process), the generator that shuffles mini-batches, and the micro-batch
    token budget (``None``: the schedule's)."""

    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    strategy: Strategy = field(default_factory=lambda: Strategy("none", World()))
    generator: torch.Generator = field(default_factory=torch.Generator)
    micro_batch_tokens: MicroBatchTokens | None = None


@dataclass(frozen=True)
class UpdateOutcome:
    """What a step's update returns: its metrics (over every rank) and, when its filter left loss tokens out, the
    loss mask each row of the batch was trained on in the first epoch (``[N, R]`` float, ``None`` otherwise or when
    no update ran)."""

    metrics: dict[str, float]
    trained_mask: Tensor | None = None


class Updater(Protocol):
    """An update built once per run (see the module docstring)."""

    def step(self, batch: RolloutBatch, coefficients: Coefficients, tokens: LossTokenFilter) -> UpdateOutcome:
        """Train on ``batch`` (this rank's share of the step) with ``coefficients``, on the loss tokens ``tokens``
        keeps."""
        ...


#: how a stage names its update: built from the run's context once the optimizer exists
UpdaterBuilder = Callable[[UpdateContext], Updater]
