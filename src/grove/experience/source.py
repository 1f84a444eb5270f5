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
from typing import TYPE_CHECKING, Any, Protocol

import torch

from grove.config import GroveConfig
from grove.distributed.world import World
from grove.evaluation.evaluate import EvalResult
from grove.experience.completion_collection import ObjectiveScoring
from grove.pipeline.credit import ScoredExperience
from grove.registry import EXPERIENCE_SOURCES
from grove.rollout.engine import RolloutEngine

if TYPE_CHECKING:
    from grove.registry import Entry

__all__ = [
    "EXPERIENCE_SOURCES", "ExperienceSource", "ScoredExperience", "SourceContext", "SourceEntries", "SourcePlan",
    "build_experience_source",
]


class SourceEntries(Protocol):
    """The registry entries a source builds from, each looked up once by the front door (``None``: not in this
    run); see :class:`grove.resolve.RunEntries`."""

    @property
    def task(self) -> Any: ...

    @property
    def environment(self) -> Any: ...

    @property
    def action_parser(self) -> Any: ...

    @property
    def rewards(self) -> tuple[Any, ...]: ...

    @property
    def experience_source(self) -> Entry: ...

    @property
    def step_annotators(self) -> tuple[Entry, ...]: ...


class SourcePlan(Protocol):
    """What a source reads of the front door's :class:`grove.resolve.RunPlan`: the config, the entries, the rewards
    as the run calls them, and how a training step scores its samples."""

    @property
    def cfg(self) -> GroveConfig: ...

    @property
    def entries(self) -> SourceEntries: ...

    @property
    def rewards(self) -> tuple[Any, ...]: ...

    @property
    def scoring(self) -> ObjectiveScoring: ...


@dataclass(frozen=True)
class SourceContext:
    """Everything a source may use, built once by the run. ``plan``: the config resolved by the front door (the
    source's task or environment, its rewards as the run calls them, the reward combiner and greedy baseline a
    training step scores with). ``world``: the ranks the step's groups are shared among (a source generates only this
    rank's share and gathers the scored batch, :mod:`grove.distributed`). ``training``: ``False`` outside a training
    run (evaluation only: the training split is not checked).
    """

    plan: SourcePlan
    engine: RolloutEngine
    tokenizer: Any
    generator: torch.Generator
    world: World = field(default_factory=World)
    training: bool = True

    @property
    def cfg(self) -> GroveConfig:
        return self.plan.cfg

    @property
    def scoring(self) -> ObjectiveScoring:
        """How a training step scores its samples (the default outside training)."""
        return self.plan.scoring if self.training else ObjectiveScoring()

    @classmethod
    def for_evaluation(cls, plan: SourcePlan, engine: RolloutEngine, tokenizer: Any) -> SourceContext:
        """A context outside training (``grove eval``, benchmarks; ``plan``: ``grove.resolve.resolve(cfg, "eval")``):
        one process, a generator seeded with the config's seed."""
        return cls(plan=plan, engine=engine, tokenizer=tokenizer,
                   generator=torch.Generator().manual_seed(plan.cfg.seed), training=False)


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
    """The source the plan resolved (``experience_source``; ``auto`` = environment when ``env`` is set)."""
    return context.plan.entries.experience_source.fn(context)
