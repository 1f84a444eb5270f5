"""The experience-source seam: what the trainer asks for each step, and what a source needs to answer.

An :class:`ExperienceSource` turns a step number into a :class:`StepExperience` (a typed
:class:`grove.batch.RolloutBatch` with advantages, the scores they came from, timings, statistics and
the samples to log), evaluates the policy on held-out data, and carries its own position (which prompts
or tasks come next) in the checkpoint. The trainer has no other view of where experience comes from:
single-turn completions (:mod:`grove.experience.completions`) and multi-turn environment episodes
(:mod:`grove.experience.environment`) are two registered sources, chosen by ``experience_source``. A
step's sample count is whatever the source returns (agent episodes vary in length).

A new source is one file: a factory ``fn(context: SourceContext) -> ExperienceSource`` registered in
:data:`EXPERIENCE_SOURCES`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch
from pydantic import BaseModel
from torch import Tensor

from grove.batch import RolloutBatch
from grove.config import GroveConfig
from grove.core.advantages import AdvantageFn
from grove.distributed.world import World
from grove.evaluation.evaluate import EvalResult
from grove.pipeline.collect import KLInReward, StepExperience
from grove.registry import ADVANTAGE_ESTIMATORS, EXPERIENCE_SOURCES
from grove.rollout.engine import RolloutEngine

__all__ = ["EXPERIENCE_SOURCES", "ExperienceSource", "SourceContext", "StepExperience", "build_experience_source"]


@dataclass(frozen=True)
class SourceContext:
    """Everything a source may use, built once by the trainer.

    ``reference`` computes reference log-probs of a batch (``None`` when no reference model is loaded);
    ``kl_in_reward`` returns this step's KL-in-reward setting (``None`` unless ``kl.placement: reward``;
    its coefficient can change between steps). ``world``: the ranks the step's groups are shared among
    (a source generates only this rank's share and gathers the scored batch, :mod:`grove.distributed`).
    ``training``: ``False`` outside a training run (evaluation only: the training split is not checked).
    """

    cfg: GroveConfig
    engine: RolloutEngine
    tokenizer: Any
    generator: torch.Generator
    advantage_fn: AdvantageFn
    advantage_params: BaseModel
    reference: Callable[[RolloutBatch], Tensor] | None
    kl_in_reward: Callable[[], KLInReward | None]
    world: World = field(default_factory=World)
    training: bool = True

    @classmethod
    def for_evaluation(cls, cfg: GroveConfig, engine: RolloutEngine, tokenizer: Any) -> SourceContext:
        """A context outside training (``grove eval``, benchmarks): the config's estimator, no reference model,
        no KL in the reward, a generator seeded with ``cfg.seed``."""
        advantage = cfg.algorithm.advantage
        return cls(
            cfg=cfg,
            engine=engine,
            tokenizer=tokenizer,
            generator=torch.Generator().manual_seed(cfg.seed),
            advantage_fn=ADVANTAGE_ESTIMATORS.get(advantage.id),
            advantage_params=advantage.validated(ADVANTAGE_ESTIMATORS),
            reference=None,
            kl_in_reward=lambda: None,
            training=False,
        )


class ExperienceSource(Protocol):
    """Produces each step's experience and evaluates the policy; its position is checkpointed."""

    def collect(self, step: int) -> StepExperience: ...

    def evaluate(self, step: int | None = None) -> EvalResult:
        """Held-out evaluation; ``step``: the training step reached (0: before training; ``None``: no training run),
        for messages."""
        ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


def build_experience_source(context: SourceContext) -> ExperienceSource:
    """The source ``context.cfg`` selects (``experience_source``; ``auto`` = environment when ``env`` is set)."""
    return EXPERIENCE_SOURCES.get(context.cfg.source_id)(context)
