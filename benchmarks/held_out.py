"""Held-out results of comparison runs, item by item: intervals per seed, pooled over seeds, and paired differences.

Every evaluation of a run writes ``eval_samples_stepNNNNNN.jsonl``: one row per greedy answer (or episode) and,
with ``eval.samples``, one per sampled one (``"eval_mode": "sampled"``). An *item* is a held-out task (an
environment's ``task_id``, a task example's ``item`` index, or in older runs its prompt); its outcome is ``won``
(environments) or ``correct`` (tasks).

Three intervals, each answering its own question:

* **per seed**: one run's success with the interval over items (Wilson for greedy; for sampled episodes the
  design-effect Wilson interval of :class:`grove.evaluation.stats.SampledReport`, since an item's samples agree);
* **pooled**: a method's success over all its seeds, every item counted ``seeds × samples`` times, with the same
  interval over items (it says how well the items pin the methods' mean down, given these seeds);
* **difference**: method A − method B paired by item (each item's success rate over all seeds and samples of
  each method, :class:`grove.evaluation.stats.PairedDifference`), and across seeds the mean of the per-seed
  differences with a Student-t interval (it carries the run-to-run variation that the item intervals leave out,
  and is wide with few seeds).
"""

from __future__ import annotations

import json
import math
import re
import statistics
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from grove.evaluation.stats import PairedDifference, SampledReport, wilson_interval

MODES = ("greedy", "sampled")


@dataclass(frozen=True)
class HeldOut:
    """One evaluation of one run: per mode, each item's outcomes (True = success)."""

    step: int
    outcomes: dict[str, dict[str, list[bool]]]

    def report(self, mode: str) -> SampledReport:
        counts = self.outcomes[mode]
        per_item = {len(v) for v in counts.values()}
        if len(per_item) != 1:
            raise ValueError(f"step {self.step}: items of the {mode} evaluation have {sorted(per_item)} outcomes")
        return SampledReport.from_item_counts([sum(v) for v in counts.values()], per_item.pop())


def _item_of(row: dict) -> str:
    """The held-out item a row answers: the environment task, else the evaluation's example index (prompts of the
    same text with other images are other items), else (older runs) the prompt."""
    if "task_id" in row:
        return str(row["task_id"])
    return f"item {row['item']}" if "item" in row else row["prompt"]


def evaluation_steps(run_dir: Path) -> list[int]:
    """The steps at which ``run_dir`` has evaluation samples, in order."""
    steps = [int(m.group(1)) for p in run_dir.glob("eval_samples_step*.jsonl") if (m := re.search(r"(\d+)", p.name))]
    return sorted(steps)


def held_out(run_dir: Path, step: int | None = None) -> HeldOut:
    """The evaluation of ``run_dir`` at ``step`` (default: its last), item by item."""
    steps = evaluation_steps(run_dir)
    if not steps:
        raise FileNotFoundError(f"{run_dir}: no eval_samples_step*.jsonl (set eval.every and run the evaluation)")
    step = steps[-1] if step is None else step
    outcomes: dict[str, dict[str, list[bool]]] = {mode: defaultdict(list) for mode in MODES}
    for line in (run_dir / f"eval_samples_step{step:06d}.jsonl").read_text().splitlines():
        row = json.loads(line)
        if row.get("eval_set") is not None:  # a further evaluation set (e.g. kb_routing's quiz): not the held-out split
            continue
        item = _item_of(row)
        ok = row["won"] if "won" in row else row["correct"]
        outcomes[row.get("eval_mode", "greedy")][item].append(bool(ok))
    return HeldOut(step, {mode: dict(v) for mode, v in outcomes.items() if v})


def pooled(evaluations: Sequence[HeldOut], mode: str) -> SampledReport:
    """Success over all the runs' outcomes of the same items, with the interval over items."""
    counts = merge([ev.outcomes[mode] for ev in evaluations])
    sizes = {len(v) for v in counts.values()}
    if len(sizes) != 1:
        raise ValueError(f"the runs evaluated different items or numbers of samples ({sorted(sizes)} per item)")
    return SampledReport.from_item_counts([sum(v) for v in counts.values()], sizes.pop())


def paired_difference(a: Sequence[HeldOut], b: Sequence[HeldOut], mode: str) -> PairedDifference:
    """Method A − method B, paired by item: each item's success rate over all of a method's runs."""
    rate_a, rate_b = (
        {item: sum(o) / len(o) for item, o in merge([ev.outcomes[mode] for ev in runs]).items()} for runs in (a, b)
    )
    if set(rate_a) != set(rate_b):
        raise ValueError("the two methods were evaluated on different items; pair runs of the same held-out split")
    items = sorted(rate_a)
    return PairedDifference.from_item_rates([rate_a[i] for i in items], [rate_b[i] for i in items])


@dataclass(frozen=True)
class SeedInterval:
    """The mean of per-seed values with a Student-t 95 % interval (n − 1 degrees of freedom)."""

    values: tuple[float, ...]
    mean: float
    low: float
    high: float

    @classmethod
    def of(cls, values: Sequence[float]) -> SeedInterval:
        n = len(values)
        mean = statistics.fmean(values) if values else math.nan
        if n < 2:
            return cls(tuple(values), mean, math.nan, math.nan)
        half = _t975(n - 1) * statistics.stdev(values) / math.sqrt(n)
        return cls(tuple(values), mean, mean - half, mean + half)

    def show(self, scale: float = 1.0, unit: str = "", digits: int = 2, seed_digits: int | None = None) -> str:
        """E.g. ``"-0.44 turns (95% CI -1.87 to +0.99; seeds -0.70, -0.84, +0.22)"``; each seed's value with
        ``seed_digits`` decimals (default ``digits``)."""
        each = ", ".join(f"{scale * v:+.{digits if seed_digits is None else seed_digits}f}" for v in self.values)
        if math.isnan(self.low):
            return f"{scale * self.mean:+.{digits}f}{unit} (seeds {each})"
        return (f"{scale * self.mean:+.{digits}f}{unit} (95% CI {scale * self.low:+.{digits}f} to "
                f"{scale * self.high:+.{digits}f}; seeds {each})")

    def points(self) -> str:
        """E.g. ``"+6.3 (95% CI -2.1 to +14.7; seeds +4, +9, +6)"`` in percentage points."""
        return self.show(100, digits=1, seed_digits=0)


_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
         2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


def _t975(df: int) -> float:
    """Student-t 97.5 % quantile (two-sided 95 %): tabulated to 30 degrees of freedom, then 1.96 + 2.4/df
    (within 0.002 of the exact value)."""
    return _T975[df - 1] if df <= len(_T975) else 1.96 + 2.4 / df


def item_values(run_dir: Path, value, step: int | None = None, mode: str = "greedy") -> dict[str, list[float]]:
    """Per held-out item, ``value(row)`` of each of its evaluation rows in ``mode`` (rows where it returns
    ``None`` are left out: e.g. the routing accuracy of an episode that never searched). Rows of further
    evaluation sets (``eval_set``, e.g. an out-of-distribution quiz) are not held-out items of the split."""
    steps = evaluation_steps(run_dir)
    step = steps[-1] if step is None else step
    out: dict[str, list[float]] = defaultdict(list)
    for line in (run_dir / f"eval_samples_step{step:06d}.jsonl").read_text().splitlines():
        row = json.loads(line)
        if row.get("eval_mode", "greedy") != mode or row.get("eval_set") is not None:
            continue
        v = value(row)
        if v is not None:
            out[_item_of(row)].append(float(v))
    return dict(out)


@dataclass(frozen=True)
class ItemMean:
    """The mean over items of each item's mean value, with the normal 95 % interval over items (sd / √n): for
    metrics that are not one success per episode (searches per question, routing accuracy over an episode's
    searches), with the items, not the episodes, as the independent draws."""

    items: int
    mean: float
    low: float
    high: float

    @classmethod
    def of(cls, per_item: dict[str, list[float]]) -> ItemMean:
        means = [statistics.fmean(v) for v in per_item.values() if v]
        n = len(means)
        if n == 0:
            return cls(0, math.nan, math.nan, math.nan)
        mean = statistics.fmean(means)
        half = 1.959964 * statistics.stdev(means) / math.sqrt(n) if n > 1 else math.nan
        return cls(n, mean, mean - half, mean + half)

    def show(self, scale: float = 100.0, unit: str = "%", digits: int = 1) -> str:
        """E.g. ``"61.7% (55.0–68.4, 60 items)"``."""
        return (f"{scale * self.mean:.{digits}f}{unit} ({scale * self.low:.{digits}f}–{scale * self.high:.{digits}f}, "
                f"{self.items} items)")


def merge(per_item: Sequence[dict[str, list]]) -> dict[str, list]:
    """Several runs' values of the same items, pooled item by item."""
    out: dict[str, list[float]] = defaultdict(list)
    for values in per_item:
        for item, v in values.items():
            out[item].extend(v)
    return dict(out)


def paired_item_difference(a: dict[str, list[float]], b: dict[str, list[float]]) -> ItemMean:
    """Mean over the items both have of (A's item mean − B's item mean), with the normal interval over items (the
    unclamped form of :class:`PairedDifference`, for metrics that are not rates, e.g. searches per question)."""
    common = sorted(set(a) & set(b))
    return ItemMean.of({i: [statistics.fmean(a[i]) - statistics.fmean(b[i])] for i in common if a[i] and b[i]})


def percent(report: SampledReport) -> str:
    """E.g. ``"51.0% (41.7–60.2)"``."""
    return f"{100 * report.accuracy:.1f}% ({100 * report.ci_low:.1f}–{100 * report.ci_high:.1f})"


def greedy_interval(ev: HeldOut) -> tuple[float, float, float]:
    """One run's greedy success and its Wilson interval."""
    outs = [o for v in ev.outcomes["greedy"].values() for o in v]
    low, high = wilson_interval(sum(outs), len(outs))
    return sum(outs) / len(outs), low, high
