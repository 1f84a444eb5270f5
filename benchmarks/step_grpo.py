"""Outcome-only GRPO vs Step-GRPO (vs GiGPO) on knowledge-base routing: same seeds, same budget.

Three sub-commands:

    # the base model on the training questions: valid replies, searches, routing, answers (sampling as in training)
    python benchmarks/step_grpo.py calibrate examples/kb_routing_step_grpo.yaml --groups 8

    # the comparison: for each seed, each method (alternated), one `grove train` run in its own process
    python benchmarks/step_grpo.py run examples/kb_routing_step_grpo.yaml --out runs/bench-step-grpo \\
        --seeds 0 1 2 --methods outcome_grpo step_grpo gigpo --set train.steps=12 --set eval.every=6

    # a PNG (held-out answer accuracy, routing accuracy and searches per question vs step, mean and range over
    # seeds) and Markdown tables: per seed, then each metric pooled over seeds with its 95 % interval over the
    # held-out questions, and each method minus outcome_grpo paired by question (benchmarks/held_out.py)
    python benchmarks/step_grpo.py report runs/bench-step-grpo --png docs/img/step_grpo.png

Methods (each a bundle of `--set` values on top of the config):

* ``outcome_grpo``: ``episode_grpo`` with ``env.params.reward_mode=outcome`` (the answer's correctness only,
  Search-R1's reward, GRPO over whole trajectories);
* ``step_grpo``: ``step_grpo`` (type-and-ordinal grouping) with the step rewards;
* ``gigpo``: ``gigpo`` with the step rewards (episode score = sum of the step rewards, anchor = searches so far);
* ``step_grpo_anchor``: ``step_grpo`` grouping steps by anchor state (a search is compared with the direct
  answers given from the same state) instead of by step type.

Every run is a normal run directory (metrics.jsonl, eval.jsonl), so `grove plot` works on each.
"""

from __future__ import annotations

import json
import math
import statistics
import time
from pathlib import Path

from held_out import ItemMean, SeedInterval, evaluation_steps, item_values, merge, paired_item_difference
from seeded_runs import (
    add_calibrate_command,
    add_run_command,
    comparison_parser,
    finished,
    read_jsonl,
    runs_by_variant,
    save_figure,
    seed_of,
    train_alternated,
)

METHODS = {
    "outcome_grpo": ["algorithm.advantage={id: episode_grpo, episode_statistics: trajectories, mode: mean_std_norm}",
                     "env.params.reward_mode=outcome"],
    "step_grpo": ["algorithm.advantage={id: step_grpo}", "env.params.reward_mode=step"],
    "gigpo": ["algorithm.advantage={id: gigpo}", "env.params.reward_mode=step"],
    "step_grpo_anchor": ["algorithm.advantage={id: step_grpo, grouping: anchor}", "env.params.reward_mode=step"],
}

#: held-out metrics shown per run (eval.jsonl keys), with their labels
HELD_OUT = {
    "answer_accuracy": "answer accuracy",
    "routing_accuracy": "routing accuracy",
    "searches_per_question": "searches / question",
}


def calibrate(config: str, overrides: list[str], groups: int) -> dict:
    """Episodes of the base model on ``groups`` training questions spread over the list (G each, sampling as in
    training)."""
    import grove.resolve  # noqa: F401  (registers every built-in component)
    from grove.experience import SourceContext, build_experience_source
    from grove.experience.episode_metrics import environment_summary, episode_metrics
    from grove.infra.runtime import configure_runtime
    from grove.models.pretrained import load_policy
    from grove.resolve import load_config, resolve
    from grove.rollout.hf_engine import TransformersEngine

    cfg = load_config(config, overrides)
    configure_runtime(**cfg.runtime_settings())
    model, tokenizer = load_policy(cfg.model.name)
    source = build_experience_source(
        SourceContext.for_evaluation(resolve(cfg, "eval"), TransformersEngine(model, tokenizer), tokenizer)
    )
    start = time.perf_counter()
    train = list(source.suite.train_tasks)
    tasks = train[:: max(len(train) // groups, 1)][:groups]  # spread over the (category-ordered) question list
    run = source.play([(t, t) for t in tasks], cfg.train.completions_per_prompt, source.sampling)
    out: dict = {**episode_metrics(run.trajectories), **environment_summary(source.suite, run.trajectories)}
    step_types: dict[str, int] = {}
    for traj in run.trajectories:
        for turn in traj.turns:
            kind = turn.info.get("step_type", "unparsed")
            step_types[kind] = step_types.get(kind, 0) + 1
    out["step_types"] = step_types
    out["groups_with_varying_return"] = sum(
        len({t.episode_return for t in run.trajectories if t.group == g}) > 1 for g in range(len(tasks))
    ) / max(len(tasks), 1)
    out["generation_seconds"] = run.generation_seconds
    out["environment_seconds"] = run.environment_seconds
    out["seconds"] = time.perf_counter() - start
    out["example_replies"] = [t.text for traj in run.trajectories[:4] for t in traj.turns[:2]]
    return out


def run(config: str, out: Path, seeds: list[int], methods: list[str], overrides: list[str], parallel: int = 1,
        keep_checkpoints: bool = False) -> None:
    unknown = sorted(set(methods) - set(METHODS))
    if unknown:
        raise SystemExit(f"unknown methods {unknown}; known: {', '.join(METHODS)}")
    train_alternated(config, out, seeds, {m: METHODS[m] for m in methods}, overrides, parallel, keep_checkpoints)


def _evals(run_dir: Path) -> list[dict]:
    return read_jsonl(run_dir / "eval.jsonl")


def _fmt(xs: list[float], scale: float = 100.0, unit: str = "%") -> str:
    return f"{scale * statistics.mean(xs):.1f}{unit} ({', '.join(f'{scale * x:.0f}' for x in xs)})"


def _valid_infos(row: dict) -> list[dict]:
    return [t.get("info", {}) for t in row.get("trajectory", []) if t.get("valid")]


def _routing(row: dict) -> float | None:
    queries = [i for i in _valid_infos(row) if i.get("step_type") == "query"]
    return statistics.fmean(float(bool(i.get("routing_correct"))) for i in queries) if queries else None


#: held-out metrics per item, from the evaluation samples: (label, value of one episode, scale, unit)
ITEM_METRICS = {
    "answer accuracy": (lambda row: float(bool(row["won"])), 100.0, "%"),
    "routing accuracy": (_routing, 100.0, "%"),
    "searches / question": (lambda row: float(sum(i.get("step_type") == "query" for i in _valid_infos(row))), 1.0, ""),
}


def _signed(d: ItemMean, scale: float, unit: str) -> str:
    """A paired difference, e.g. ``"+1.7 (-5.7 to +9.0, 60 questions)"`` (two decimals for counts)."""
    digits = 1 if unit else 2
    return f"{scale * d.mean:+.{digits}f} ({scale * d.low:+.{digits}f} to {scale * d.high:+.{digits}f}, {d.items} questions)"


def _wall_clock_minutes(run_dir: Path) -> float:
    rows = read_jsonl(run_dir / "metrics.jsonl")
    if not rows:
        return math.nan
    return rows[-1].get("elapsed_seconds", sum(r.get("step_seconds", 0.0) for r in rows)) / 60


def per_run_table(runs: dict[str, list[Path]]) -> list[str]:
    """Each finished run's last evaluation: every metric with its 95 % interval over held-out questions, and the
    run's wall clock (training and evaluations)."""
    lines = ["| method | seed | " + " | ".join(ITEM_METRICS) + " | wall clock |",
             "|---|---|" + "---|" * len(ITEM_METRICS) + "---|"]
    for m, rs in runs.items():
        for r in rs:
            cells = [ItemMean.of(item_values(r, fn)).show(scale, unit, 1 if unit else 2)
                     for fn, scale, unit in ITEM_METRICS.values()]
            lines.append(f"| {m} | {seed_of(r)} | " + " | ".join(cells)
                         + f" | {_wall_clock_minutes(r):.1f} min |")
    return lines


def _route(row: dict) -> str | None:
    """The gold route of an evaluation episode's question (its steps' ``info["route"]``)."""
    return next((t["info"]["route"] for t in row.get("trajectory", []) if "route" in t.get("info", {})), None)


def _on_route(value, route: str):
    """``value(row)`` for the episodes whose question's gold route is ``route``, ``None`` (left out) for the rest."""
    return lambda row: value(row) if _route(row) == route else None


def route_table(runs: dict[str, list[Path]]) -> list[str]:
    """Per method and gold route (the questions a knowledge base answers, e.g. ``pictures``): answer and routing
    accuracy before and after, pooled over seeds with 95 % intervals over questions, and after − before paired by
    question: where a route was learned. Empty when the evaluations do not record routes."""
    routes = sorted({x for rs in runs.values() for r in rs for row in _rows(r) if (x := _route(row)) is not None})
    if not routes:
        return []
    lines = ["| method | route | answer acc. before | after | after − before (paired) | routing acc. before | after |"
             " after − before (paired) |", "|---|---|---|---|---|---|---|---|"]
    for m, rs in runs.items():
        for route in routes:
            cells = []
            for label in ("answer accuracy", "routing accuracy"):
                fn, scale, unit = ITEM_METRICS[label]
                only = _on_route(fn, route)
                before = merge([item_values(r, only, step=evaluation_steps(r)[0]) for r in rs])
                after = merge([item_values(r, only) for r in rs])
                if not after:
                    cells += ["–", "–", "–"]
                    continue
                cells += [ItemMean.of(before).show(scale, unit, 1) if before else "–",
                          ItemMean.of(after).show(scale, unit, 1),
                          _signed(paired_item_difference(after, before), scale, unit) if before else "–"]
            lines.append(f"| {m} | {route} | " + " | ".join(cells) + " |")
    return lines


def _rows(run_dir: Path) -> list[dict]:
    """The rows of a run's last evaluation."""
    steps = evaluation_steps(run_dir)
    return read_jsonl(run_dir / f"eval_samples_step{steps[-1]:06d}.jsonl") if steps else []


def knowledge_base_table(runs: dict[str, list[Path]]) -> list[str]:
    """Per method, the last evaluation's routing accuracy on each knowledge base's questions and the searches on
    questions that need none (``kb/<name>/...`` of eval.jsonl), mean over seeds with each seed's value: where the
    routing was learned or lost."""
    names = sorted({k.split("/")[1] for rs in runs.values() for r in rs for k in _evals(r)[-1]
                    if k.startswith("kb/") and k.endswith("/routing_accuracy")} - {"none"})
    cols = [*(f"{n} routing" for n in names), "searches on no-search questions", "unnecessary searches"]
    keys = [*(f"kb/{n}/routing_accuracy" for n in names), "kb/none/searches_per_question", "unnecessary_search_rate"]
    lines = ["| method | step | " + " | ".join(cols) + " |", "|---|---|" + "---|" * len(cols)]
    for m, rs in runs.items():
        for at in (0, -1):
            evals = [_evals(r)[at] for r in rs]
            cells = []
            for key in keys:
                vals = [e[key] for e in evals if e.get(key) is not None]
                cells.append(f"{statistics.fmean(vals):.2f} ({', '.join(f'{v:.2f}' for v in vals)})" if vals else "–")
            lines.append(f"| {m} | {evals[0]['step']} | " + " | ".join(cells) + " |")
    return lines


def held_out_table(runs: dict[str, list[Path]], baseline: str = "outcome_grpo") -> list[str]:
    """Each metric pooled over a method's seeds with its 95 % interval over held-out questions (the last
    evaluation; routing accuracy over the questions with at least one search), then each method − the baseline
    paired by question and across seeds (the per-seed differences of the seeds both have, Student-t interval)."""
    values = {m: {label: merge([item_values(r, fn) for r in rs]) for label, (fn, _, _) in ITEM_METRICS.items()}
              for m, rs in runs.items()}
    lines = ["| method | seeds | " + " | ".join(ITEM_METRICS) + " |", "|---|---|" + "---|" * len(ITEM_METRICS)]
    for m, rs in runs.items():
        cells = [ItemMean.of(values[m][label]).show(scale, unit, 1 if unit else 2)
                 for label, (_, scale, unit) in ITEM_METRICS.items()]
        lines.append(f"| {m} | {len(rs)} | " + " | ".join(cells) + " |")
    for m, rs in runs.items():
        fn, scale, unit = ITEM_METRICS["answer accuracy"]
        before = merge([item_values(r, fn, step=evaluation_steps(r)[0]) for r in rs])
        d = paired_item_difference(values[m]["answer accuracy"], before)
        lines.append(f"\n{m}, after − before, paired by question: answer accuracy {_signed(d, scale, unit)}")
    if baseline in values:
        for m in values:
            if m == baseline:
                continue
            cells = [f"{label} {_signed(paired_item_difference(values[m][label], values[baseline][label]), scale, unit)}"
                     for label, (_, scale, unit) in ITEM_METRICS.items()]
            lines.append(f"\n{m} − {baseline}, paired by question: " + "; ".join(cells))
            seeds = {seed_of(r): r for r in runs[baseline]}
            pairs = [(r, seeds[seed_of(r)]) for r in runs[m] if seed_of(r) in seeds]
            cells = []
            for label, (fn, _scale, unit) in ITEM_METRICS.items():
                diffs = [ItemMean.of(item_values(a, fn)).mean - ItemMean.of(item_values(b, fn)).mean for a, b in pairs]
                diffs = [d for d in diffs if not math.isnan(d)]
                cells.append(f"{label} {SeedInterval.of(diffs).points()}" if unit else
                             f"{label} {statistics.fmean(diffs) if diffs else math.nan:+.2f} "
                             f"(seeds {', '.join(f'{d:+.2f}' for d in diffs)})")
            lines.append(f"\n{m} − {baseline}, across seeds: " + "; ".join(cells))
    return lines


def report(d: Path, png: Path | None) -> str:
    """A table (held-out before → after per metric, OOD quiz after, training seconds per step) and the curves."""
    runs = runs_by_variant(d, lambda r: (r / "metrics.jsonl").exists() and bool(_evals(r)))
    lines = [
        "| method | seeds | answer acc. before → after | routing acc. before → after | searches/question before → after "
        "| quiz answer acc. after | s/step (median) |",
        "|---|---|---|---|---|---|---|",
    ]
    for method, rs in runs.items():
        cells = []
        for key in HELD_OUT:
            # routing accuracy is undefined (absent) for an evaluation without a single search
            before = [x for x in (_evals(r)[0].get(key) for r in rs) if x is not None]
            after = [x for x in (_evals(r)[-1].get(key) for r in rs) if x is not None]
            if not before and not after:
                cells.append("– (no searches)")
            elif key == "searches_per_question":
                cells.append(f"{statistics.mean(before):.2f} → {statistics.mean(after):.2f} "
                             f"({', '.join(f'{x:.2f}' for x in after)})")
            else:
                first = f"{100 * statistics.mean(before):.1f}%" if before else "–"
                cells.append(f"{first} → {_fmt(after) if after else '–'}")
        quiz = [_evals(r)[-1].get("quiz/answer_accuracy") for r in rs]
        quiz_cell = _fmt([q for q in quiz if q is not None]) if all(q is not None for q in quiz) else "–"
        secs = [statistics.median(x["step_seconds"] for x in read_jsonl(r / "metrics.jsonl")) for r in rs]
        lines.append(f"| {method} | {len(rs)} | {' | '.join(cells)} | {quiz_cell} | {statistics.median(secs):.1f} |")
    done = {m: [r for r in rs if finished(r) and evaluation_steps(r)] for m, rs in runs.items()}
    done = {m: rs for m, rs in done.items() if rs}
    if done:
        lines += ["", "Held-out, each finished run (the last evaluation; 95 % intervals over questions):", "",
                  *per_run_table(done),
                  "", "Held-out, finished runs pooled over seeds (95 % intervals over questions):", "",
                  *held_out_table(done),
                  "", "Held-out by knowledge base, before and after (mean over seeds; each seed):", "",
                  *knowledge_base_table(done)]
        by_route = route_table(done)
        if by_route:
            lines += ["", "Held-out by the question's gold route, pooled over seeds (95 % intervals over questions):", "",
                      *by_route]
    if png is not None and runs:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, axes = plt.subplots(1, len(HELD_OUT), figsize=(5 * len(HELD_OUT), 3.8), squeeze=False)
        for ax, (key, label) in zip(axes[0], HELD_OUT.items(), strict=True):
            for method, rs in runs.items():
                curves = [[(e["step"], e.get(key)) for e in _evals(r)] for r in rs]
                n = min(len(c) for c in curves)
                points = [(curves[0][i][0], [c[i][1] for c in curves if c[i][1] is not None]) for i in range(n)]
                points = [(step, v) for step, v in points if v]  # no search at all: no routing accuracy
                if not points:
                    continue
                steps = [step for step, _ in points]
                values = [v for _, v in points]
                line = ax.plot(steps, [statistics.mean(v) for v in values], marker="o",
                               label=f"{method} ({len(rs)} seeds)")[0]
                ax.fill_between(steps, [min(v) for v in values], [max(v) for v in values], alpha=0.2,
                                color=line.get_color())
            ax.set_title(f"held-out {label}")
            ax.set_xlabel("step")
            ax.legend(fontsize=8)
        save_figure(fig, png)
    return "\n".join(lines)


def main() -> None:
    parser, sub = comparison_parser(__doc__)
    add_calibrate_command(sub)
    add_run_command(sub, list(METHODS))
    p = sub.add_parser("report", help="table and PNG from run directories")
    p.add_argument("dir", type=Path)
    p.add_argument("--png", type=Path)
    args = parser.parse_args()
    if args.command == "calibrate":
        print(json.dumps(calibrate(args.config, args.overrides, args.groups), indent=1))
    elif args.command == "run":
        run(args.config, args.out, args.seeds, args.methods, args.overrides, args.parallel, args.keep_checkpoints)
    else:
        print(report(args.dir, args.png))


if __name__ == "__main__":
    main()
