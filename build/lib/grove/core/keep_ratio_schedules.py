"""Keep-ratio schedules for dynamic down-sampling.

D^3S ("Learning More with Less: A Dynamic Dual-Level Down-Sampling Framework for Efficient Policy
Optimization", 2025) uses a curriculum-style dynamic schedule: aggressive down-sampling early (a
small keep ratio) that is relaxed gradually, to avoid overfitting to high-signal data. A schedule
maps the training step to a keep ratio in ``(0, 1]``: ``start`` at step 0, ``end`` from step
``steps`` on (clamped after), and in between

* ``constant``: ``start`` throughout (``end`` is not used);
* ``linear``: ``start + (end - start) * t`` with ``t = step / steps``;
* ``cosine``: ``start + (end - start) * (1 - cos(pi * t)) / 2`` (slow at both ends);
* ``step``: piecewise constant in ``stages`` equal stages: stage ``s = floor(t * stages)`` has
  ``start + (end - start) * s / (stages - 1)``, so the first stage is ``start`` and the last ``end``.

All are monotone from ``start`` to ``end`` (either direction). :class:`KeepRatioSchedule` is the
pydantic form the config embeds; :func:`ratio_at` the plain function.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = ["KEEP_RATIO_SCHEDULES", "KeepRatioSchedule", "ScheduleKind", "check_keep_ratio", "ratio_at"]

ScheduleKind = Literal["constant", "linear", "cosine", "step"]


def _constant(t: float, start: float, end: float, stages: int) -> float:
    return start


def _linear(t: float, start: float, end: float, stages: int) -> float:
    return start + (end - start) * t


def _cosine(t: float, start: float, end: float, stages: int) -> float:
    return start + (end - start) * (1.0 - math.cos(math.pi * t)) / 2.0


def _step(t: float, start: float, end: float, stages: int) -> float:
    stage = min(math.floor(t * stages), stages - 1)
    return start + (end - start) * stage / (stages - 1)


# kind -> f(t, start, end, stages), t = min(step / steps, 1) in [0, 1]
KEEP_RATIO_SCHEDULES: dict[str, Callable[[float, float, float, int], float]] = {
    "constant": _constant,
    "linear": _linear,
    "cosine": _cosine,
    "step": _step,
}


def check_keep_ratio(value: float, name: str = "ratio") -> None:
    """Raise ``ValueError`` naming ``name`` unless the keep ratio ``value`` lies in ``(0, 1]``."""
    if not 0.0 < value <= 1.0:
        raise ValueError(f"{name} must be in (0, 1], got {value}")


def ratio_at(
    step: int,
    *,
    kind: ScheduleKind,
    start: float,
    end: float,
    steps: int,
    stages: int = 4,
) -> float:
    """The keep ratio at training step ``step >= 0`` (0-based): ``start`` at 0, ``end`` at ``>= steps``.

    ``kind`` is one of :data:`KEEP_RATIO_SCHEDULES`; ``start`` and ``end`` must be in ``(0, 1]``,
    ``steps >= 1``, and ``stages >= 2`` (used by ``step`` only). Raises ``ValueError`` naming the
    offending argument.
    """
    if kind not in KEEP_RATIO_SCHEDULES:
        raise ValueError(f"kind must be one of {sorted(KEEP_RATIO_SCHEDULES)}, got {kind!r}")
    check_keep_ratio(start, "start")
    check_keep_ratio(end, "end")
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    if stages < 2:
        raise ValueError(f"stages must be >= 2, got {stages}")
    if step < 0:
        raise ValueError(f"step must be >= 0, got {step}")
    t = min(step / steps, 1.0)
    value = KEEP_RATIO_SCHEDULES[kind](t, start, end, stages)
    # exact end value once reached, and never outside [min, max] of the two through rounding
    if t >= 1.0 and kind != "constant":
        return end
    return min(max(value, min(start, end)), max(start, end))


class KeepRatioSchedule(BaseModel):
    """A keep-ratio schedule (D^3S's dynamic down-sampling): ``start`` at step 0 → ``end`` at ``steps``.

    A bare number validates as a constant schedule (``0.5`` ≡ ``{kind: constant, start: 0.5}``).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: ScheduleKind = Field(
        "cosine", description="constant | linear | cosine | step (piecewise constant in `stages`)."
    )
    start: float = Field(0.5, gt=0, le=1, description="Keep ratio at step 0 (aggressive early).")
    end: float = Field(1.0, gt=0, le=1, description="Keep ratio from step `steps` on (unused by constant).")
    steps: int | None = Field(
        None, ge=1, description="Training steps over which start moves to end (null: the run's train.steps)."
    )
    stages: int = Field(4, ge=2, description="Number of equal constant stages of kind `step`.")

    @model_validator(mode="before")
    @classmethod
    def _number_is_constant(cls, data: Any) -> Any:
        if isinstance(data, int | float) and not isinstance(data, bool):
            return {"kind": "constant", "start": data, "end": data}
        return data

    def at(self, step: int, default_steps: int | None = None) -> float:
        """The keep ratio at training step ``step`` (0-based); ``default_steps`` stands in for ``steps: null``."""
        steps = self.steps if self.steps is not None else default_steps
        if steps is None and self.kind == "constant":
            steps = 1  # a constant ratio needs no horizon
        if steps is None:
            raise ValueError("steps is null and no default_steps was given (the config layer passes train.steps)")
        return ratio_at(step, kind=self.kind, start=self.start, end=self.end, steps=steps, stages=self.stages)
