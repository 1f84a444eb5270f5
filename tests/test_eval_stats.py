"""Wilson score intervals and the accuracy report."""

from __future__ import annotations

import math

import pytest

from grove.evaluation.stats import AccuracyReport, wilson_interval

Z95 = 1.959963984540054


def _wilson_by_hand(k: int, n: int, z: float = Z95) -> tuple[float, float]:
    p = k / n
    center = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return center - half, center + half


@pytest.mark.parametrize(
    ("k", "n", "low", "high"),
    [
        # 0/10: the lower bound is 0, the upper bound z² / (n + z²)
        (0, 10, 0.0, Z95**2 / (10 + Z95**2)),
        (5, 10, 0.2365930905, 0.7634069095),
        (84, 200, 0.3537359916, 0.4892792606),
        (10, 10, 1 - Z95**2 / (10 + Z95**2), 1.0),
        (1, 1, 1 / (1 + Z95**2), 1.0),  # n = 1: the lower bound is 1 / (1 + z²)
    ],
)
def test_wilson_known_values(k, n, low, high):
    lo, hi = wilson_interval(k, n)
    assert lo == pytest.approx(low, abs=1e-9) and hi == pytest.approx(high, abs=1e-9)


def test_wilson_matches_formula_and_is_symmetric():
    for k, n in [(3, 7), (50, 100), (999, 1000)]:
        assert wilson_interval(k, n) == pytest.approx(_wilson_by_hand(k, n))
        lo, hi = wilson_interval(k, n)
        lo2, hi2 = wilson_interval(n - k, n)
        assert (lo, hi) == pytest.approx((1 - hi2, 1 - lo2))


def test_wilson_confidence_levels():
    z99 = 2.5758293035489004
    assert wilson_interval(84, 200, 0.99) == pytest.approx(_wilson_by_hand(84, 200, z99))
    lo95, hi95 = wilson_interval(84, 200)
    lo99, hi99 = wilson_interval(84, 200, 0.99)
    assert lo99 < lo95 and hi99 > hi95


def test_wilson_edge_cases():
    assert wilson_interval(0, 0) == (0.0, 1.0)
    for bad in [(-1, 5), (6, 5), (0, -1)]:
        with pytest.raises(ValueError, match="successes <= n"):
            wilson_interval(*bad)
    for conf in (0.0, 1.0, 1.5):
        with pytest.raises(ValueError, match="confidence"):
            wilson_interval(1, 2, conf)


def test_accuracy_report_str_and_fields():
    report = AccuracyReport.from_counts(84, 200)
    assert str(report) == "42.0% (84/200, 95% CI 35.4–48.9%)"
    assert (report.correct, report.total, report.accuracy) == (84, 200, 0.42)
    assert str(AccuracyReport.from_counts(0, 10)) == "0.0% (0/10, 95% CI 0.0–27.8%)"
    assert str(AccuracyReport.from_counts(5, 10, confidence=0.9)).startswith("50.0% (5/10, 90% CI ")


def test_accuracy_report_from_scores():
    report = AccuracyReport.from_scores([1.0, 0.0, 1.0, 0.5, None, math.nan])
    assert (report.correct, report.total) == (2, 6)
    assert AccuracyReport.from_scores([0.5, 0.6], threshold=0.5).correct == 2
    empty = AccuracyReport.from_scores([])
    assert empty.total == 0 and math.isnan(empty.accuracy) and (empty.ci_low, empty.ci_high) == (0.0, 1.0)
    assert str(empty) == "n/a (0/0, 95% CI 0.0–100.0%)"
