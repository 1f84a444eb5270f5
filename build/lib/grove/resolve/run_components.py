"""The components a run uses, looked up once from its config: :func:`resolve_components`.

Every algorithm choice of the config is a registry id; this is the one place they become callables with
validated parameters, so the trainer, its credit assignment and the update receive components and never look an
id up themselves.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from pydantic import BaseModel
from torch import Tensor

from grove.config import GroveConfig
from grove.config.derived import zero_advantage_skip_blocker
from grove.core.advantages import AdvantageFn
from grove.core.objectives import AggregateFn
from grove.pipeline.batch_stages import BatchStage, BatchStages, OldLogprobRecompute
from grove.pipeline.collect import ObjectiveScoring
from grove.pipeline.downsampling import RolloutDownsampling, SampleSelection, TokenSelection
from grove.pipeline.rollout_correction import RolloutCorrection
from grove.pipeline.trajectory_weighting import TrajectoryWeighting
from grove.pipeline.update import LossComponents
from grove.registry import (
    ADVANTAGE_ESTIMATORS,
    KL_ESTIMATORS,
    LOSS_AGGREGATIONS,
    POLICY_LOSSES,
    REWARD_AGGREGATORS,
)

__all__ = ["RunComponents", "resolve_batch_stages", "resolve_components", "resolve_loss_components"]


@dataclass(frozen=True)
class RunComponents:
    """``algorithm.advantage`` and ``algorithm.reward_aggregation`` with their parameters; whether the estimator
    asks for a scored greedy completion per prompt; the KL estimator when
    the KL goes into the reward (``kl.placement: reward``, else ``None``); the stages between credit and the update;
    the update's loss components."""

    advantage_fn: AdvantageFn
    advantage_params: BaseModel
    aggregator: AggregateFn
    aggregator_params: BaseModel
    greedy_baseline: bool
    kl_in_reward_estimator: Callable[[Tensor, Tensor], Tensor] | None
    stages: BatchStages
    loss: LossComponents

    @property
    def scoring(self) -> ObjectiveScoring:
        """The aggregator and the greedy baseline, as an experience source scores with them."""
        return ObjectiveScoring(self.aggregator, self.aggregator_params, self.greedy_baseline)


def resolve_components(cfg: GroveConfig) -> RunComponents:
    """The components ``cfg`` names (checked by :func:`grove.resolve.check_config`)."""
    a = cfg.algorithm
    advantage_fn, advantage_params = ADVANTAGE_ESTIMATORS.get(a.advantage.id), a.advantage.validated(ADVANTAGE_ESTIMATORS)
    return RunComponents(
        advantage_fn=advantage_fn,
        advantage_params=advantage_params,
        aggregator=REWARD_AGGREGATORS.get(a.reward_aggregation.id),
        aggregator_params=a.reward_aggregation.validated(REWARD_AGGREGATORS),
        greedy_baseline="greedy_baseline" in ADVANTAGE_ESTIMATORS.entry(a.advantage.id).requires,
        kl_in_reward_estimator=KL_ESTIMATORS.get(a.kl.estimator) if a.kl.placement == "reward" else None,
        stages=resolve_batch_stages(cfg, advantage_fn, advantage_params),
        loss=resolve_loss_components(cfg),
    )


def resolve_batch_stages(cfg: GroveConfig, advantage_fn: AdvantageFn, advantage_params: BaseModel) -> BatchStages:
    """The stages ``cfg`` turns on, in order: D^3S's rollout selection (``selection.samples``; the estimator runs
    again on the kept rollouts with ``advantages: recompute``) and trajectory weights on the whole step's batch;
    then the old log-probs recomputed (``train.old_logprobs: recompute``) and the rollout correction on this rank's
    rows."""
    a = cfg.algorithm
    whole_step: list[BatchStage] = []
    samples = cfg.selection.samples
    if samples is not None:
        selection = SampleSelection(samples.scope, samples.advantages == "recompute", samples.min_per_group)
        whole_step.append(RolloutDownsampling(selection, samples.ratio, advantage_fn, advantage_params))
    if a.trajectory_weighting != "per_sample":
        whole_step.append(TrajectoryWeighting(a.trajectory_weighting))
    this_rank: list[BatchStage] = []
    if cfg.train.old_logprobs == "recompute":
        this_rank.append(OldLogprobRecompute())
    if a.rollout_correction.mode != "none":
        this_rank.append(RolloutCorrection(a.rollout_correction))
    return BatchStages(tuple(whole_step), tuple(this_rank))


def resolve_loss_components(cfg: GroveConfig) -> LossComponents:
    """What the update needs of the config: the policy loss and its parameters, the loss aggregation, the KL term
    (``kl.placement: loss``), the forward's settings, D^3S's token selection, the zero-advantage skip."""
    a = cfg.algorithm
    return LossComponents(
        policy_loss=POLICY_LOSSES.get(a.policy_loss.id),
        policy_params=a.policy_loss.validated(POLICY_LOSSES),
        loss_aggregation=LOSS_AGGREGATIONS.get(a.aggregation),
        kl_estimator=KL_ESTIMATORS.get(a.kl.estimator) if a.kl.coef > 0 and a.kl.placement == "loss" else None,
        temperature=cfg.rollout.temperature if cfg.rollout.temperature > 0 else 1.0,
        max_response_length=cfg.rollout.max_new_tokens,
        logit_cache_bytes=int(cfg.train.logit_cache_mb * 2**20),
        forward=cfg.train.forward,
        precision=cfg.train.precision,
        token_selection=TokenSelection(cfg.selection.tokens.scope) if cfg.selection.tokens is not None else None,
        sequence_count=a.sequence_count,
        skip_zero_advantage=zero_advantage_skip_blocker(cfg) is None,
    )
