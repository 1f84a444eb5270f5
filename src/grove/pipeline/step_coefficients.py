"""Each step's loss coefficients, and what moves them between steps.

A training stage gives the trainer one :class:`StepCoefficients`: it says the coefficients of step ``t``
(:class:`grove.pipeline.update.Coefficients`), observes the step's update and statistics, logs its values, and
names the controllers whose state a checkpoint holds.

* :class:`ControlledCoefficients` (reinforcement learning): the KL coefficient β and the entropy bonus from their
  controllers (:mod:`grove.pipeline.coefficients`). β multiplies the KL term of the loss with
  ``kl.placement: loss``; with ``kl.placement: reward`` the credit assignment reads it
  (:meth:`ControlledCoefficients.kl_in_reward`) and the loss has no KL term.
* :class:`FixedCoefficients` (supervised fine-tuning, reward models): no KL, no entropy bonus.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from torch import Tensor

from grove.pipeline.coefficients import EntropyController, KLController
from grove.pipeline.credit import KLInReward
from grove.pipeline.update_seam import Coefficients

__all__ = ["ControlledCoefficients", "FixedCoefficients", "StepCoefficients"]


class StepCoefficients(Protocol):
    """The loss coefficients of each step and the controllers behind them."""

    @property
    def controllers(self) -> dict[str, Any]:
        """Name → object with ``state_dict`` / ``load_state_dict``, held in the checkpoint."""
        ...

    def at(self, step: int) -> Coefficients:
        """The coefficients of training step ``step`` (1-based)."""
        ...

    def observe(self, update: dict[str, float], stats: dict[str, float], trained_samples: int) -> None:
        """After step's update: its metrics, the credit's statistics and how many samples were trained on."""
        ...

    def metrics(self, coefs: Coefficients) -> dict[str, float]:
        """What the step's metrics record of ``coefs``."""
        ...


@dataclass(frozen=True)
class FixedCoefficients:
    """No KL term, no entropy bonus: the coefficients of supervised fine-tuning and reward-model training."""

    controllers: dict[str, Any] = field(default_factory=dict)

    def at(self, step: int) -> Coefficients:
        return Coefficients()

    def observe(self, update: dict[str, float], stats: dict[str, float], trained_samples: int) -> None:
        return None

    def metrics(self, coefs: Coefficients) -> dict[str, float]:
        return {}


@dataclass(frozen=True)
class ControlledCoefficients:
    """β from ``kl`` (in the loss when ``kl_in_loss``), the entropy bonus from ``entropy``.
    ``kl_in_reward_estimator``: the KL estimator of ``kl.placement: reward`` (``None`` otherwise)."""

    kl: KLController
    entropy: EntropyController
    kl_in_loss: bool
    kl_in_reward_estimator: Callable[[Tensor, Tensor], Tensor] | None = None

    @property
    def controllers(self) -> dict[str, Any]:
        return {"kl": self.kl, "entropy": self.entropy}

    def at(self, step: int) -> Coefficients:
        return Coefficients(
            kl=self.kl.coef if self.kl_in_loss else 0.0,
            entropy=self.entropy.active_coef(),
        )

    def kl_in_reward(self) -> KLInReward | None:
        """This step's KL-in-reward setting for the credit assignment (``None`` unless ``kl.placement: reward``)."""
        return None if self.kl_in_reward_estimator is None else KLInReward(self.kl_in_reward_estimator, self.kl.coef)

    def observe(self, update: dict[str, float], stats: dict[str, float], trained_samples: int) -> None:
        """The adaptive KL controller sees the loss's KL (or the reward's), the entropy controller the entropy."""
        observed_kl = update.get("kl", stats.get("kl_in_reward"))
        if observed_kl is not None:
            self.kl.update(observed_kl, trained_samples)
        entropy = update.get("entropy", float("nan"))
        if math.isfinite(entropy):
            self.entropy.update(entropy)

    def metrics(self, coefs: Coefficients) -> dict[str, float]:
        return {"kl_coef": self.kl.coef, "entropy_coef": coefs.entropy}
