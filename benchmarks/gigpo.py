"""GRPO on trajectories vs GiGPO: same seeds, same budget, success rate vs steps and vs wall-clock.

Three sub-commands:

    # the base model on the training tasks: valid-action rate, success rate, turns (sampling as in training)
    python benchmarks/gigpo.py calibrate examples/frozenlake_gigpo.yaml --groups 8

    # the comparison: for each seed, each method (alternated), one `grove train` run in its own process
    python benchmarks/gigpo.py run examples/frozenlake_gigpo.yaml --out runs/bench-gigpo-frozenlake \\
        --seeds 0 1 2 --methods episode_grpo gigpo --set train.steps=20

    # a PNG (success rate vs step and vs seconds, mean ± range over seeds) and a Markdown table
    python benchmarks/gigpo.py report runs/bench-gigpo-frozenlake runs/bench-gigpo-textworld \\
        --png docs/img/gigpo.png

Every run is a normal run directory (metrics.jsonl, eval.jsonl, checkpoints), so `grove plot` works on
each. Methods are `algorithm.advantage` ids; everything else comes from the config and `--set`.
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path

from seeded_runs import (
    add_calibrate_command,
    add_run_command,
    comparison_parser,
    save_figure,
    train_alternated,
)


def calibrate(config: str, overrides: list[str], groups: int) -> dict[str, float]:
    import grove.builtin_components  # noqa: F401
    from grove.config import load_config
    from grove.experience import SourceContext, build_experience_source
    from grove.experience.episode_metrics import anchor_metrics, episode_metrics
    from grove.experience.trajectory_batch import trajectories_to_batch
    from grove.infra.runtime import configure_runtime
    from grove.models.pretrained import load_policy
    from grove.rollout.hf_engine import TransformersEngine

    cfg = load_config(config, overrides)
    configure_runtime(**cfg.runtime_settings())
    model, tokenizer = load_policy(cfg.model.name)
    engine = TransformersEngine(model, tokenizer)
    source = build_experience_source(SourceContext.for_evaluation(cfg, engine, tokenizer))
    start = time.perf_counter()
    tasks = list(source.suite.train_tasks)[:groups]
    run = source.play([(t, t) for t in tasks], cfg.train.completions_per_prompt, source.sampling)
    batch, _ = trajectories_to_batch(run.trajectories, cfg.train.completions_per_prompt)
    out = {**episode_metrics(run.trajectories), **anchor_metrics(batch)}
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


def run(config: str, out: Path, seeds: list[int], methods: list[str], overrides: list[str]) -> None:
    variants = {method: [f"algorithm.advantage={{id: {method}}}"] for method in methods}
    train_alternated(config, out, seeds, variants, overrides)


def _curves(run_dir: Path) -> tuple[list[int], list[float], list[float]]:
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [r["step"] for r in rows], [r["success_rate"] for r in rows], [r["elapsed_seconds"] for r in rows]


def report(dirs: list[Path], png: Path | None) -> str:
    lines = [
        "| task | method | seeds | success, first 5 steps | success, last 5 steps | held-out before → after | "
        "s/step (median) | turns/episode (last 5) | invalid (last 5) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    panels = []
    for d in dirs:
        runs: dict[str, list[Path]] = {}
        for r in sorted(d.glob("*-seed*")):
            if (r / "metrics.jsonl").exists():
                runs.setdefault(r.name.rsplit("-seed", 1)[0], []).append(r)
        panels.append((d.name, runs))
        for method, rs in runs.items():
            firsts, lasts, before, after, secs, turns, invalid = [], [], [], [], [], [], []
            for r in rs:
                rows = [json.loads(x) for x in (r / "metrics.jsonl").read_text().splitlines()]
                firsts.append(statistics.mean(x["success_rate"] for x in rows[:5]))
                lasts.append(statistics.mean(x["success_rate"] for x in rows[-5:]))
                turns.append(statistics.mean(x["turns_per_episode"] for x in rows[-5:]))
                invalid.append(statistics.mean(x["invalid_action_rate"] for x in rows[-5:]))
                secs.append(statistics.median(x["step_seconds"] for x in rows))
                evals = [json.loads(x) for x in (r / "eval.jsonl").read_text().splitlines()]
                before.append(evals[0]["accuracy"])
                after.append(evals[-1]["accuracy"])

            def pct(xs):
                return f"{100 * statistics.mean(xs):.1f}% ({', '.join(f'{100 * x:.0f}' for x in xs)})"

            lines.append(
                f"| {d.name} | {method} | {len(rs)} | {pct(firsts)} | {pct(lasts)} | "
                f"{100 * statistics.mean(before):.1f}% → {100 * statistics.mean(after):.1f}% | "
                f"{statistics.median(secs):.1f} | {statistics.mean(turns):.2f} | {statistics.mean(invalid):.2f} |"
            )
    if png is not None:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, axes = plt.subplots(len(panels), 2, figsize=(11, 3.6 * len(panels)), squeeze=False)
        for (name, runs), (ax_step, ax_time) in zip(panels, axes, strict=True):
            for method, rs in runs.items():
                curves = [_curves(r) for r in rs]
                n = min(len(c[0]) for c in curves)
                steps = curves[0][0][:n]
                mean = [statistics.mean(c[1][i] for c in curves) for i in range(n)]
                lo = [min(c[1][i] for c in curves) for i in range(n)]
                hi = [max(c[1][i] for c in curves) for i in range(n)]
                secs = [statistics.mean(c[2][i] for c in curves) for i in range(n)]
                line = ax_step.plot(steps, mean, label=f"{method} (mean of {len(rs)} seeds)")[0]
                ax_step.fill_between(steps, lo, hi, alpha=0.2, color=line.get_color())
                ax_time.plot(secs, mean, color=line.get_color(), label=method)
            ax_step.set_title(f"{name}: training success rate vs step (band: min-max over seeds)")
            ax_step.set_xlabel("step")
            ax_time.set_title(f"{name}: vs wall-clock")
            ax_time.set_xlabel("seconds")
            for ax in (ax_step, ax_time):
                ax.set_ylabel("success rate")
                ax.legend(fontsize=8)
        save_figure(fig, png)
    return "\n".join(lines)


def main() -> None:
    parser, sub = comparison_parser(__doc__)
    add_calibrate_command(sub)
    add_run_command(sub, ["episode_grpo", "gigpo"])
    p = sub.add_parser("report")
    p.add_argument("dirs", type=Path, nargs="+")
    p.add_argument("--png", type=Path)
    args = parser.parse_args()
    if args.command == "calibrate":
        print(json.dumps(calibrate(args.config, args.overrides, args.groups), indent=2))
    elif args.command == "run":
        run(args.config, args.out, args.seeds, args.methods, args.overrides)
    else:
        print(report(args.dirs, args.png))


if __name__ == "__main__":
    main()
