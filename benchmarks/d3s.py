"""GRPO vs GRPO + D^3S (and DAPO vs DAPO + D^3S) on the default task, several seeds, same rollouts.

Every variant trains the demo config (``examples/arithmetic.yaml``, its algorithm section replaced
by a preset) for the same number of steps, i.e. the same number of generated rollouts per step (DAPO's
dynamic sampling may draw extra rounds, reported), and is evaluated greedily on the same held-out
problems every ``--eval-every`` steps. "+d3s" adds the ``d3s`` preset's ``selection`` block (max-Var(A)
half of every group and top-|A|·H half of every completion's tokens at the start, relaxed along a cosine
to everything at the last step). The base model is evaluated once (before the first run; greedy, so the
same for every run).

Writes ``OUT/d3s.png`` (held-out accuracy and training reward against optimizer steps, tokens that
received gradient, and training wall-clock; mean over seeds, thin lines per seed) and prints the
markdown table for ``docs/benchmarks.md``.

    python benchmarks/d3s.py --steps 12 --eval-every 4 --seeds 0 1 2 --out runs/d3s
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

import matplotlib
from compare_algorithms import read

from grove.config.presets import PRESETS

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

SELECTION = json.dumps(PRESETS["d3s"].settings["selection"])  # JSON is YAML flow syntax
VARIANTS = {
    "grpo": ["algorithm={preset: grpo}"],
    "grpo+d3s": ["algorithm={preset: d3s}"],
    "dapo": ["algorithm={preset: dapo}"],
    "dapo+d3s": ["algorithm={preset: dapo}", f"selection={SELECTION}"],
}


def grove(*args: str) -> None:
    cmd = [sys.executable, "-m", "grove.cli", *args]
    print("==", " ".join(args), flush=True)
    subprocess.run(cmd, check=True)


def train(variant: str, seed: int, out: Path, steps: int, eval_every: int, before: bool, extra: list[str]) -> None:
    overrides = [*VARIANTS[variant], f"seed={seed}", f"output_dir={out}", f"train.steps={steps}",
                 f"eval.every={eval_every}", f"eval.before_training={str(before).lower()}", "logging.progress=false",
                 *extra]
    grove("train", "examples/arithmetic.yaml", *[x for o in overrides for x in ("--set", o)])


def curves(run: Path) -> dict[str, list[float]]:
    """Per-step cumulative x-axes and the held-out accuracy at the evaluated steps."""
    metrics = read(run / "metrics.jsonl")
    evals = {e["step"]: e for e in read(run / "eval.jsonl")}
    tokens, seconds, cum_tokens, cum_seconds = 0.0, 0.0, [], []
    for m in metrics:
        tokens += m["grad_tokens"]
        seconds += m["step_seconds"]
        cum_tokens.append(tokens)
        cum_seconds.append(seconds)
    at = [i for i, m in enumerate(metrics) if m["step"] in evals]
    return {
        "step": [m["step"] for m in metrics],
        "reward": [m["reward_mean"] for m in metrics],
        "grad_tokens": cum_tokens,
        "seconds": cum_seconds,
        "eval_step": [metrics[i]["step"] for i in at],
        "eval_tokens": [cum_tokens[i] for i in at],
        "eval_seconds": [cum_seconds[i] for i in at],
        "eval_acc": [evals[metrics[i]["step"]]["accuracy"] for i in at],
        "kept_frac": [m.get("selection/kept_samples_frac", 1.0) for m in metrics],
        "rounds": [m.get("dynamic_sampling_rounds", 1.0) for m in metrics],
    }


def mean(values: list[list[float]]) -> list[float]:
    return [statistics.mean(v) for v in zip(*values, strict=False)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--eval-every", type=int, default=4)
    parser.add_argument("--out", type=Path, default=Path("runs/d3s"))
    parser.add_argument("--set", dest="extra", action="append", default=[], help="extra override for every run")
    parser.add_argument("--plot-only", action="store_true", help="re-plot existing runs")
    args = parser.parse_args()
    if not args.plot_only:
        for seed in args.seeds:  # seeds outermost: an interrupted sweep still has every variant per seed
            for variant in args.variants:
                run = args.out / f"{variant}-seed{seed}"
                if not (run / "summary.json").exists():
                    first = seed == args.seeds[0] and variant == args.variants[0]
                    train(variant, seed, run, args.steps, args.eval_every, first, args.extra)

    data = {v: [curves(args.out / f"{v}-seed{s}") for s in args.seeds] for v in args.variants}
    fig, axes = plt.subplots(2, 3, figsize=(16, 8.5))
    xs = (("step", "eval_step", "optimizer step"), ("grad_tokens", "eval_tokens", "tokens that received gradient"),
          ("seconds", "eval_seconds", "training wall-clock (s, evaluations excluded)"))
    base = read(args.out / f"{args.variants[0]}-seed{args.seeds[0]}" / "eval.jsonl")[0]  # step 0
    for color, (variant, runs) in zip(plt.rcParams["axes.prop_cycle"].by_key()["color"], data.items(), strict=False):
        for col, (x_step, x_eval, label) in enumerate(xs):
            for r in runs:
                axes[0][col].plot([0, *r[x_eval]], [base["accuracy"], *r["eval_acc"]], color=color, alpha=0.25, lw=0.8)
                axes[1][col].plot(r[x_step], r["reward"], color=color, alpha=0.25, lw=0.8)
            axes[0][col].plot([0, *mean([r[x_eval] for r in runs])], [base["accuracy"], *mean([r["eval_acc"] for r in runs])],
                              color=color, marker="o", label=variant)
            axes[1][col].plot(mean([r[x_step] for r in runs]), mean([r["reward"] for r in runs]), color=color,
                              marker=".", label=variant)
            axes[0][col].set_xlabel(label)
            axes[1][col].set_xlabel(label)
    for col in range(3):
        axes[0][col].set_ylabel("held-out greedy accuracy")
        axes[1][col].set_ylabel("training reward (all rollouts of the step)")
        for row in range(2):
            axes[row][col].grid(alpha=0.3)
            axes[row][col].legend(fontsize=8)
    fig.suptitle(f"D^3S on SmolLM2-135M, two-digit addition (CPU): mean of seeds {args.seeds} (thin: each seed)")
    fig.tight_layout()
    fig.savefig(args.out / "d3s.png", dpi=80)

    print(f"\nbase model: {100 * base['accuracy']:.1f}% ({base['correct']}/{base['total']})\n")
    eval_steps = data[args.variants[0]][0]["eval_step"]
    print("| variant | held-out accuracy at the end, mean ± sd (per seed) | mean at steps "
          f"{', '.join(map(str, eval_steps))} | tokens with gradient | kept / generated rollouts | "
          "generation rounds | training s |")
    print("|---|---|---|---|---|---|---|")
    for variant, runs in data.items():
        final = [r["eval_acc"][-1] for r in runs]
        by_step = " / ".join(f"{100 * statistics.mean(r['eval_acc'][i] for r in runs):.1f}" for i in range(len(eval_steps)))
        tokens = statistics.mean(r["grad_tokens"][-1] for r in runs)
        kept = statistics.mean(statistics.mean(r["kept_frac"]) for r in runs)
        rounds = statistics.mean(statistics.mean(r["rounds"]) for r in runs)
        seconds = statistics.mean(r["seconds"][-1] for r in runs)
        sd = statistics.stdev(final) if len(final) > 1 else 0.0
        print(f"| {variant} | {100 * statistics.mean(final):.1f} ± {100 * sd:.1f}% "
              f"({', '.join(f'{100 * a:.1f}' for a in final)}) | {by_step} | {tokens:,.0f} | {kept:.2f} | "
              f"{rounds:.2f} | {seconds:.0f} |")
    print(f"\nplot: {args.out / 'd3s.png'}")


if __name__ == "__main__":
    main()
