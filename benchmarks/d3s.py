"""D^3S against plain GRPO on the arithmetic demo: held-out accuracy against steps, training tokens and wall clock.

Two sub-commands:

    # for each seed, each method (alternated), one `grove train` run in its own process (resumable)
    python benchmarks/d3s.py run examples/arithmetic.yaml --out runs/bench-d3s --seeds 0 1 2 --methods grpo d3s \\
        --set eval.every=5

    # Markdown tables (per run; pooled over seeds with the 95 % interval over held-out problems; D^3S − GRPO paired
    # by problem and across seeds; steps, gradient tokens and seconds to reach --level) and a PNG (held-out accuracy
    # against step, tokens that received gradient and training seconds, pooled over seeds, 95 % band over problems)
    python benchmarks/d3s.py report runs/bench-d3s --png docs/img/d3s.png --level 0.5

Methods, each a bundle of ``--set`` values on top of the config (everything else, the budget included, is the
config's and the same for all):

* ``grpo``: the config's algorithm as it is;
* ``d3s``: the same algorithm plus the ``d3s`` preset's ``selection`` block: per group the max-Var(A) half of the
  rollouts and per completion the top-|A|·H half of the tokens at the start, both relaxed along a cosine to
  everything at the last step (docs/algorithms-selection.md);
* ``dapo`` / ``dapo_d3s``: the ``dapo`` preset without and with the same selection block.

"Tokens that received gradient" is the metrics' ``grad_tokens_with_signal`` summed over steps: loss tokens with a
non-zero advantage after both selections (a zero-advantage token is in the loss with a zero gradient; D^3S's dropped
rollouts and unselected tokens lower the count). "Computed tokens" is ``trained_tokens``, the loss tokens the update
ran forward and backward (samples without signal are left out, ``train.skip_zero_advantage``). "Training seconds"
is ``step_seconds`` summed (evaluations excluded).
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

from held_out import (
    HeldOut,
    SeedInterval,
    evaluation_steps,
    greedy_interval,
    held_out,
    paired_difference,
    percent,
    pooled,
)
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

from grove.config.presets import PRESETS
from grove.evaluation.stats import SampledReport

SELECTION = json.dumps(PRESETS["d3s"].settings["selection"])  # JSON is YAML flow syntax
METHODS = {
    "grpo": [],
    "d3s": [f"selection={SELECTION}"],
    "dapo": ["algorithm={preset: dapo}"],
    "dapo_d3s": ["algorithm={preset: dapo}", f"selection={SELECTION}"],
}
#: what each method is compared with
BASELINE = {"d3s": "grpo", "dapo_d3s": "dapo"}


def _evaluated(run_dir: Path) -> bool:
    return finished(run_dir) and bool(evaluation_steps(run_dir))


def cumulative(run: Path) -> dict[int, dict[str, float]]:
    """Per step: tokens that received gradient and training seconds so far (step 0: nothing yet)."""
    out, tokens, seconds = {0: {"tokens": 0.0, "seconds": 0.0}}, 0.0, 0.0
    for m in read_jsonl(run / "metrics.jsonl"):
        tokens += m.get("grad_tokens_with_signal", 0.0)
        seconds += m.get("step_seconds", 0.0)
        out[m["step"]] = {"tokens": tokens, "seconds": seconds}
    return out


def curve(run: Path) -> list[tuple[int, float, float, HeldOut]]:
    """Per evaluation: (step, gradient tokens so far, training seconds so far, the held-out problems' outcomes)."""
    so_far = cumulative(run)
    return [(s, so_far[s]["tokens"], so_far[s]["seconds"], held_out(run, s)) for s in evaluation_steps(run) if s in so_far]


def pooled_curve(curves: list[list[tuple[int, float, float, HeldOut]]]) -> list[tuple[int, float, float, SampledReport]]:
    """At each step every seed evaluated: (step, mean gradient tokens so far, mean training seconds so far, greedy
    accuracy pooled over the seeds with its interval over problems)."""
    steps = sorted(set.intersection(*({c[0] for c in cv} for cv in curves)))
    at = [[next(c for c in cv if c[0] == s) for cv in curves] for s in steps]
    return [(s, statistics.fmean(c[1] for c in cs), statistics.fmean(c[2] for c in cs), pooled([c[3] for c in cs], "greedy"))
            for s, cs in zip(steps, at, strict=True)]


def first_reaching(run: Path, level: float) -> tuple[int, float, float] | None:
    """(step, gradient tokens, training seconds) of the first evaluation whose greedy accuracy reaches ``level``."""
    for step, tokens, seconds, ev in curve(run):
        if greedy_interval(ev)[0] >= level:
            return step, tokens, seconds
    return None


def _totals(run: Path) -> tuple[float, float, float, float, float]:
    """Tokens that received gradient, computed tokens, generated tokens, training seconds and the mean kept
    fraction of rollouts over the run."""
    rows = read_jsonl(run / "metrics.jsonl")
    return (sum(m.get("grad_tokens_with_signal", 0.0) for m in rows), sum(m.get("trained_tokens", 0.0) for m in rows),
            sum(m.get("generated_tokens", 0.0) for m in rows), sum(m.get("step_seconds", 0.0) for m in rows),
            statistics.fmean(m.get("selection/kept_samples_frac", 1.0) for m in rows))


def report(out: Path, level: float) -> str:
    runs = runs_by_variant(out, _evaluated)
    first = {m: [held_out(r, evaluation_steps(r)[0]) for r in rs] for m, rs in runs.items()}
    last = {m: [held_out(r) for r in rs] for m, rs in runs.items()}
    lines = [
        f"Per run (the last evaluation, greedy, Wilson interval over the problems; the first evaluation with held-out "
        f"accuracy ≥ {100 * level:.0f} %: step / tokens that received gradient / training seconds)",
        "",
        "| method | seed | held-out accuracy | tokens that received gradient | computed tokens | generated tokens | "
        "kept rollouts | training s | reached level at |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for method, rs in runs.items():
        for r, ev in zip(rs, last[method], strict=True):
            acc, low, high = greedy_interval(ev)
            grad, computed, generated, seconds, kept = _totals(r)
            hit = first_reaching(r, level)
            lines.append(
                f"| {method} | {seed_of(r)} | {100 * acc:.1f}% ({100 * low:.1f}–{100 * high:.1f}) | "
                f"{grad:,.0f} | {computed:,.0f} | {generated:,.0f} | {kept:.2f} | {seconds:.0f} | "
                + (f"step {hit[0]} / {hit[1]:,.0f} / {hit[2]:.0f} s |" if hit else "not reached |")
            )
    lines += [
        "",
        "Pooled over seeds (every problem counted once per seed; 95 % interval over problems); the accuracy at each "
        "evaluation with the mean gradient tokens and training seconds spent by then",
        "",
        "| method | seeds | before → after | at each evaluation: step (tokens with gradient, training s) accuracy |",
        "|---|---|---|---|",
    ]
    for method, rs in runs.items():
        cells = [f"{step} ({tokens:,.0f}, {seconds:.0f} s) {100 * acc.accuracy:.1f}%"
                 for step, tokens, seconds, acc in pooled_curve([curve(r) for r in rs])]
        lines.append(f"| {method} | {len(rs)} | {percent(pooled(first[method], 'greedy'))} → "
                     f"**{percent(pooled(last[method], 'greedy'))}** | {'; '.join(cells)} |")
    lines += ["", "After − before, paired by problem (all seeds pooled), and across seeds (each seed's change):", ""]
    for m in runs:
        for mode in ("greedy", "sampled"):
            if mode not in last[m][0].outcomes or mode not in first[m][0].outcomes:
                continue
            changes = SeedInterval.of([a.report(mode).accuracy - b.report(mode).accuracy
                                       for a, b in zip(last[m], first[m], strict=True)])
            lines.append(f"- {m}, {mode}: {percent(pooled(first[m], mode))} → {percent(pooled(last[m], mode))}; "
                         f"paired by problem {paired_difference(last[m], first[m], mode)}; across seeds "
                         f"{changes.points()}")
    compared = [(m, b) for m, b in BASELINE.items() if m in runs and b in runs]
    if compared:
        lines += ["", "Each D^3S variant − its baseline (held-out, the last evaluation, percentage points; totals as "
                  "ratios of the means over seeds):", ""]
    for method, base in compared:
        per_seed = SeedInterval.of([greedy_interval(a)[0] - greedy_interval(b)[0]
                                    for a, b in zip(last[method], last[base], strict=False)])
        mine = [_totals(r) for r in runs[method]]
        theirs = [_totals(r) for r in runs[base]]
        ratio = [statistics.fmean(x[i] for x in mine) / statistics.fmean(x[i] for x in theirs) for i in (0, 1, 2, 3)]
        lines.append(
            f"- {method} − {base}: paired by problem {paired_difference(last[method], last[base], 'greedy')}; "
            f"across seeds {per_seed.points()}; tokens that received gradient ×{ratio[0]:.2f}, computed tokens "
            f"×{ratio[1]:.2f}, generated tokens ×{ratio[2]:.2f}, training seconds ×{ratio[3]:.2f}"
        )
    return "\n".join(lines)


def plot(out: Path, png: Path) -> None:
    """Held-out accuracy against step, gradient tokens and training seconds: pooled over seeds (x: mean over seeds),
    band: the 95 % interval over problems; thin lines: each seed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(16, 4.6))
    for method, rs in runs_by_variant(out, _evaluated).items():
        curves = [curve(r) for r in rs]
        points = pooled_curve(curves)
        mean = [p[3].accuracy for p in points]
        low, high = [p[3].ci_low for p in points], [p[3].ci_high for p in points]
        color = None
        for ax, column in zip(axes, (0, 1, 2), strict=True):
            xs = [p[column] for p in points]
            line = ax.plot(xs, mean, marker="o", color=color, label=f"{method} ({len(rs)} seeds pooled)")[0]
            color = line.get_color()
            ax.fill_between(xs, low, high, color=color, alpha=0.15)
            for cv in curves:
                ax.plot([c[column] for c in cv], [greedy_interval(c[3])[0] for c in cv], color=color, alpha=0.3, lw=0.7)
    for ax, label in zip(axes, ("optimizer step", "tokens that received gradient", "training seconds (evaluations "
                                "excluded)"), strict=True):
        ax.set_xlabel(label)
        ax.set_ylabel("held-out greedy accuracy")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"{out.name}: pooled over seeds, band = 95% interval over held-out problems, thin = each seed")
    save_figure(fig, png)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser, sub = comparison_parser(__doc__)
    add_run_command(sub, ["grpo", "d3s"])
    p = sub.add_parser("report", help="tables and PNG of finished runs")
    p.add_argument("out", type=Path)
    p.add_argument("--png", type=Path)
    p.add_argument("--level", type=float, default=0.5, help="held-out accuracy level for 'reached level at'")
    args = parser.parse_args(argv)
    if args.command == "run":
        unknown = sorted(set(args.methods) - set(METHODS))
        if unknown:
            raise SystemExit(f"unknown methods {unknown}; choose from {sorted(METHODS)}")
        train_alternated(args.config, args.out, args.seeds, {m: METHODS[m] for m in args.methods}, args.overrides, args.parallel,
                         args.keep_checkpoints)
        return 0
    if not runs_by_variant(args.out, _evaluated):
        print(f"no finished runs with evaluation samples under {args.out}", file=sys.stderr)
        return 1
    print(report(args.out, args.level))
    if args.png:
        plot(args.out, args.png)
        print(f"\nwrote {args.png}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
