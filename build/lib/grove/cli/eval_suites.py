"""``grove eval`` over several suites and models: one table, the models side by side on the same items.

A suite is a config (``--config``, repeatable) or a task id (``--task``, repeatable, each on the first config); a
model is ``--model`` (repeatable: e.g. the base model and a checkpoint). Every model is evaluated on every suite
with the suite's own settings, so two models see exactly the same held-out items. Per suite and model the table
shows the greedy accuracy (or an environment's success rate) with its 95 % Wilson interval, pass@k of
``eval.samples`` sampled completions per item (the unbiased estimator of Chen et al. 2021, ``--samples N``) and
the mean completion length in tokens; with several models, each one's difference from the first model, paired by
item, with its 95 % interval (:class:`grove.evaluation.stats.PairedDifference`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from grove.cli.terminal import console

if TYPE_CHECKING:
    from grove.evaluation.evaluate import EvalResult

__all__ = ["SuiteRun", "item_outcomes", "print_suite_table", "short_labels"]


@dataclass(frozen=True)
class SuiteRun:
    """One model's evaluation on one suite."""

    suite: str
    model: str
    result: EvalResult


def short_labels(names: list[str]) -> dict[str, str]:
    """Each name as the shortest tail of its path parts that tells it from the others (``runs/a/model`` and
    ``runs/b/model`` → ``a/model``, ``b/model``; ``configs/math.yaml`` → ``math.yaml``)."""
    from pathlib import PurePath

    parts = {n: PurePath(n).parts or (n,) for n in names}
    for depth in range(1, max(len(p) for p in parts.values()) + 1):
        labels = {n: "/".join(p[-depth:]) for n, p in parts.items()}
        if len(set(labels.values())) == len(set(names)):
            return labels
    return {n: n for n in names}


def item_outcomes(result: EvalResult) -> list[float]:
    """Each held-out item's greedy outcome, 1.0 (correct / won) or 0.0, in item order: the first ``total`` records
    (the sampled completions and extra evaluation sets follow them)."""
    records = result.samples[: result.report.total]
    return [float(bool(r.get("correct", r.get("won", False)))) for r in records]


def _pass_at_k(extra: dict[str, Any]) -> str:
    levels = sorted(int(k.split("@")[1]) for k in extra if k.startswith("sampled/pass@"))
    if not levels:
        return "–"
    k = levels[-1]
    return f"@{k} {100 * extra[f'sampled/pass@{k}']:.1f}%"


def print_suite_table(runs: list[SuiteRun]) -> None:
    """The table of ``runs``: a row per suite and model, in the order given."""
    from rich.table import Table

    models = list(dict.fromkeys(r.model for r in runs))
    several = len(models) > 1
    model_label = short_labels(models)
    suite_label = short_labels(list(dict.fromkeys(r.suite for r in runs)))
    table = Table(title="held-out evaluation")
    for name in ("suite", "model"):
        table.add_column(name, no_wrap=True)
    for name in ("accuracy (95% CI)", "n", "pass@k", "tokens") + (("vs first model (paired, 95% CI)",) if several else ()):
        table.add_column(name, justify="right")
    first = {r.suite: r for r in runs if r.model == models[0]}
    for run in runs:
        report = run.result.report
        row = [suite_label[run.suite].removesuffix(".yaml"), model_label[run.model],
               f"{100 * report.accuracy:.1f}% ({100 * report.ci_low:.1f}–{100 * report.ci_high:.1f})", str(report.total),
               _pass_at_k(run.result.extra), f"{run.result.mean_length:.1f}"]
        if several:
            row.append(_difference(run, first.get(run.suite)))
        table.add_row(*row)
    console.print(table)


def _difference(run: SuiteRun, base: SuiteRun | None) -> str:
    """``run``'s accuracy minus the first model's on the same suite, paired by item, with its 95 % interval."""
    from grove.evaluation.stats import PairedDifference

    if base is None or base is run:
        return ""
    a, b = item_outcomes(run.result), item_outcomes(base.result)
    if len(a) != len(b) or not a:
        return "items differ"
    d = PairedDifference.from_item_rates(a, b)
    return f"{100 * d.difference:+.1f} ({100 * d.ci_low:+.1f} to {100 * d.ci_high:+.1f})"
