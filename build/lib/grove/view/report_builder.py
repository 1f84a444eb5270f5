"""``build_report``: a run directory (and optionally a second one to compare with) into a report folder."""

from __future__ import annotations

from pathlib import Path

from grove.view.report_data import run_data
from grove.view.run_comparison import compare_runs
from grove.view.run_contents import RunContents, read_run
from grove.view.sample_pages import PagedSamples, ReportLimits, paginate, spread_evenly
from grove.view.sample_records import agent_training, held_out, single_turn_training
from grove.view.site_writer import write_site


def sample_collections(run: RunContents, limits: ReportLimits) -> dict[str, PagedSamples]:
    """The run's training samples (per step) and held-out samples (per evaluation step and mode), paged; only the
    kept steps (``limits.max_steps``, spread evenly) are shaped at all."""
    steps = sorted({r["step"] for r in [*run.train_samples, *(run.token_details or [])]})
    kept = set(spread_evenly(steps, limits.max_steps))
    samples = [s for s in run.train_samples if s["step"] in kept]
    details = None if run.token_details is None else [d for d in run.token_details if d["step"] in kept]
    shape = agent_training if run.kind == "agent" else single_turn_training
    train = shape(samples, details, limits.max_text_chars, limits.max_tokens)
    eval_steps = set(spread_evenly(sorted(run.eval_samples), limits.max_steps))
    evals = held_out({s: rows for s, rows in run.eval_samples.items() if s in eval_steps}, limits.max_text_chars)
    return {
        "train": paginate("train", train, {s: (str(s), f"step {s}") for s in train}, limits, keys_total=len(steps)),
        "eval": paginate(
            "eval", evals, {k: (f"{k[0]}/{k[1]}", f"step {k[0]} · {k[1]}") for k in evals}, limits,
            keys_total=sum(1 for rows in run.eval_samples.values() for mode in _modes(rows)),
        ),
    }


def _modes(rows: list[dict]) -> set[str]:
    return {r.get("eval_mode", "greedy") for r in rows}


def build_report(
    run_dir: Path, out: Path | None = None, compare_dir: Path | None = None, limits: ReportLimits | None = None,
    hide_paths: bool = False,
) -> Path:
    """Write the report of ``run_dir`` into ``out`` (default ``RUN_DIR/view``) and return its ``index.html``;
    ``hide_paths``: cut the absolute paths of the config and of the runs to their last part (a report to share).
    Raises :class:`grove.view.run_contents.NotARunError` for a directory that is not a run, and
    :class:`grove.view.site_writer.ReportFolderError` for an ``out`` that holds other files."""
    limits = limits or ReportLimits()
    run = read_run(Path(run_dir))
    other = read_run(Path(compare_dir)) if compare_dir is not None else None
    collections = sample_collections(run, limits)
    comparison = (
        compare_runs(run, other, limits.max_compare_items, limits.max_text_chars) if other is not None else None
    )
    overview = run_data(run, {k: c.manifest() for k, c in collections.items()}, comparison, limits, hide_paths)
    pages = [page for c in collections.values() for page in c.pages]
    title = run.name if other is None else f"{run.name} vs {other.name}"
    return write_site(Path(out) if out is not None else run.path / "view", title, overview, pages)
