"""The algorithm's components of a run, built by the front door from the entries it looked up:
:func:`resolve_components`.

Every algorithm choice of the config is a registry id; the front door (:func:`grove.resolve.resolve`) looks each up
once and this module turns the entries into what the trainer, its credit assignment and the update receive, so none
of them looks an id up.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pydantic import BaseModel
from torch import Tensor

from grove.config import GroveConfig
from grove.core.advantages import AdvantageFn
from grove.core.objectives import CombineFn
from grove.experience.completion_collection import ObjectiveScoring
from grove.pipeline.batch_stages import BatchStage, BatchStages, OldLogprobRecompute
from grove.pipeline.downsampling import RolloutDownsampling, SampleSelection
from grove.pipeline.loss_token_filter import EVERY_LOSS_TOKEN, TokenFilterSchedule
from grove.pipeline.rollout_correction import RolloutCorrection
from grove.pipeline.token_selection import ScheduledTokenSelection
from grove.pipeline.trajectory_weighting import TrajectoryWeighting
from grove.pipeline.update_seam import LossComponents
from grove.registry import Requires

if TYPE_CHECKING:
    from grove.resolve.run_entries import RunEntries

__all__ = ["RunComponents", "resolve_batch_stages", "resolve_components", "resolve_loss_components"]


@dataclass(frozen=True)
class RunComponents:
    """``algorithm.advantage`` and ``algorithm.reward_combination`` with their parameters; whether the estimator
    asks for a scored greedy completion per prompt; the KL estimator when
    the KL goes into the reward (``kl.placement: reward``, else ``None``); the stages between credit and the update;
    the update's loss components."""

    advantage_fn: AdvantageFn
    advantage_params: BaseModel
    combiner: CombineFn
    combiner_params: BaseModel
    greedy_baseline: bool
    kl_in_reward_estimator: Callable[[Tensor, Tensor], Tensor] | None
    stages: BatchStages
    loss: LossComponents
    token_filter: TokenFilterSchedule

    @property
    def scoring(self) -> ObjectiveScoring:
        """The reward combiner and the greedy baseline, as an experience source scores with them."""
        return ObjectiveScoring(self.combiner, self.combiner_params, self.greedy_baseline)


def resolve_components(cfg: GroveConfig, entries: RunEntries, *, skip_zero_advantage: bool) -> RunComponents:
    """The components of ``cfg`` from the front door's ``entries``; ``skip_zero_advantage``: whether leaving
    zero-advantage samples out is exact for this run."""
    a = cfg.algorithm
    advantage = entries.advantage
    return RunComponents(
        advantage_fn=advantage.fn,
        advantage_params=advantage.params,
        combiner=entries.reward_combiner.fn,
        combiner_params=entries.reward_combiner.params,
        greedy_baseline=advantage.entry.needs(Requires.GREEDY_BASELINE),
        kl_in_reward_estimator=entries.kl_estimator.fn if a.kl.placement == "reward" else None,
        stages=resolve_batch_stages(cfg, advantage.fn, advantage.params),
        loss=resolve_loss_components(cfg, entries, skip_zero_advantage=skip_zero_advantage),
        token_filter=resolve_token_filter(cfg),
    )


def resolve_token_filter(cfg: GroveConfig) -> TokenFilterSchedule:
    """The loss tokens each step trains on: D^3S's top ``|A|·H`` on its keep-ratio schedule (``selection.tokens``),
    else every loss token."""
    tokens = cfg.selection.tokens
    if tokens is None:
        return EVERY_LOSS_TOKEN
    return ScheduledTokenSelection(tokens.scope, tokens.ratio, cfg.train.steps)


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


def resolve_loss_components(cfg: GroveConfig, entries: RunEntries, *, skip_zero_advantage: bool) -> LossComponents:
    """What the update needs of the config: the policy loss and its parameters, the loss aggregation, the KL term
    (``kl.placement: loss``), the forward's settings, the zero-advantage skip."""
    a = cfg.algorithm
    return LossComponents(
        policy_loss=entries.policy_loss.fn,
        policy_params=entries.policy_loss.params,
        loss_aggregation=entries.loss_aggregation.fn,
        kl_estimator=entries.kl_estimator.fn if a.kl.coef > 0 and a.kl.placement == "loss" else None,
        temperature=cfg.rollout.temperature if cfg.rollout.temperature > 0 else 1.0,
        max_response_length=cfg.rollout.max_new_tokens,
        logit_cache_bytes=int(cfg.train.logit_cache_mb * 2**20),
        forward=cfg.train.forward,
        precision=cfg.train.precision,
        sequence_count=a.sequence_count,
        skip_zero_advantage=skip_zero_advantage,
    )
