"""``grove eval``: held-out accuracy or success of a model, greedy and sampled, with intervals; several suites and
models in one table (:mod:`grove.cli.eval_suites`)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from grove.cli.eval_suites import SuiteRun, print_suite_table
from grove.cli.terminal import SetOption, console, fail, print_precision_warning, resolve_for_command
from grove.command_failures import user_error_types, user_message
from grove.evaluation.stats import describe_sampled

if TYPE_CHECKING:
    from grove.evaluation.evaluate import EvalResult

__all__ = ["eval_"]


def eval_(
    model: Annotated[
        list[str] | None,
        typer.Option("--model", help="Model directory, a run directory (its trained model), a checkpoint, or "
                     "'smollm2-135m' (default: the config's); "
                     "repeat to compare models on the same items."),
    ] = None,
    task: Annotated[
        list[str] | None, typer.Option("--task", help="Task id (default: the config's task); repeat for several suites.")
    ] = None,
    config: Annotated[
        list[Path] | None,
        typer.Option("--config", help="Config for the task and rewards, or the environment, and sampling; repeat for "
                     "several suites."),
    ] = None,
    set_: SetOption = None,
    max_examples: Annotated[
        int | None, typer.Option("--max-examples", help="Evaluate at most N examples (held-out episodes for `env`).")
    ] = None,
    samples: Annotated[
        int | None,
        typer.Option(
            "--samples",
            help="Also sample N completions (episodes) per example at eval.temperature (default: rollout.temperature): "
            "sampled accuracy with its interval, and pass@k (sets eval.samples).",
        ),
    ] = None,
) -> None:
    """Greedy held-out accuracy (or, with an `env` section, success rate and mean turns), with a 95% interval;
    with --samples N also the accuracy of N sampled completions per example and pass@k. Several --config / --task
    (suites) or --model: one table, the models side by side on the same items with their paired differences."""
    overrides = list(set_ or [])
    if max_examples is not None:
        overrides.append(f"eval.max_examples={max_examples}")
    if samples is not None:
        overrides.append(f"eval.samples={samples}")
    configs: list[Path | None] = list(config or []) or [None]
    suites = [(str(c) if c else "default", c, []) for c in configs]
    if task:
        suites = [(t, configs[0], [f"task={{id: {t}}}"]) for t in task] + (suites[1:] if len(configs) > 1 else [])
    models: list[str | None] = list(model or []) or [None]
    runs = []
    loaded: dict[str, tuple] = {}  # each model loaded once, whatever the number of suites
    for label, path, suite_overrides in suites:
        plan = resolve_for_command(path, overrides + suite_overrides, "eval")
        cfg = plan.cfg
        for name in models:
            name, result = _evaluate(plan, name, loaded)
            runs.append(SuiteRun(label, name, result))
            _print_result(cfg, name, result, detailed=len(suites) == 1 and len(models) == 1)
    if len(runs) > 1:
        print_suite_table(runs)


def _evaluate(plan, model: str | None, loaded: dict[str, tuple]) -> tuple[str, EvalResult]:
    """``model`` (default: the config's policy) evaluated on the held-out items of ``plan`` (the config resolved
    for evaluation); an ``error:`` exit for a mistake of the user's. ``loaded``: the models already loaded, by name
    (filled here)."""
    from grove.api.evaluation import evaluate_loaded, load_model

    cfg = plan.cfg

    print_precision_warning(cfg.train.precision, False, "cpu")  # generation under the precision's autocast
    try:
        name, (policy, tokenizer) = load_model(cfg, model, loaded)
    except (FileNotFoundError, ValueError) as exc:  # ModelLoadError is a ValueError
        fail(str(exc))
    try:
        return str(name), evaluate_loaded(plan, policy, tokenizer)
    except user_error_types() as exc:
        fail(user_message(exc))


def _print_result(cfg, model: str, result: EvalResult, *, detailed: bool) -> None:
    """One line for ``model`` on ``cfg``'s suite; ``detailed``: also the sampled line and the breakdown tables."""
    target = f"env {cfg.env.id}" if cfg.source_id == "environment" else cfg.task.id
    extra = "".join(f", {k} {v:.3g}" for k, v in result.extra.items() if k != "success_rate" and "/" not in k)
    console.print(f"{model} on {target}: {result.report}{extra}  ({result.seconds:.1f}s)")
    if not detailed:
        return
    sampled = describe_sampled(result.extra)
    if sampled:
        console.print(sampled)
    _print_breakdowns(result.extra)
    objectives = [k.split("/")[1] for k in result.extra if k.startswith("objective/") and k.endswith("/n")]
    if objectives:
        from rich.table import Table

        table = Table("objective", "held-out mean", "samples it applies to", title="per objective")
        for name in objectives:
            mean = result.extra.get(f"objective/{name}")
            table.add_row(name, "–" if mean is None else f"{mean:.3f}", f"{result.extra[f'objective/{name}/n']:.0f}")
        console.print(table)


def _print_breakdowns(extra: dict[str, float]) -> None:
    """Tables of the nested evaluation metrics: one per evaluation set (held-out, then e.g. ``quiz/``), a row per
    metric, a column for "all" and for each ``<group>/<name>/`` breakdown (e.g. ``kb/tables/``). A key with an even
    number of parts starts with its evaluation set (``quiz/answer_accuracy``, ``quiz/kb/tables/answer_accuracy``)."""
    from rich.table import Table

    sets: dict[str, dict[str, dict[str, float]]] = {}
    for key, value in extra.items():
        parts = key.split("/")
        if parts[0] == "objective" or len(parts) == 1:
            continue
        eval_set = "held-out"
        if len(parts) % 2 == 0:
            eval_set, parts = parts[0], parts[1:]
        column = "all" if len(parts) == 1 else parts[-2]
        sets.setdefault(eval_set, {}).setdefault(column, {})[parts[-1]] = value
    if "held-out" in sets:
        sets["held-out"]["all"] = {k: v for k, v in extra.items() if "/" not in k}
    for eval_set, columns in sets.items():
        if eval_set == "held-out" and len(columns) < 2:
            continue
        columns = {"all": columns.pop("all", {}), **columns}
        metrics = list(dict.fromkeys(m for c in columns.values() for m in c))
        table = Table("metric", *columns, title=eval_set)
        for metric in metrics:
            table.add_row(metric, *("–" if c.get(metric) is None else f"{c[metric]:.3g}" for c in columns.values()))
        console.print(table)
