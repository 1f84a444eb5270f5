"""Held-out agreement of a reward model with its labels, each with a 95% interval.

* **Bradley–Terry**: pairwise accuracy, the share of held-out pairs whose chosen completion scores strictly above
  the rejected one, with its Wilson interval (the pairs are independent rows: :func:`grove.evaluation.stats.wilson_interval`),
  and the mean score margin ``r_c - r_r``.
* **Regression**, per head, on the held-out rows that give it a label (scores and labels in label units):

  - ``mse/<head>``: mean squared error;
  - ``pearson_r/<head>`` with its interval by Fisher's z-transform: ``z = atanh r``, ``z ± 1.96 / sqrt(n - 3)``, back
    through ``tanh`` (Fisher 1921; assumes roughly bivariate-normal rows);
  - ``pairwise_accuracy/<head>``: over pairs of completions of the same prompt whose labels differ, the share the
    model orders as the labels do (strictly), which is what a group-relative reward needs. Pairs that share a
    completion are not independent, so its interval is a percentile bootstrap over prompts (``rm.bootstrap_samples``
    resamples of the prompts, seeded) rather than a Wilson interval over pairs. When fewer than half of the rows
    share their prompt with another row, every pair of held-out rows with different labels counts instead, and
    rows are resampled.

  Means over the heads (``pearson_r_mean``, ``pairwise_accuracy_mean``, ``mse_mean``) summarise them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from statistics import NormalDist

import torch
from torch import Tensor

from grove.evaluation.stats import wilson_interval

__all__ = ["pairwise_preference_report", "pearson_interval", "ranking_agreement", "regression_report"]

_Z95 = NormalDist().inv_cdf(0.975)


def pairwise_preference_report(chosen: Tensor, rejected: Tensor) -> dict[str, float]:
    """Pairwise accuracy (strictly higher chosen score), its Wilson interval and the mean margin."""
    n = int(chosen.numel())
    correct = int((chosen > rejected).sum())
    low, high = wilson_interval(correct, n)
    return {
        "pairwise_accuracy": correct / n if n else math.nan, "pairwise_ci_low": low, "pairwise_ci_high": high,
        "pairs_correct": float(correct), "pairs": float(n),
        "margin_mean": float((chosen - rejected).double().mean()) if n else math.nan,
    }


def pearson_interval(x: Tensor, y: Tensor) -> tuple[float, float, float]:
    """Pearson's r of ``x`` and ``y`` and its 95% interval (Fisher z); NaN where undefined (n < 4 for the
    interval, a constant series for r)."""
    x, y = x.double(), y.double()
    n = int(x.numel())
    if n < 2:
        return math.nan, math.nan, math.nan
    dx, dy = x - x.mean(), y - y.mean()
    denominator = float((dx.square().sum() * dy.square().sum()).sqrt())
    if denominator == 0.0:
        return math.nan, math.nan, math.nan
    r = max(-1.0, min(1.0, float((dx * dy).sum()) / denominator))
    if n < 4:
        return r, math.nan, math.nan
    z = math.atanh(max(-1 + 1e-12, min(1 - 1e-12, r)))
    half = _Z95 / math.sqrt(n - 3)
    return r, math.tanh(z - half), math.tanh(z + half)


def ranking_agreement(
    scores: Tensor, labels: Tensor, groups: Tensor, samples: int, seed: int
) -> tuple[float, float, float, int]:
    """``(accuracy, ci_low, ci_high, pairs)``: the share of pairs with different labels that the scores order the
    same way, within groups (prompts), else over all rows (see the module docstring); bootstrap interval."""
    n = int(scores.numel())
    upper = torch.ones(n, n, dtype=torch.bool).triu(1)
    differ = (labels[:, None] - labels[None, :]).abs() > 1e-12
    agree = ((scores[:, None] - scores[None, :]) * (labels[:, None] - labels[None, :]) > 0).double()
    same_group = groups[:, None] == groups[None, :]
    within = upper & differ & same_group
    generator = torch.Generator().manual_seed(seed)
    _, cluster, sizes = torch.unique(groups, return_inverse=True, return_counts=True)
    if 2 * int((sizes[cluster] > 1).sum()) >= n and bool(within.any()):  # most rows share their prompt
        k = int(cluster.max()) + 1
        correct = torch.zeros(k, dtype=torch.float64).index_add_(0, cluster, (agree * within).sum(1))
        total = torch.zeros(k, dtype=torch.float64).index_add_(0, cluster, within.double().sum(1))
        draws = torch.randint(k, (samples, k), generator=generator)
        weights = torch.zeros(samples, k, dtype=torch.float64).scatter_add_(1, draws, torch.ones_like(draws, dtype=torch.float64))
        boot = (weights @ correct) / (weights @ total).clamp(min=1e-12)
        boot = boot[(weights @ total) > 0]
        pairs = int(within.sum())
        accuracy = float(correct.sum() / total.sum())
    else:
        valid = (upper & differ).double()
        pairs = int(valid.sum())
        if pairs == 0:
            return math.nan, math.nan, math.nan, 0
        accuracy = float((agree * valid).sum() / pairs)
        draws = torch.randint(n, (samples, n), generator=generator)
        weights = torch.zeros(samples, n, dtype=torch.float64).scatter_add_(1, draws, torch.ones_like(draws, dtype=torch.float64))
        total = ((weights @ valid) * weights).sum(1)
        boot = (((weights @ (agree * valid)) * weights).sum(1) / total.clamp(min=1e-12))[total > 0]
    if boot.numel() == 0:
        return accuracy, math.nan, math.nan, pairs
    low, high = torch.quantile(boot, torch.tensor([0.025, 0.975], dtype=torch.float64)).tolist()
    return accuracy, low, high, pairs


def regression_report(
    scores: Tensor, labels: Tensor, groups: Tensor, heads: Sequence[str], samples: int, seed: int
) -> dict[str, float]:
    """Per-head MSE, Pearson r and pairwise accuracy with their 95% intervals, and their means over heads
    (``scores`` and ``labels`` ``[N, H]`` in label units, ``NaN`` where a row has no label)."""
    record: dict[str, float] = {}
    for h, head in enumerate(heads):
        present = ~torch.isnan(labels[:, h])
        s, y, g = scores[present, h].double(), labels[present, h].double(), groups[present]
        n = int(present.sum())
        r, r_low, r_high = pearson_interval(s, y)
        accuracy, a_low, a_high, pairs = ranking_agreement(s, y, g, samples, seed + h)
        record.update({
            f"mse/{head}": float((s - y).square().mean()) if n else math.nan,
            f"pearson_r/{head}": r, f"pearson_ci_low/{head}": r_low, f"pearson_ci_high/{head}": r_high,
            f"pairwise_accuracy/{head}": accuracy, f"pairwise_ci_low/{head}": a_low,
            f"pairwise_ci_high/{head}": a_high, f"pairs/{head}": float(pairs), f"labelled/{head}": float(n),
        })
    for name in ("mse", "pearson_r", "pairwise_accuracy"):
        values = [record[f"{name}/{head}"] for head in heads if not math.isnan(record[f"{name}/{head}"])]
        record[f"{name}_mean"] = sum(values) / len(values) if values else math.nan
    return record
