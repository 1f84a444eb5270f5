"""``grove plot RUN_DIR``: PNG curves of a run's metrics and held-out accuracy, and one panel per objective
when the run has several rewards/objectives (``plots/objectives.png``)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from grove.infra.run_logs import JsonlLog  # noqa: E402
from grove.infra.write_failures import reporting_write_failures  # noqa: E402

_EVAL_KEYS = ("accuracy", "ci_low", "ci_high", "total")

PANELS: list[tuple[str, list[str]]] = [
    ("reward", ["reward_mean"]),
    ("training accuracy / episode success", ["accuracy", "success_rate"]),
    ("turns per episode (agents)", ["turns_per_episode"]),
    ("invalid actions (agents)", ["invalid_action_rate"]),
    ("KL to reference", ["kl", "kl_in_reward"]),
    ("entropy", ["entropy"]),
    ("completion length (tokens)", ["completion_length_mean", "completion_length_max"]),
    ("clip fraction", ["clip_low_frac", "clip_high_frac", "dual_clip_frac"]),
    ("grad norm", ["grad_norm", "grad_norm_max"]),
    ("zero-std group fraction", ["zero_std_group_fraction"]),
    ("seconds per step", ["rollout_seconds", "train_seconds", "step_seconds"]),
]


def _smooth(values: list[float], window: int) -> list[float]:
    out, acc = [], []
    for v in values:
        acc.append(v)
        if len(acc) > window:
            acc.pop(0)
        out.append(sum(acc) / len(acc))
    return out


def objective_names(records: list[dict], evals: list[dict]) -> list[str]:
    """Objectives seen in the metrics (``objective/<name>/...``) or the evaluations (``objective/<name>``), in order."""
    names: dict[str, None] = {}
    for record in [*records, *evals]:
        for key in record:
            parts = key.split("/")
            if parts[0] == "objective" and len(parts) >= 2 and parts[1]:
                names.setdefault(parts[1])
    return list(names)


def _plot_objectives(records: list[dict], evals: list[dict], names: list[str], path: Path, title: str, smooth: int) -> None:
    """One panel per objective: its training mean, signal-group fraction and advantage share, and held-out mean."""
    cols = min(3, len(names))
    rows = -(-len(names) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5 * cols, 3.2 * rows), squeeze=False)
    steps = [r["step"] for r in records]
    for ax, name in zip(axes.flat, names, strict=False):
        series = [
            (f"reward/{name}_mean", "train mean"),
            (f"objective/{name}/signal_group_fraction", "groups with signal"),
            (f"objective/{name}/advantage_share", "advantage share"),
        ]
        for key, label in series:
            pts = [(s, r[key]) for s, r in zip(steps, records, strict=True) if r.get(key) is not None]
            if pts:
                xs, ys = zip(*pts, strict=True)
                ax.plot(xs, _smooth(list(ys), smooth), label=label)
        held = [(e["step"], e[f"objective/{name}"]) for e in evals if e.get(f"objective/{name}") is not None]
        if held:
            xs, ys = zip(*held, strict=True)
            ax.plot(xs, ys, marker="o", color="black", label="held-out mean")
        ax.set_title(f"objective: {name}")
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        if ax.lines:
            ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(names) :]:
        ax.axis("off")
    fig.suptitle(title)
    _arrange(fig)
    _save(fig, path)


def _arrange(fig, title_inches: float = 0.85) -> None:
    """Margins fixed in inches (room for tick labels, axis labels, titles and the figure's title): a fixed layout
    costs nothing, where ``tight_layout`` draws the whole figure once more to measure its text."""
    width, height = fig.get_size_inches()
    fig.subplots_adjust(left=0.6 / width, right=1 - 0.15 / width, bottom=0.5 / height, top=1 - title_inches / height,
                        wspace=0.3, hspace=0.55)


def _save(fig, path: Path) -> None:
    try:
        with reporting_write_failures(path, "the plot", f"run: grove plot {path.parent.parent}"):
            fig.savefig(path, dpi=90)
    finally:
        plt.close(fig)


def plot_run(run_dir: Path, smooth: int = 5) -> list[Path]:
    """Write ``plots/training.png``, ``plots/eval_accuracy.png`` and (several objectives) ``plots/objectives.png``;
    return the written paths."""
    records = JsonlLog(run_dir / "metrics.jsonl").read()
    evals = [e for e in JsonlLog(run_dir / "eval.jsonl").read() if all(k in e for k in _EVAL_KEYS)]
    if not records and not evals:
        raise FileNotFoundError(f"{run_dir} has no metrics.jsonl or eval.jsonl to plot")
    out_dir = run_dir / "plots"
    with reporting_write_failures(out_dir, "the plots in", f"run: grove plot {run_dir}"):
        out_dir.mkdir(exist_ok=True)
    written = []
    if records:
        cols = 3
        rows = -(-len(PANELS) // cols)
        fig, axes = plt.subplots(rows, cols, figsize=(5 * cols, 3.2 * rows), squeeze=False)
        steps = [r["step"] for r in records]
        for ax, (title, keys) in zip(axes.flat, PANELS, strict=False):
            for key in keys:
                pts = [(s, r[key]) for s, r in zip(steps, records, strict=True) if r.get(key) is not None]
                if not pts:
                    continue
                xs, ys = zip(*pts, strict=True)
                line = ax.plot(xs, ys, alpha=0.3)[0]
                ax.plot(xs, _smooth(list(ys), smooth), color=line.get_color(), label=key)
            ax.set_title(title)
            ax.set_xlabel("step")
            if ax.lines:
                ax.legend(fontsize=7)
            else:
                ax.text(0.5, 0.5, "not logged", ha="center", va="center", transform=ax.transAxes)
        for ax in list(axes.flat)[len(PANELS) :]:
            ax.axis("off")
        fig.suptitle(str(run_dir))
        _arrange(fig)
        path = out_dir / "training.png"
        _save(fig, path)
        written.append(path)
    if evals:
        fig, ax = plt.subplots(figsize=(6, 4))
        xs = [e["step"] for e in evals]
        ys = [100 * e["accuracy"] for e in evals]
        lo = [100 * (e["accuracy"] - e["ci_low"]) for e in evals]
        hi = [100 * (e["ci_high"] - e["accuracy"]) for e in evals]
        ax.errorbar(xs, ys, yerr=[lo, hi], marker="o", capsize=4, label="greedy")
        drawn = [e for e in evals if isinstance(e.get("sampled/accuracy"), int | float)]
        if drawn:
            ys = [100 * e["sampled/accuracy"] for e in drawn]
            lo = [100 * (e["sampled/accuracy"] - e["sampled/ci_low"]) for e in drawn]
            hi = [100 * (e["sampled/ci_high"] - e["sampled/accuracy"]) for e in drawn]
            k = drawn[-1]["sampled/samples_per_item"]
            ax.errorbar([e["step"] for e in drawn], ys, yerr=[lo, hi], marker="s", capsize=4, label=f"sampled ({k:.0f} per item)")
            ax.legend(fontsize=8)
        ax.set_xlabel("step")
        ax.set_ylabel("held-out accuracy (%)")
        ax.set_title(f"held-out accuracy, 95% CI (n={evals[-1]['total']})")
        ax.grid(alpha=0.3)
        _arrange(fig, title_inches=0.35)
        path = out_dir / "eval_accuracy.png"
        _save(fig, path)
        written.append(path)
    names = objective_names(records, evals)
    if names:
        path = out_dir / "objectives.png"
        _plot_objectives(records, evals, names, path, f"{run_dir}: per objective", smooth)
        written.append(path)
    return written
