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
from grove.pipeline.downsampling import TokenSelection
from grove.pipeline.update import LossComponents
from grove.registry import (
    ADVANTAGE_ESTIMATORS,
    KL_ESTIMATORS,
    LOSS_AGGREGATIONS,
    POLICY_LOSSES,
    REWARD_AGGREGATORS,
)

__all__ = ["RunComponents", "resolve_components", "resolve_loss_components"]


@dataclass(frozen=True)
class RunComponents:
    """``algorithm.advantage`` and ``algorithm.reward_aggregation`` with their parameters; the KL estimator when
    the KL goes into the reward (``kl.placement: reward``, else ``None``); the update's loss components."""

    advantage_fn: AdvantageFn
    advantage_params: BaseModel
    aggregator: AggregateFn
    aggregator_params: BaseModel
    kl_in_reward_estimator: Callable[[Tensor, Tensor], Tensor] | None
    loss: LossComponents


def resolve_components(cfg: GroveConfig) -> RunComponents:
    """The components ``cfg`` names (checked by :func:`grove.resolve.check_config`)."""
    a = cfg.algorithm
    return RunComponents(
        advantage_fn=ADVANTAGE_ESTIMATORS.get(a.advantage.id),
        advantage_params=a.advantage.validated(ADVANTAGE_ESTIMATORS),
        aggregator=REWARD_AGGREGATORS.get(a.reward_aggregation.id),
        aggregator_params=a.reward_aggregation.validated(REWARD_AGGREGATORS),
        kl_in_reward_estimator=KL_ESTIMATORS.get(a.kl.estimator) if a.kl.placement == "reward" else None,
        loss=resolve_loss_components(cfg),
    )


def resolve_loss_components(cfg: GroveConfig) -> LossComponents:
    """What the update needs of the config: the policy loss and its parameters, the loss aggregation, the KL term
    (``kl.placement: loss``), the forward's settings, D^3S's token selection, the zero-advantage skip."""
    a = cfg.algorithm
    return LossComponents(
        policy_loss=POLICY_LOSSES.get(a.policy_loss.id),
        policy_params=a.policy_loss.validated(POLICY_LOSSES),
        aggregate=LOSS_AGGREGATIONS.get(a.aggregation),
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
