"""What a config implies rather than states about generation: the bf16 generation copy and the ``rollout`` section an
engine is built with. What its components imply (the reference model, the zero-advantage skip, the weights its
rewards load) is derived by the front door (:class:`grove.resolve.RunPlan`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from grove.config.schema import GroveConfig
    from grove.config.sections import RolloutConfig

__all__ = ["generates_from_bf16_copy", "generation_rollout"]


def generates_from_bf16_copy(cfg: GroveConfig) -> bool:
    """Whether rollouts decode from a bfloat16 copy of the weights: ``rollout.bf16_weights``, or, when that is
    null (the default), whether ``train.precision`` is bf16 (docs/benchmarks.md: the faster decode
    at the precision the update already computes in)."""
    if cfg.rollout.bf16_weights is not None:
        return cfg.rollout.bf16_weights
    return cfg.train.precision == "bf16"


def generation_rollout(cfg: GroveConfig) -> RolloutConfig:
    """The ``rollout`` section the run's engine is built with: ``bf16_weights`` resolved
    (:func:`generates_from_bf16_copy`), so an engine that keeps its own copy of the weights knows its dtype."""
    return cfg.rollout.model_copy(update={"bf16_weights": generates_from_bf16_copy(cfg)})
