"""GRPO vs Dr.GRPO vs DAPO vs GSPO (or any presets) on the default task, at equal wall-clock.

Each algorithm is an ``algorithm.preset`` on top of the demo config (``examples/arithmetic.yaml``,
its own algorithm section replaced), trained with ``train.time_budget_seconds`` and evaluated
greedily on the same 200 held-out problems. The base model is evaluated once, before the first preset's run.
Writes ``OUT/curves.png`` (reward and training accuracy against wall-clock seconds and against
steps) and prints a markdown table for ``docs/benchmarks.md``.

    python benchmarks/compare_algorithms.py --budget 240 --presets grpo dr_grpo dapo gspo --out runs/compare
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def run(preset: str, out: Path, budget: float, evaluate_before: bool, extra: list[str]) -> None:
    cmd = [
        sys.executable, "-m", "grove.cli", "train", "examples/arithmetic.yaml",
        "--set", f"algorithm={{preset: {preset}}}",
        "--set", f"output_dir={out}",
        "--set", "train.steps=1000",
        "--set", f"train.time_budget_seconds={budget}",
        "--set", "eval.every=0",
        "--set", f"eval.before_training={str(evaluate_before).lower()}",
        "--set", "logging.progress=false",
        *extra,
    ]
    print(f"== {preset}: {' '.join(cmd[2:])}", flush=True)
    subprocess.run(cmd, check=True)


def read(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def smooth(values: list[float], window: int = 3) -> list[float]:
    return [sum(values[max(0, i - window + 1) : i + 1]) / len(values[max(0, i - window + 1) : i + 1]) for i in range(len(values))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--presets", nargs="+", default=["grpo", "dr_grpo", "dapo", "gspo"])
    parser.add_argument("--budget", type=float, default=240.0, help="training seconds per algorithm")
    parser.add_argument("--out", type=Path, default=Path("runs/compare"))
    parser.add_argument("--set", dest="extra", action="append", default=[], help="extra --set for every run")
    parser.add_argument("--plot-only", action="store_true", help="re-plot existing runs")
    args = parser.parse_args()
    extra = [x for item in args.extra for x in ("--set", item)]
    if not args.plot_only:
        for i, preset in enumerate(args.presets):
            run(preset, args.out / preset, args.budget, evaluate_before=(i == 0), extra=extra)

    fig, axes = plt.subplots(2, 2, figsize=(12, 8))
    rows = []
    base = None
    for preset in args.presets:
        metrics = read(args.out / preset / "metrics.jsonl")
        evals = read(args.out / preset / "eval.jsonl")
        base = base or next((e for e in evals if e["step"] == 0), None)
        t = [m["elapsed_seconds"] for m in metrics]
        steps = [m["step"] for m in metrics]
        for col, key in enumerate(("reward_mean", "accuracy")):
            y = smooth([m[key] for m in metrics])
            axes[0][col].plot(t, y, marker=".", label=preset)
            axes[1][col].plot(steps, y, marker=".", label=preset)
        final = evals[-1]
        rows.append(
            (preset, len(metrics), sum(m["step_seconds"] for m in metrics) / len(metrics), final)
        )
    for col, name in enumerate(("reward (mean over the step's completions)", "training accuracy")):
        axes[0][col].set_xlabel("training wall-clock (s)")
        axes[1][col].set_xlabel("step")
        for row in range(2):
            axes[row][col].set_title(name + " (3-step moving average)")
            axes[row][col].legend()
            axes[row][col].grid(alpha=0.3)
    fig.suptitle(f"{' vs '.join(args.presets)}: SmolLM2-135M, two-digit addition, {args.budget:.0f}s each (CPU)")
    fig.tight_layout()
    args.out.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out / "curves.png", dpi=90)

    print("\n| preset | steps in budget | s/step | held-out accuracy after | 95% CI |")
    print("|---|---|---|---|---|")
    if base:
        print(f"| (base model) | 0 | – | {100 * base['accuracy']:.1f}% ({base['correct']}/{base['total']}) | "
              f"{100 * base['ci_low']:.1f}–{100 * base['ci_high']:.1f}% |")
    for preset, n, sec, e in rows:
        print(f"| {preset} | {n} | {sec:.1f} | {100 * e['accuracy']:.1f}% ({e['correct']}/{e['total']}) | "
              f"{100 * e['ci_low']:.1f}–{100 * e['ci_high']:.1f}% |")
    print(f"\nplot: {args.out / 'curves.png'}")


if __name__ == "__main__":
    main()
