"""The experience-source seam: what the trainer asks for each step, and what a source needs to answer.

An :class:`ExperienceSource` turns a step number into a :class:`ScoredExperience` (this rank's typed
:class:`grove.batch.RolloutBatch` with its rewards, timings, statistics and the samples to log; the trainer's
credit assignment, :mod:`grove.pipeline.credit`, turns it into advantages), evaluates the policy on held-out data, and carries its own position (which prompts
or tasks come next) in the checkpoint. The trainer has no other view of where experience comes from:
single-turn completions (:mod:`grove.experience.completions`) and multi-turn environment episodes
(:mod:`grove.experience.environment`) are two registered sources, chosen by ``experience_source``. A
step's sample count is whatever the source returns (agent episodes vary in length).

A new source is one file: a factory ``fn(context: SourceContext) -> ExperienceSource`` registered in
:data:`EXPERIENCE_SOURCES`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from grove.config import GroveConfig
from grove.distributed.world import World
from grove.evaluation.evaluate import EvalResult
from grove.pipeline.collect import ObjectiveScoring
from grove.pipeline.credit import ScoredExperience
from grove.registry import EXPERIENCE_SOURCES
from grove.rollout.engine import RolloutEngine

__all__ = ["EXPERIENCE_SOURCES", "ExperienceSource", "ScoredExperience", "SourceContext", "build_experience_source"]


@dataclass(frozen=True)
class SourceContext:
    """Everything a source may use, built once by the trainer. ``scoring``: the resolved reward aggregator and greedy
    baseline a training step scores with (unused outside training). ``world``: the ranks the step's groups are shared among
    (a source generates only this rank's share and gathers the scored batch, :mod:`grove.distributed`).
    ``training``: ``False`` outside a training run (evaluation only: the training split is not checked).
    """

    cfg: GroveConfig
    engine: RolloutEngine
    tokenizer: Any
    generator: torch.Generator
    scoring: ObjectiveScoring = field(default_factory=ObjectiveScoring)
    world: World = field(default_factory=World)
    training: bool = True

    @classmethod
    def for_evaluation(cls, cfg: GroveConfig, engine: RolloutEngine, tokenizer: Any) -> SourceContext:
        """A context outside training (``grove eval``, benchmarks): one process, a generator seeded with
        ``cfg.seed``; no training step, so the default scoring."""
        return cls(cfg=cfg, engine=engine, tokenizer=tokenizer, generator=torch.Generator().manual_seed(cfg.seed),
                   training=False)


class ExperienceSource(Protocol):
    """Produces each step's scored experience and evaluates the policy; its position is checkpointed."""

    def collect(self, step: int) -> ScoredExperience:
        """This rank's scored experience of training step ``step``."""
        ...

    def evaluate(self, step: int | None = None) -> EvalResult:
        """Held-out evaluation; ``step``: the training step reached (0: before training; ``None``: no training run),
        for messages."""
        ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


def build_experience_source(context: SourceContext) -> ExperienceSource:
    """The source ``context.cfg`` selects (``experience_source``; ``auto`` = environment when ``env`` is set)."""
    return EXPERIENCE_SOURCES.get(context.cfg.source_id)(context)
