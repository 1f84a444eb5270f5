"""Reward combiners compared on a multi-objective task: every objective's held-out score over training.

Two sub-commands:

    # for each seed, each combiner (alternated), one `grove train` run in its own process
    python benchmarks/multi_objective.py run examples/clinical_crpo.yaml --out runs/bench-mo-clinical \\
        --seeds 0 1 2 --combiners sum_then_normalize normalize_then_sum variance_weighted --set train.steps=8

    # a PNG (held-out mean of each objective vs step, mean and range over seeds, one line per combiner)
    # and Markdown tables (start → end per objective, mean ± std over seeds; each objective after training pooled
    # over seeds with its 95 % interval over held-out prompts, and each combiner minus sum_then_normalize
    # paired by prompt: the objective a combiner sacrifices is the one whose difference lies below zero)
    python benchmarks/multi_objective.py report runs/bench-mo-clinical --png docs/img/multi_objective_clinical.png

    # on the arithmetic constraints (examples/arithmetic_constraints.yaml): also the resolution table and the share
    # of held-out samples meeting every objective at once ("all met"; a penalty is met at 0); --at: the held-out
    # tables at an early evaluation too (how fast); --steps: the training statistics of a window of steps alone
    python benchmarks/multi_objective.py report runs/bench-mo-arith --met-at --at 5 --steps 1 5

A combiner runs with the estimator it is designed for: ``sum_then_normalize`` and ``variance_weighted`` with
``grpo``; ``normalize_then_sum`` (GDPO, TRL's batch renormalisation) with ``score_as_advantage``. Everything else
(model, task, rewards and their weights, sampling, budget) comes from the config and ``--set``, the same for all.
Every run is a normal run directory (metrics.jsonl with per-objective statistics, eval.jsonl with per-objective
held-out means), so ``grove plot`` works on each.
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

from held_out import ItemMean, SeedInterval, evaluation_steps, item_values, merge, paired_item_difference
from seeded_runs import (
    add_run_command,
    comparison_parser,
    finished,
    read_jsonl,
    runs_by_variant,
    save_figure,
    seed_of,
    train_alternated,
)

ESTIMATOR = {"sum_then_normalize": "grpo", "normalize_then_sum": "score_as_advantage", "variance_weighted": "grpo"}


def run(config: str, out: Path, seeds: list[int], combiners: list[str], overrides: list[str], parallel: int = 1,
        keep_checkpoints: bool = False) -> None:
    variants = {
        combiner: [f"algorithm.reward_combination={{id: {combiner}}}",
                   f"algorithm.advantage={{id: {ESTIMATOR.get(combiner, 'grpo')}}}"]
        for combiner in combiners
    }
    train_alternated(config, out, seeds, variants, overrides, parallel, keep_checkpoints)


def collect(out: Path, log: str = "eval.jsonl") -> dict[str, dict[int, list[dict]]]:
    """``{combiner: {seed: records of log}}`` of the finished runs under ``out``."""
    return {a: {seed_of(r): read_jsonl(r / log) for r in rs} for a, rs in runs_by_variant(out).items()}


def share_table(metrics: dict[str, dict[int, list[dict]]], objectives: list[str]) -> str:
    """Per combiner: each objective's share of the advantage (median over steps and seeds: the share is a ratio
    whose denominator nears zero in a step where objectives cancel, so its mean is ruled by one step) and the
    fraction of groups with signal (mean over steps and seeds) — which objective drives the update."""
    header = " | ".join(objectives)
    lines = [f"| combiner | statistic | {header} |", "|---|---|" + "---|" * len(objectives)]
    for combiner, per_seed in metrics.items():
        for stat, label, centre in (("advantage_share", "advantage share (median)", statistics.median),
                                    ("signal_group_fraction", "groups with signal", statistics.mean)):
            cells = []
            for name in objectives:
                vals = [r[f"objective/{name}/{stat}"] for recs in per_seed.values() for r in recs
                        if f"objective/{name}/{stat}" in r]
                cells.append(f"{centre(vals):.2f}" if vals else "–")
            lines.append(f"| `{combiner}` | {label} | " + " | ".join(cells) + " |")
    lines.append("")
    lines.append("| combiner | groups whose score is constant (no signal under the combiner) | steps × seeds |")
    lines.append("|---|---|---|")
    for combiner, per_seed in metrics.items():
        vals = [r["zero_std_group_fraction"] for recs in per_seed.values() for r in recs if "zero_std_group_fraction" in r]
        lines.append(f"| `{combiner}` | {statistics.mean(vals):.2f} | {len(vals)} |" if vals else f"| `{combiner}` | – | 0 |")
    return "\n".join(lines)


RESOLUTION = ("reward_combinations", "advantage_values", "collapsed_group_fraction")


def resolution_table(metrics: dict[str, dict[int, list[dict]]]) -> str:
    """Per combiner, GDPO's resolution of the signal (``resolution/*``, mean over steps and seeds): the distinct
    reward combinations of a group, the distinct advantages the combiner made of them, and the share of groups where
    it merged combinations the rewards tell apart."""
    lines = ["| combiner | reward combinations per group | advantage values per group | groups that merged "
             "combinations | steps × seeds |", "|---|---|---|---|---|"]
    for combiner, per_seed in metrics.items():
        cells, count = [], 0
        for name in RESOLUTION:
            vals = [r[f"resolution/{name}"] for recs in per_seed.values() for r in recs if f"resolution/{name}" in r]
            count = max(count, len(vals))
            cells.append(f"{statistics.mean(vals):.2f}" if vals else "–")
        lines.append(f"| `{combiner}` | " + " | ".join(cells) + f" | {count} |")
    return "\n".join(lines)


def all_met(thresholds: dict[str, float]):
    """A sample's value of the pseudo-objective "all met": 1 when every objective reaches its threshold (``--met-at``;
    default 1.0, e.g. 0 for a penalty), 0 otherwise; ``None`` for a sample without rewards."""

    def value(row: dict) -> float | None:
        rewards = row.get("rewards") or {}
        if not rewards:
            return None
        return float(all(v is not None and v >= thresholds.get(k, 1.0) for k, v in rewards.items()))

    return value


def objectives_of(runs: dict[str, dict[int, list[dict]]]) -> list[str]:
    names: dict[str, None] = {}
    for per_seed in runs.values():
        for records in per_seed.values():
            for record in records:
                for key in record:
                    parts = key.split("/")
                    if parts[0] == "objective" and len(parts) == 2:
                        names.setdefault(parts[1])
    return list(names)


def _fmt(values: list[float]) -> str:
    if not values:
        return "–"
    if len(values) == 1:
        return f"{values[0]:.3f}"
    return f"{statistics.mean(values):.3f} ± {statistics.stdev(values):.3f}"


def table(runs: dict[str, dict[int, list[dict]]], objectives: list[str]) -> str:
    """Per combiner and objective: held-out mean before training → after, mean ± std over seeds, and the change."""
    lines = ["| combiner | objective | before | after | change (after − before) | seeds |", "|---|---|---|---|---|---|"]
    for combiner, per_seed in runs.items():
        for name in objectives:
            key = f"objective/{name}"
            first = [r[0][key] for r in per_seed.values() if r and key in r[0]]
            last = [r[-1][key] for r in per_seed.values() if r and key in r[-1]]
            deltas = [r[-1][key] - r[0][key] for r in per_seed.values() if r and key in r[0] and key in r[-1]]
            lines.append(f"| `{combiner}` | {name} | {_fmt(first)} | {_fmt(last)} | {_fmt(deltas)} | {len(deltas)} |")
    return "\n".join(lines)


def within(metrics: dict[str, dict[int, list[dict]]], first: int, last: int) -> dict[str, dict[int, list[dict]]]:
    """The metrics records of steps ``first .. last`` (inclusive): the statistics of a window of training."""
    return {a: {seed: [r for r in recs if first <= r["step"] <= last] for seed, recs in per_seed.items()}
            for a, per_seed in metrics.items()}


def held_out_table(
    out: Path, objectives: list[str], baseline: str = "sum_then_normalize", met_at: dict[str, float] | None = None,
    at: int | None = None,
) -> str:
    """Each objective's held-out mean after training, pooled over a combiner's seeds, with the 95 % interval over
    held-out prompts (from the last evaluation's samples); each combiner − the baseline paired by prompt (an
    objective whose difference lies below zero is the one a combiner sacrifices); and each combiner's change
    from the first evaluation (the warm start) paired by prompt. With ``met_at`` a last column, ``all met``: the
    share of samples meeting every objective at once (:func:`all_met`). ``at``: the evaluation at that step instead
    of the last (a run without it is left out)."""
    runs = runs_by_variant(out, lambda r: finished(r) and bool(evaluation_steps(r))
                           and (at is None or at in evaluation_steps(r)))
    if not runs:
        return ""
    readers = {name: (lambda row, n=name: row.get("rewards", {}).get(n)) for name in objectives}
    if met_at is not None:
        readers["all met"] = all_met(met_at)
    objectives = list(readers)

    def pooled_values(step_of) -> dict[str, dict[str, dict[str, list[float]]]]:
        return {
            a: {name: merge([item_values(r, read, step=step_of(r)) for r in rs]) for name, read in readers.items()}
            for a, rs in runs.items()
        }

    values = pooled_values(lambda r: at)
    before = pooled_values(lambda r: evaluation_steps(r)[0])
    lines = ["| combiner | seeds | " + " | ".join(objectives) + " |", "|---|---|" + "---|" * len(objectives)]
    for a, rs in runs.items():
        cells = [ItemMean.of(values[a][name]).show(1.0, "", 3) for name in objectives]
        lines.append(f"| `{a}` | {len(rs)} | " + " | ".join(cells) + " |")
    for a in runs:
        if a == baseline or baseline not in runs:
            continue
        cells = []
        for name in objectives:
            d = paired_item_difference(values[a][name], values[baseline][name])
            cells.append(f"{d.mean:+.3f} ({d.low:+.3f} to {d.high:+.3f})")
        lines.append(f"| `{a}` − `{baseline}` (paired by prompt) | | " + " | ".join(cells) + " |")
        seeds = sorted({seed_of(r) for r in runs[a]} & {seed_of(r) for r in runs[baseline]})
        cells = []
        for name in objectives:
            def seed_mean(variant: str, seed: int, read=readers[name]) -> float:
                run = next(r for r in runs[variant] if seed_of(r) == seed)
                return ItemMean.of(item_values(run, read, step=at)).mean
            d = SeedInterval.of([seed_mean(a, seed) - seed_mean(baseline, seed) for seed in seeds])
            cells.append(f"{d.mean:+.3f} ({d.low:+.3f} to {d.high:+.3f})")
        lines.append(f"| `{a}` − `{baseline}` (across {len(seeds)} seeds) | | " + " | ".join(cells) + " |")
    for a, rs in runs.items():
        cells = []
        for name in objectives:
            d = paired_item_difference(values[a][name], before[a][name])
            cells.append(f"{d.mean:+.3f} ({d.low:+.3f} to {d.high:+.3f})")
        lines.append(f"| `{a}` after − before (paired by prompt) | {len(rs)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(runs: dict[str, dict[int, list[dict]]], objectives: list[str], png: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cols = min(3, len(objectives))
    rows = -(-len(objectives) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5 * cols, 3.4 * rows), squeeze=False)
    for ax, name in zip(axes.flat, objectives, strict=False):
        key = f"objective/{name}"
        for combiner, per_seed in runs.items():
            steps = sorted({r["step"] for records in per_seed.values() for r in records if key in r})
            means, lows, highs = [], [], []
            for step in steps:
                vals = [r[key] for records in per_seed.values() for r in records if r["step"] == step and key in r]
                means.append(statistics.mean(vals))
                lows.append(min(vals))
                highs.append(max(vals))
            line = ax.plot(steps, means, marker="o", label=combiner)[0]
            ax.fill_between(steps, lows, highs, color=line.get_color(), alpha=0.15)
        ax.set_title(name)
        ax.set_xlabel("step")
        ax.set_ylabel("held-out mean")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(objectives) :]:
        ax.axis("off")
    fig.suptitle(title)
    save_figure(fig, png)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser, sub = comparison_parser(__doc__)
    add_run_command(sub, list(ESTIMATOR), "--combiners", "train every combiner for every seed")
    p = sub.add_parser("report", help="table and PNG of finished runs")
    p.add_argument("out", type=Path)
    p.add_argument("--png", type=Path)
    p.add_argument("--met-at", nargs="*", default=None, metavar="NAME=VALUE",
                   help="add the share of samples meeting every objective at once; an objective is met at VALUE "
                        "(default 1.0; e.g. brevity=0 for a penalty)")
    p.add_argument("--at", type=int, nargs="*", default=[], metavar="STEP",
                   help="also the held-out tables at these evaluation steps (e.g. an early one: how fast)")
    p.add_argument("--steps", type=int, nargs=2, default=None, metavar=("FIRST", "LAST"),
                   help="also the training statistics (advantage shares, resolution) of these steps alone")
    args = parser.parse_args(argv)
    if args.command == "run":
        run(args.config, args.out, args.seeds, args.combiners, args.overrides, args.parallel, args.keep_checkpoints)
        return 0
    runs = collect(args.out)
    if not runs:
        print(f"no finished runs under {args.out}", file=sys.stderr)
        return 1
    objectives = objectives_of(runs)
    print(table(runs, objectives))
    print()
    metrics = collect(args.out, "metrics.jsonl")
    print(share_table(metrics, objectives))
    print()
    print(resolution_table(metrics))
    if args.steps is not None:
        first, last = args.steps
        print(f"\nSteps {first}-{last} alone:\n")
        print(share_table(within(metrics, first, last), objectives))
        print()
        print(resolution_table(within(metrics, first, last)))
    met_at = None if args.met_at is None else {k: float(v) for k, v in (m.split("=", 1) for m in args.met_at)}
    for step in args.at:
        held_out = held_out_table(args.out, objectives, met_at=met_at, at=step)
        if held_out:
            print(f"\nHeld-out at step {step}, pooled over seeds (95 % intervals over prompts):\n")
            print(held_out)
    held_out = held_out_table(args.out, objectives, met_at=met_at)
    if held_out:
        print("\nHeld-out after training, pooled over seeds (95 % intervals over prompts):\n")
        print(held_out)
    if args.png:
        plot(runs, objectives, args.png, str(args.out))
        print(f"\nwrote {args.png}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
