"""Coefficient controllers whose state is part of the checkpoint.

* KL: fixed β, or the adaptive controller of Ziegler et al. 2019 ("Fine-Tuning Language Models from
  Human Preferences", the PPO-style target KL): ``β ← β · (1 + clip((KL − target)/target, ±0.2) · n/horizon)``
  where ``n`` is the number of samples in the step.
* Entropy: fixed coefficient, or the adaptive scheme of Skywork-OR1 ("Skywork Open Reasoner 1
  Technical Report"): the bonus is active only while the entropy is below ``target``, and its
  coefficient moves by ``step`` towards more bonus when entropy is below target, less when above,
  clamped to ``[0, max_coef]``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass
class KLController:
    coef: float
    adaptive: bool = False
    target: float = 0.1
    horizon: int = 10_000

    def update(self, observed_kl: float, num_samples: int) -> None:
        if not self.adaptive:
            return
        error = max(-0.2, min(0.2, (observed_kl - self.target) / self.target))
        self.coef *= 1.0 + error * num_samples / self.horizon

    def state_dict(self) -> dict:
        return asdict(self)

    def load_state_dict(self, state: dict) -> None:
        self.coef = float(state["coef"])


@dataclass
class EntropyController:
    coef: float
    target: float | None = None
    step: float = 0.005
    max_coef: float = 0.05
    last_entropy: float | None = None

    def active_coef(self) -> float:
        """The coefficient to use now (0 while an adaptive controller's last entropy is above target)."""
        if self.target is None or self.last_entropy is None:
            return self.coef
        return self.coef if self.last_entropy < self.target else 0.0

    def update(self, entropy: float) -> None:
        self.last_entropy = entropy
        if self.target is None:
            return
        delta = self.step if entropy < self.target else -self.step
        self.coef = min(self.max_coef, max(0.0, self.coef + delta))

    def state_dict(self) -> dict:
        return asdict(self)

    def load_state_dict(self, state: dict) -> None:
        self.coef = float(state["coef"])
        self.last_entropy = state["last_entropy"]
