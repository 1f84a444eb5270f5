"""GRPO on trajectories vs GiGPO: same seeds, same budget, success rate vs steps and vs wall-clock.

Three sub-commands:

    # the base model (or, with --set model.name=RUN/model, a warm start) on the training tasks: valid-action rate,
    # success rate, turns (sampling as in training), anchor-group sizes and the step-credit diagnostics of GiGPO on
    # those episodes (advantage/*: what its step term would have to work with)
    python benchmarks/gigpo.py calibrate examples/frozenlake_gigpo.yaml --groups 8

    # the comparison: for each seed, each method (alternated), one `grove train` run in its own process
    python benchmarks/gigpo.py run examples/frozenlake_gigpo.yaml --out runs/bench-gigpo-frozenlake \\
        --seeds 0 1 2 --methods episode_grpo gigpo --set train.steps=20

    # the controlled comparison where anchor states recur (docs/algorithms-gigpo.md, "When GiGPO helps"), with the
    # scale-matched control and the named options (NAMED_VARIANTS)
    python benchmarks/gigpo.py run examples/frozenlake_detours_gigpo.yaml --out runs/bench-gigpo-detours \\
        --seeds 0 1 2 --methods episode_grpo gigpo gigpo_scale_matched

    # Markdown tables and a PNG: held-out success per run and pooled over seeds with 95 % intervals, the step
    # each run first reaches --level, every method minus --baseline paired by held-out item and across seeds, the
    # turns to the goal on held-out successes (tables and a plot column), and the step-credit diagnostics
    # (DIAGNOSTICS and the anchor-group size histogram) per method
    python benchmarks/gigpo.py report runs/bench-gigpo-frozenlake runs/bench-gigpo-textworld \\
        --png docs/img/gigpo.png --level 0.45

Every run is a normal run directory (metrics.jsonl, eval.jsonl, eval_samples_step*.jsonl, checkpoints), so
`grove plot` works on each. Methods are `algorithm.advantage` ids; everything else comes from the config and
`--set`. The held-out tables need the runs' per-item evaluations (``eval.every``; ``eval.samples`` adds the
sampled success and pass@k); the intervals are explained in ``held_out.py``. Without them the report shows the
training success (band: min-max over seeds).
"""

from __future__ import annotations

import json
import math
import statistics
import time
from pathlib import Path

from held_out import (
    MODES,
    HeldOut,
    ItemMean,
    SeedInterval,
    evaluation_steps,
    greedy_interval,
    held_out,
    item_values,
    merge,
    paired_difference,
    paired_item_difference,
    percent,
    pooled,
)
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


def calibrate(config: str, overrides: list[str], groups: int) -> dict[str, float]:
    import grove.resolve  # noqa: F401  (registers every built-in component)
    from grove.core.advantages.gigpo import GiGPOParams, gigpo
    from grove.experience import SourceContext, build_experience_source
    from grove.experience.episode_metrics import anchor_metrics, episode_metrics
    from grove.experience.trajectory_batch import trajectories_to_batch
    from grove.infra.runtime import configure_runtime
    from grove.models.pretrained import load_policy
    from grove.resolve import load_config, resolve
    from grove.rollout.hf_engine import TransformersEngine

    cfg = load_config(config, overrides)
    configure_runtime(**cfg.runtime_settings())
    model, tokenizer = load_policy(cfg.model.name)
    engine = TransformersEngine(model, tokenizer)
    source = build_experience_source(SourceContext.for_evaluation(resolve(cfg, "eval"), engine, tokenizer))
    start = time.perf_counter()
    tasks = list(source.suite.train_tasks)[:groups]
    run = source.play([(t, t) for t in tasks], cfg.train.completions_per_prompt, source.sampling)
    batch, scores = trajectories_to_batch(run.trajectories, cfg.train.completions_per_prompt)
    out = {**episode_metrics(run.trajectories), **anchor_metrics(batch)}
    # what GiGPO's step term would have to work with on these episodes (the config's gigpo parameters)
    advantage = cfg.algorithm.advantage
    params = GiGPOParams(**advantage.params) if advantage.id == "gigpo" else GiGPOParams()
    out.update({f"advantage/{k}": v for k, v in gigpo(batch, scores, params).stats.items()})
    out["groups_with_mixed_success"] = sum(
        len({t.won for t in run.trajectories if t.group == g}) > 1 for g in range(len(tasks))
    ) / len(tasks)
    out["forward_tokens_per_env_step"] = float(batch.prompt_mask.sum() + batch.response_mask.sum()) / max(
        batch.steps.num_steps, 1
    )
    out["generation_seconds"] = run.generation_seconds
    out["environment_seconds"] = run.environment_seconds
    out["seconds"] = time.perf_counter() - start
    out["example_answers"] = [t.text for traj in run.trajectories[:3] for t in traj.turns[:2]]
    return out


#: the variants named beyond the estimator ids: the controls and options of the controlled comparison
#: (docs/algorithms-gigpo.md, "When GiGPO helps"), each an ``algorithm.advantage`` block
NAMED_VARIANTS = {
    "gigpo_scale_matched": "{id: gigpo, match_episode_rms: true}",
    "gigpo_start_excluded": "{id: gigpo, start_state: excluded}",
    "gigpo_std": "{id: gigpo, mode: mean_std_norm}",
    "episode_grpo_std": "{id: episode_grpo, mode: mean_std_norm}",
    "gigpo_omega0": "{id: gigpo, step_advantage_weight: 0.0}",
}


def run(config: str, out: Path, seeds: list[int], methods: list[str], overrides: list[str], parallel: int = 1,
        keep_checkpoints: bool = False) -> None:
    """Each method (an advantage estimator id, or one of :data:`NAMED_VARIANTS`) on each seed."""
    variants = {
        method: [f"algorithm.advantage={NAMED_VARIANTS.get(method, f'{{id: {method}}}')}"] for method in methods
    }
    train_alternated(config, out, seeds, variants, overrides, parallel, keep_checkpoints)


def training_table(name: str, runs: dict[str, list[Path]]) -> list[str]:
    """Training-time success (first and last 5 steps), held-out accuracy before → after, speed, turns, invalid."""
    lines = [
        "| task | method | seeds | success, first 5 steps | success, last 5 steps | held-out before → after | "
        "s/step (median) | turns/episode (last 5) | invalid (last 5) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for method, rs in runs.items():
        firsts, lasts, before, after, secs, turns, invalid = [], [], [], [], [], [], []
        for r in rs:
            rows = read_jsonl(r / "metrics.jsonl")
            firsts.append(statistics.mean(x["success_rate"] for x in rows[:5]))
            lasts.append(statistics.mean(x["success_rate"] for x in rows[-5:]))
            turns.append(statistics.mean(x["turns_per_episode"] for x in rows[-5:]))
            invalid.append(statistics.mean(x["invalid_action_rate"] for x in rows[-5:]))
            secs.append(statistics.median(x["step_seconds"] for x in rows))
            evals = read_jsonl(r / "eval.jsonl")
            before.append(evals[0]["accuracy"])
            after.append(evals[-1]["accuracy"])

        def pct(xs):
            return f"{100 * statistics.mean(xs):.1f}% ({', '.join(f'{100 * x:.0f}' for x in xs)})"

        lines.append(
            f"| {name} | {method} | {len(rs)} | {pct(firsts)} | {pct(lasts)} | "
            f"{100 * statistics.mean(before):.1f}% → {100 * statistics.mean(after):.1f}% | "
            f"{statistics.median(secs):.1f} | {statistics.mean(turns):.2f} | {statistics.mean(invalid):.2f} |"
        )
    return lines


def _mode(ev: HeldOut) -> str:
    return "sampled" if "sampled" in ev.outcomes else "greedy"


def _series(run: Path) -> list[tuple[int, HeldOut]]:
    return [(step, held_out(run, step)) for step in evaluation_steps(run)]


def _first_step_at(run: Path, level: float) -> int | None:
    """The first evaluation step whose held-out success (sampled where measured, else greedy) reaches ``level``."""
    for step, ev in _series(run):
        if ev.report(_mode(ev)).accuracy >= level:
            return step
    return None


def _speed(run: Path) -> tuple[float, float, float]:
    """Mean s/step, mean s/step over the steps with a gradient, and the run's wall clock in minutes."""
    rows = read_jsonl(run / "metrics.jsonl")
    with_gradient = [x["step_seconds"] for x in rows if x.get("trained_tokens", 1) > 0] or [math.nan]
    return statistics.mean(x["step_seconds"] for x in rows), statistics.mean(with_gradient), rows[-1]["elapsed_seconds"] / 60


def _held_out_invalid(run: Path) -> float:
    last = read_jsonl(run / "eval.jsonl")[-1]
    return last.get("sampled/invalid_action_rate", last.get("invalid_action_rate", math.nan))


def held_out_tables(name: str, runs: dict[str, list[Path]], level: float, baseline: str) -> list[str]:
    """Per run and pooled held-out success with 95 % intervals, steps to ``level``, and each method − baseline."""
    first = {m: [held_out(r, evaluation_steps(r)[0]) for r in rs] for m, rs in runs.items()}
    last = {m: [held_out(r) for r in rs] for m, rs in runs.items()}
    mode = _mode(next(iter(last.values()))[0])
    lines = [
        f"Held-out, {name}: per run (the last evaluation; greedy with its Wilson interval, {mode} with the interval "
        f"over items; first step with held-out {mode} success ≥ {100 * level:.0f} %)",
        "",
        "| method | seed | greedy | sampled | pass@k | invalid actions | step to level | s/step (with a gradient) | "
        "wall clock |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for method, rs in runs.items():
        for r, ev in zip(rs, last[method], strict=True):
            g, lo, hi = greedy_interval(ev)
            sampled = ev.report("sampled") if "sampled" in ev.outcomes else None
            k = max(sampled.pass_at) if sampled else None
            mean_s, grad_s, minutes = _speed(r)
            reached = _first_step_at(r, level)
            lines.append(
                f"| {method} | {seed_of(r)} | {100 * g:.0f}% ({100 * lo:.0f}–{100 * hi:.0f}) | "
                f"{percent(sampled) if sampled else '—'} | {f'{100 * sampled.pass_at[k]:.0f}% (k={k})' if k else '—'} | "
                f"{100 * _held_out_invalid(r):.1f}% | {reached if reached is not None else 'not reached'} | "
                f"{mean_s:.1f} ({grad_s:.1f}) | {minutes:.1f} min |"
            )
    lines += [
        "",
        f"Held-out, {name}: pooled over seeds (every item counted seeds × samples times; interval over items)",
        "",
        "| method | seeds | greedy before → after | sampled before → after | steps to level | s/step |",
        "|---|---|---|---|---|---|",
    ]
    for method, rs in runs.items():
        sampled = "sampled" in last[method][0].outcomes
        steps = [_first_step_at(r, level) for r in rs]
        lines.append(
            f"| {method} | {len(rs)} | {percent(pooled(first[method], 'greedy'))} → "
            f"**{percent(pooled(last[method], 'greedy'))}** | "
            + (f"{percent(pooled(first[method], 'sampled'))} → **{percent(pooled(last[method], 'sampled'))}** | "
               if sampled else "— | ")
            + f"{', '.join('—' if s is None else str(s) for s in steps)} | "
            f"{statistics.mean(_speed(r)[0] for r in rs):.1f} |"
        )
    lines += ["", "After − before training, paired by held-out item (all seeds pooled):", ""]
    for method in runs:
        for m in MODES:
            if m in last[method][0].outcomes and m in first[method][0].outcomes:
                lines.append(f"- {method}, {m}: {paired_difference(last[method], first[method], m)}")
    if baseline in runs:
        lines += ["", f"Differences against {baseline} (percentage points, held-out, the last evaluation):", ""]
        for method in runs:
            if method == baseline:
                continue
            for m in ("sampled", "greedy"):
                if m not in last[method][0].outcomes:
                    continue
                by_item = paired_difference(last[method], last[baseline], m)
                per_seed = SeedInterval.of([
                    a.report(m).accuracy - b.report(m).accuracy
                    for a, b in zip(last[method], last[baseline], strict=False)
                ])
                lines.append(
                    f"- {method} − {baseline}, {m}: paired by item {by_item}; across seeds {per_seed.points()}"
                )
    return lines


#: what GiGPO's step term had to work with (``step_credit_diagnostics``, the anchor metrics), averaged over a run's
#: steps; an estimator without a step term logs only the anchor metrics
DIAGNOSTICS = {
    "steps in shared anchor groups": "anchor_steps_in_shared_groups",
    "anchor group size": "anchor_group_size_mean",
    "A_S ≠ 0": "advantage/step_nonzero_frac",
    "groups with ≥ 2 actions": "advantage/anchor_distinct_actions_frac",
    "corr(A_S, A_E)": "advantage/step_episode_corr",
    "RMS A, turn 0": "advantage/advantage_rms_turn/0",
    "RMS A, turn 1": "advantage/advantage_rms_turn/1",
    "RMS A, turns 4+": "advantage/advantage_rms_turn/4+",
    "advantage std (tokens)": "advantage_std",
    "grad norm": "grad_norm",
}


def _run_mean(run: Path, key: str) -> float:
    values = [x[key] for x in read_jsonl(run / "metrics.jsonl") if isinstance(x.get(key), (int, float))]
    values = [v for v in values if math.isfinite(v)]
    return statistics.fmean(values) if values else math.nan


def diagnostics_table(name: str, runs: dict[str, list[Path]]) -> list[str]:
    """Per method, each diagnostic's mean over the steps of each run, then over its seeds (— where not logged)."""
    lines = [
        f"Step-credit diagnostics, {name} (mean over training steps, then over seeds):",
        "",
        "| method | " + " | ".join(DIAGNOSTICS) + " |",
        "|---|" + "---|" * len(DIAGNOSTICS),
    ]
    for method, rs in runs.items():
        cells = []
        for key in DIAGNOSTICS.values():
            values = [v for v in (_run_mean(r, key) for r in rs) if not math.isnan(v)]
            cells.append(f"{statistics.fmean(values):.2f}" if values else "—")
        lines.append(f"| {method} | " + " | ".join(cells) + " |")
    return lines


def anchor_sizes_table(name: str, runs: dict[str, list[Path]]) -> list[str]:
    """Per method, the share of each step's anchor groups in each size bin (``anchor_group_size_hist/*`` over
    ``anchor_groups``), averaged over the steps of each run, then over its seeds; empty where not logged."""
    first = read_jsonl(next(iter(runs.values()))[0] / "metrics.jsonl")[0]
    bins = [k for k in first if k.startswith("anchor_group_size_hist/")]
    if not bins:
        return []
    lines = [
        f"Anchor-group sizes, {name} (share of a step's anchor groups with that many steps; 1: a state met once):",
        "",
        "| method | " + " | ".join(b.split("/", 1)[1] for b in bins) + " |",
        "|---|" + "---|" * len(bins),
    ]
    for method, rs in runs.items():
        steps_by_run = [[x for x in read_jsonl(r / "metrics.jsonl") if x.get("anchor_groups")] for r in rs]
        shares = [
            statistics.fmean(statistics.fmean(x[b] / x["anchor_groups"] for x in steps) for steps in steps_by_run)
            for b in bins
        ]
        lines.append(f"| {method} | " + " | ".join(f"{100 * v:.0f} %" for v in shares) + " |")
    return lines


def _turns_of_wins(run: Path, step: int, mode: str) -> dict[str, list[float]]:
    """Per held-out item, the turns of each won episode (mode ``greedy`` or ``sampled``)."""
    return item_values(run, lambda row: row["turns"] if row.get("won") else None, step, mode)


def steps_to_goal_lines(name: str, runs: dict[str, list[Path]], baseline: str) -> list[str]:
    """Mean turns of the held-out successes (where GiGPO's step credit predicts the clearest gain: shorter
    paths), before and after training, pooled over seeds with the interval over items, and each method −
    baseline paired by item over the items both methods won."""
    first = {m: evaluation_steps(rs[0])[0] for m, rs in runs.items()}
    lines = [f"Turns to the goal on held-out successes, {name} (pooled over seeds; interval over items):", ""]
    after_by_run: dict[str, dict[str, list[dict[str, list[float]]]]] = {}  # method → mode → per run, per item
    for method, rs in runs.items():
        modes = [m for m in MODES if m in held_out(rs[0]).outcomes]
        after_by_run[method] = {m: [_turns_of_wins(r, evaluation_steps(r)[-1], m) for r in rs] for m in modes}
        for m in modes:
            before = ItemMean.of(merge([_turns_of_wins(r, first[method], m) for r in rs]))
            lines.append(f"- {method}, {m}: {before.show(1, ' turns', 2)} → "
                         f"**{ItemMean.of(merge(after_by_run[method][m])).show(1, ' turns', 2)}**")
    if baseline in runs:
        seeds = {method: [seed_of(r) for r in rs] for method, rs in runs.items()}
        for method in runs:
            if method == baseline:
                continue
            for m, per_run in after_by_run[method].items():
                if m not in after_by_run[baseline]:
                    continue
                base = dict(zip(seeds[baseline], after_by_run[baseline][m], strict=True))
                diff = paired_item_difference(merge(per_run), merge(after_by_run[baseline][m]))
                per_seed = SeedInterval.of([
                    paired_item_difference(turns, base[seed]).mean
                    for seed, turns in zip(seeds[method], per_run, strict=True) if seed in base
                ])
                lines.append(f"- {method} − {baseline}, {m}, paired by item: {diff.show(1, ' turns', 2)}; "
                             f"across seeds {per_seed.show(unit=' turns')}")
    return lines


def report(dirs: list[Path], png: Path | None, level: float = 0.45, baseline: str = "episode_grpo") -> str:
    lines: list[str] = []
    panels = []
    for d in dirs:
        runs = runs_by_variant(d)  # finished runs: a run still under way would show its early steps as its result
        unfinished = [r for rs in runs_by_variant(d, lambda r: not finished(r)).values() for r in rs]
        panels.append((d.name, runs))
        lines += training_table(d.name, runs)
        if unfinished:
            lines += ["", f"Not finished (left out; `run` resumes them): {', '.join(r.name for r in unfinished)}"]
        if runs:
            lines += ["", *diagnostics_table(d.name, runs)]
            sizes = anchor_sizes_table(d.name, runs)
            lines += ["", *sizes] if sizes else []
        if runs and all(evaluation_steps(r) for rs in runs.values() for r in rs):
            lines += ["", *held_out_tables(d.name, runs, level, baseline), ""]
            if _has_turns(runs):
                lines += [*steps_to_goal_lines(d.name, runs, baseline), ""]
    if png is not None:
        _plot(panels, png)
    return "\n".join(lines)


def _has_turns(runs: dict[str, list[Path]]) -> bool:
    """Whether the runs have per-item evaluations whose rows carry the episode's turns (agent tasks)."""
    if not runs or not all(evaluation_steps(r) for rs in runs.values() for r in rs):
        return False
    return any("turns" in json.loads(line) for line in _first_rows(next(iter(runs.values()))[0]))


def turns_of_wins_by_step(runs: dict[str, list[Path]]) -> dict[str, tuple[str, list[int], list[ItemMean]]]:
    """Per method: the evaluation mode, the evaluation steps every run of the method has, and at each the mean turns
    of the held-out successes pooled over seeds (interval over items)."""
    series = {}
    for method, rs in runs.items():
        steps = sorted(set.intersection(*(set(evaluation_steps(r)) for r in rs)))
        mode = _mode(held_out(rs[0], steps[0]))
        series[method] = (mode, steps, [ItemMean.of(merge([_turns_of_wins(r, s, mode) for r in rs])) for s in steps])
    return series


def _plot_turns_of_wins(ax, name: str, runs: dict[str, list[Path]]) -> None:
    """Turns to the goal on held-out successes vs step (band: 95 % interval over items); blank without them."""
    if not _has_turns(runs):
        ax.set_axis_off()
        return
    for method, (mode, steps, means) in turns_of_wins_by_step(runs).items():
        line = ax.plot(steps, [m.mean for m in means], marker="o", label=f"{method} ({mode})")[0]
        ax.fill_between(steps, [m.low for m in means], [m.high for m in means], alpha=0.2, color=line.get_color())
    ax.set_title(f"{name}: turns on held-out successes (band: 95% over items)", fontsize=9)
    ax.set_xlabel("step")
    ax.set_ylabel("turns")
    ax.legend(fontsize=8)


def _first_rows(run: Path, n: int = 5) -> list[str]:
    """The first lines of the run's first evaluation samples (to see which fields its rows carry)."""
    path = run / f"eval_samples_step{evaluation_steps(run)[0]:06d}.jsonl"
    return path.read_text().splitlines()[:n]


def _plot(panels: list[tuple[str, dict[str, list[Path]]]], png: Path) -> None:
    """Per task: held-out success vs step (pooled over seeds, 95 % band over items) or, without per-item
    evaluations, training success vs step (band: min-max over seeds); the same against wall clock; and, for agent
    tasks with per-item evaluations, the turns to the goal on held-out successes vs step."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    columns = 3 if any(_has_turns(runs) for _, runs in panels) else 2
    fig, axes = plt.subplots(len(panels), columns, figsize=(5.5 * columns, 3.6 * len(panels)), squeeze=False)
    for (name, runs), row in zip(panels, axes, strict=True):
        ax_step, ax_time = row[:2]
        if columns == 3:
            _plot_turns_of_wins(row[2], name, runs)
        what = "training success rate"
        for method, rs in runs.items():
            if all(evaluation_steps(r) for r in rs):
                what = "held-out success"
                steps = sorted(set.intersection(*(set(evaluation_steps(r)) for r in rs)))
                evs = [[held_out(r, s) for r in rs] for s in steps]
                mode = _mode(evs[0][0])
                reports = [pooled(e, mode) for e in evs]
                mean = [x.accuracy for x in reports]
                lo, hi = [x.ci_low for x in reports], [x.ci_high for x in reports]
                elapsed = {r: {x["step"]: x["elapsed_seconds"] for x in read_jsonl(r / "metrics.jsonl")} for r in rs}
                secs = [statistics.mean(elapsed[r].get(s, 0.0) for r in rs) for s in steps]
                label = f"{method} ({mode}, {len(rs)} seeds pooled)"
            else:
                rows = [read_jsonl(r / "metrics.jsonl") for r in rs]
                n = min(len(x) for x in rows)
                steps = [x["step"] for x in rows[0][:n]]
                values = [[x[i]["success_rate"] for x in rows] for i in range(n)]
                mean = [statistics.mean(v) for v in values]
                lo, hi = [min(v) for v in values], [max(v) for v in values]
                secs = [statistics.mean(x[i]["elapsed_seconds"] for x in rows) for i in range(n)]
                label = f"{method} (mean of {len(rs)} seeds)"
            line = ax_step.plot(steps, mean, marker="o" if what == "held-out success" else None, label=label)[0]
            ax_step.fill_between(steps, lo, hi, alpha=0.2, color=line.get_color())
            ax_time.plot(secs, mean, color=line.get_color(), label=method)
            ax_time.fill_between(secs, lo, hi, alpha=0.15, color=line.get_color())
        band = "95% interval over items" if what == "held-out success" else "min-max over seeds"
        ax_step.set_title(f"{name}: {what} vs step (band: {band})", fontsize=9)
        ax_step.set_xlabel("step")
        ax_time.set_title(f"{name}: vs wall clock", fontsize=9)
        ax_time.set_xlabel("seconds")
        for ax in (ax_step, ax_time):
            ax.set_ylabel(what)
            ax.legend(fontsize=8)
    save_figure(fig, png)


def main() -> None:
    parser, sub = comparison_parser(__doc__)
    add_calibrate_command(sub)
    add_run_command(sub, ["episode_grpo", "gigpo"])
    p = sub.add_parser("report")
    p.add_argument("dirs", type=Path, nargs="+")
    p.add_argument("--png", type=Path)
    p.add_argument("--level", type=float, default=0.45, help="held-out success level for 'steps to level'")
    p.add_argument("--baseline", default="episode_grpo", help="the method the others are compared with")
    args = parser.parse_args()
    if args.command == "calibrate":
        print(json.dumps(calibrate(args.config, args.overrides, args.groups), indent=2))
    elif args.command == "run":
        run(args.config, args.out, args.seeds, args.methods, args.overrides, args.parallel, args.keep_checkpoints)
    else:
        print(report(args.dirs, args.png, args.level, args.baseline))


if __name__ == "__main__":
    main()
