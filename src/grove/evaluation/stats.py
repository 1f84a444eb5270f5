"""Accuracy with a Wilson score confidence interval.

For ``k`` successes in ``n`` trials, ``p = k / n`` and ``z`` the two-sided normal quantile
(``z = Φ⁻¹(1 - (1 - confidence) / 2)``, 1.95996… for 95%), the Wilson interval is::

    center = (p + z² / 2n) / (1 + z² / n)
    half   = z / (1 + z² / n) * sqrt(p (1 - p) / n + z² / 4n²)
    [center - half, center + half]

Unlike the normal ("Wald") interval it stays inside [0, 1] and is sensible at ``p = 0`` or ``1`` and
for small ``n``, which is why eval accuracies are reported with it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from statistics import NormalDist


def wilson_interval(successes: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval ``(low, high)`` for ``successes`` out of ``n``; ``(0.0, 1.0)`` when ``n == 0``."""
    if n < 0 or not 0 <= successes <= n:
        raise ValueError(f"wilson_interval: need 0 <= successes <= n, got successes={successes}, n={n}")
    if not 0 < confidence < 1:
        raise ValueError(f"wilson_interval: confidence must be in (0, 1), got {confidence}")
    if n == 0:
        return 0.0, 1.0
    z = NormalDist().inv_cdf(1 - (1 - confidence) / 2)
    p = successes / n
    z2 = z * z
    denom = 1 + z2 / n
    center = (p + z2 / (2 * n)) / denom
    half = z / denom * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n))
    low = 0.0 if successes == 0 else max(0.0, center - half)
    high = 1.0 if successes == n else min(1.0, center + half)
    return low, high


@dataclass(frozen=True)
class AccuracyReport:
    """Accuracy over ``total`` items with its Wilson interval (``accuracy`` is NaN when ``total == 0``)."""

    correct: int
    total: int
    accuracy: float
    ci_low: float
    ci_high: float
    confidence: float = 0.95

    @classmethod
    def from_counts(cls, correct: int, total: int, confidence: float = 0.95) -> AccuracyReport:
        """Report for ``correct`` out of ``total``."""
        low, high = wilson_interval(correct, total, confidence)
        accuracy = correct / total if total else math.nan
        return cls(correct, total, accuracy, low, high, confidence)

    @classmethod
    def from_scores(
        cls, scores: Iterable[float | None], threshold: float = 1.0, confidence: float = 0.95
    ) -> AccuracyReport:
        """Count a score as correct when ``score >= threshold``; ``None``/NaN scores count as incorrect."""
        values = list(scores)
        correct = sum(1 for s in values if s is not None and not math.isnan(s) and s >= threshold)
        return cls.from_counts(correct, len(values), confidence)

    def __str__(self) -> str:
        """E.g. ``"42.0% (84/200, 95% CI 35.4–48.9%)"``."""
        level = f"{self.confidence * 100:g}% CI"
        acc = "n/a" if self.total == 0 else f"{self.accuracy * 100:.1f}%"
        return (
            f"{acc} ({self.correct}/{self.total}, {level} {self.ci_low * 100:.1f}–{self.ci_high * 100:.1f}%)"
        )
