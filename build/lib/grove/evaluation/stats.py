"""Accuracy with a Wilson score confidence interval; sampled accuracy and pass@k over several completions per item.

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
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any


def wilson_interval(successes: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval ``(low, high)`` for ``successes`` out of ``n``; ``(0.0, 1.0)`` when ``n == 0``."""
    if n < 0 or not 0 <= successes <= n:
        raise ValueError(f"wilson_interval: need 0 <= successes <= n, got successes={successes}, n={n}")
    if not 0 < confidence < 1:
        raise ValueError(f"wilson_interval: confidence must be in (0, 1), got {confidence}")
    if n == 0:
        return 0.0, 1.0
    return _wilson_from_rate(successes / n, n, confidence)


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


def pass_at_k(samples: int, correct: int, k: int) -> float:
    """Unbiased estimate of pass@k from ``correct`` of ``samples`` completions of one item (Chen et al., 2021,
    "Evaluating Large Language Models Trained on Code", eq. 1): ``1 - C(n - c, k) / C(n, k)``, the chance that
    ``k`` completions drawn without replacement from the ``n`` include a correct one."""
    if not 0 <= correct <= samples or not 1 <= k <= samples:
        raise ValueError(f"pass_at_k: need 0 <= correct <= samples and 1 <= k <= samples, got {correct}, {samples}, {k}")
    if samples - correct < k:
        return 1.0
    return 1.0 - math.comb(samples - correct, k) / math.comb(samples, k)


def pass_at_k_levels(samples: int) -> list[int]:
    """The ``k`` reported for ``samples`` completions per item: 1, 2, 4, … below ``samples``, and ``samples``."""
    levels = [1 << i for i in range(samples.bit_length()) if 1 << i < samples]
    return [*levels, samples]


@dataclass(frozen=True)
class SampledReport:
    """Mean success of ``samples`` sampled completions (or episodes) per item, with a 95 % interval that counts
    the items, not the completions, as the independent draws, and the unbiased pass@k.

    The completions of one item are correlated (an easy item is solved by most of them), so a Wilson interval
    over all ``n·k`` completions would be too narrow. The interval is Wilson's on the effective sample size
    ``n·k / deff``, with Kish's design effect ``deff`` = (variance of the mean of the per-item success rates
    across items) / (binomial variance ``p(1 - p) / (n·k)``), kept between ``n`` and ``n·k`` effective samples
    (Korn and Graubard, 1998, "Confidence intervals for proportions with small expected number of positive
    counts estimated from survey data"). With one completion per item it is the plain Wilson interval; when
    every completion agrees (``p`` 0 or 1) it uses ``n``.
    """

    items: int
    samples: int
    accuracy: float
    ci_low: float
    ci_high: float
    pass_at: dict[int, float]

    @classmethod
    def from_item_counts(cls, correct: Iterable[int], samples: int, confidence: float = 0.95) -> SampledReport:
        counts = list(correct)
        if samples < 1 or any(not 0 <= c <= samples for c in counts):
            raise ValueError(f"SampledReport: need 0 <= correct <= samples for every item, samples={samples}")
        n = len(counts)
        if n == 0:
            return cls(0, samples, math.nan, 0.0, 1.0, {k: math.nan for k in pass_at_k_levels(samples)})
        total = n * samples
        p = sum(counts) / total
        effective = float(n)
        if 0 < p < 1 and n > 1:
            rates = [c / samples for c in counts]
            between = sum((r - p) ** 2 for r in rates) / (n - 1) / n  # variance of the mean of the item rates
            binomial = p * (1 - p) / total
            effective = min(float(total), max(float(n), total * binomial / between)) if between > 0 else float(total)
        low, high = _wilson_from_rate(p, effective, confidence)
        pass_at = {k: sum(pass_at_k(samples, c, k) for c in counts) / n for k in pass_at_k_levels(samples)}
        return cls(n, samples, p, low, high, pass_at)

    def record(self, prefix: str = "sampled/") -> dict[str, float]:
        """``{prefix}accuracy``, its interval, the number of items and samples, and ``{prefix}pass@k``."""
        return {
            f"{prefix}accuracy": self.accuracy,
            f"{prefix}ci_low": self.ci_low,
            f"{prefix}ci_high": self.ci_high,
            f"{prefix}items": float(self.items),
            f"{prefix}samples_per_item": float(self.samples),
            **{f"{prefix}pass@{k}": v for k, v in self.pass_at.items()},
        }

    def __str__(self) -> str:
        """E.g. ``"31.2% of 4 samples per item (50 items, 95% CI 24.0–39.5%), pass@4 62.0%"``."""
        if self.items == 0:
            return "n/a (no items)"
        best = max(self.pass_at)
        return (
            f"{self.accuracy * 100:.1f}% of {self.samples} samples per item ({self.items} items, 95% CI "
            f"{self.ci_low * 100:.1f}–{self.ci_high * 100:.1f}%), pass@{best} {self.pass_at[best] * 100:.1f}%"
        )


def _wilson_from_rate(p: float, n: float, confidence: float) -> tuple[float, float]:
    """The Wilson interval of a rate ``p`` observed over ``n`` (possibly effective, non-integer) trials."""
    z = NormalDist().inv_cdf(1 - (1 - confidence) / 2)
    z2 = z * z
    denom = 1 + z2 / n
    center = (p + z2 / (2 * n)) / denom
    half = z / denom * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n))
    return (0.0 if p == 0 else max(0.0, center - half)), (1.0 if p == 1 else min(1.0, center + half))


def describe_sampled(record: Mapping[str, Any], prefix: str = "sampled/") -> str | None:
    """One line for the sampled evaluation in an evaluation record (:meth:`SampledReport.record`), or ``None``
    when the record has none: e.g. ``"sampled (4 per item, T 1.0): 31.2% (95% CI 24.0–39.5%), pass@4 62.0%"``."""
    if f"{prefix}accuracy" not in record or not isinstance(record[f"{prefix}accuracy"], int | float):
        return None
    levels = sorted(int(k[len(prefix) + 5 :]) for k in record if k.startswith(f"{prefix}pass@"))
    best = f", pass@{levels[-1]} {100 * record[f'{prefix}pass@{levels[-1]}']:.1f}%" if levels and levels[-1] > 1 else ""
    temperature = f", T {record[f'{prefix}temperature']:g}" if f"{prefix}temperature" in record else ""
    return (
        f"sampled ({record[f'{prefix}samples_per_item']:.0f} per item{temperature}): "
        f"{100 * record[f'{prefix}accuracy']:.1f}% (95% CI {100 * record[f'{prefix}ci_low']:.1f}–"
        f"{100 * record[f'{prefix}ci_high']:.1f}%){best}"
    )


@dataclass(frozen=True)
class PairedDifference:
    """The mean difference ``a - b`` of two policies' success on the same items, with a 95 % interval over the
    items: per item the difference of the two success rates (each over its repeats: samples or seeds), then the
    normal interval of their mean, ``mean ± z·sd/√n``. Pairing by item removes the variation between easy and
    hard items, which both policies share, so the interval is narrower than the difference of two independent
    intervals (e.g. "GiGPO − GRPO on the same 100 held-out maps")."""

    items: int
    difference: float
    ci_low: float
    ci_high: float

    @classmethod
    def from_item_rates(
        cls, a: Iterable[float], b: Iterable[float], confidence: float = 0.95
    ) -> PairedDifference:
        xs, ys = list(a), list(b)
        if len(xs) != len(ys):
            raise ValueError(f"PairedDifference: {len(xs)} items against {len(ys)}; pair the same items")
        n = len(xs)
        if n == 0:
            return cls(0, math.nan, math.nan, math.nan)
        diffs = [x - y for x, y in zip(xs, ys, strict=True)]
        mean = sum(diffs) / n
        if n == 1:
            return cls(1, mean, -1.0, 1.0)
        sd = math.sqrt(sum((d - mean) ** 2 for d in diffs) / (n - 1))
        half = NormalDist().inv_cdf(1 - (1 - confidence) / 2) * sd / math.sqrt(n)
        return cls(n, mean, max(-1.0, mean - half), min(1.0, mean + half))

    def __str__(self) -> str:
        """E.g. ``"+8.0 points (95% CI +1.2 to +14.8, 100 items)"``."""
        return (
            f"{100 * self.difference:+.1f} points (95% CI {100 * self.ci_low:+.1f} to {100 * self.ci_high:+.1f}, "
            f"{self.items} items)"
        )
