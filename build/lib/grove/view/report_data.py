"""The report's overview data (``data/run.js``): the run, its config, its training curves as columns, its
evaluations, summary, objectives, what is missing, the index of the sample pages and the comparison; with
``hide_paths``, the absolute paths of the config and of the runs cut to their last part
(:func:`grove.view.shared_text.cut_paths`)."""

from __future__ import annotations

import math
from datetime import datetime
from typing import Any

from grove.view.run_contents import RunContents
from grove.view.sample_pages import ReportLimits, spread_evenly
from grove.view.sample_records import clipped
from grove.view.shared_text import absolute_paths, cut_paths


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(f"{value:.5g}")


def metric_columns(metrics: list[dict[str, Any]], max_points: int) -> dict[str, Any]:
    """Every numeric metric as a column over the steps (``null`` where a step lacks it); at most ``max_points``
    steps, spread evenly (the first and the last included)."""
    rows = spread_evenly(metrics, max_points)
    keys: dict[str, None] = {}
    for row in rows:
        keys.update((k, None) for k, v in row.items() if k != "step" and _number(v) is not None)
    return {
        "steps": [row["step"] for row in rows],
        "series": {key: [_number(row.get(key)) for row in rows] for key in keys},
        "steps_total": len(metrics),
    }


def shareable_comparison(comparison: dict[str, Any]) -> dict[str, Any]:
    """A comparison whose runs' paths (and the paths its ``error`` names) are cut to their last part."""
    runs = [{**run, "path": cut_paths(str(run["path"]))} for run in comparison["runs"]]
    error = comparison.get("error")
    return {**comparison, "runs": runs, **({"error": cut_paths(error)} if error else {})}


def run_data(
    run: RunContents,
    manifests: dict[str, dict[str, Any]],
    comparison: dict[str, Any] | None,
    limits: ReportLimits,
    hide_paths: bool = False,
) -> dict[str, Any]:
    """The overview data of ``run``; ``manifests``: the sample collections' indexes (``train``, ``eval``);
    ``hide_paths``: cut absolute paths (the config's, the runs') to their last part. ``config_paths`` says how many
    absolute paths the config holds (the page says so beside it), ``paths_hidden`` whether they were cut."""
    has_details = run.token_details is not None
    details_fields = sorted({k for d in run.token_details or [] for k in d})
    config_text = run.config_text
    path = str(run.path.resolve())
    if hide_paths:
        config_text = cut_paths(config_text) if config_text is not None else None
        path = run.name
        comparison = shareable_comparison(comparison) if comparison is not None else None
    return clipped(
        {
            "run": {"name": run.name, "path": path, "kind": run.kind,
                    "generated": datetime.now().isoformat(timespec="seconds")},
            "config_text": config_text,
            "config_paths": absolute_paths(run.config_text or ""),
            "paths_hidden": hide_paths,
            "metrics": metric_columns(run.metrics, limits.max_curve_points),
            "evals": run.evals,
            "summary": run.summary,
            "objectives": run.objectives,
            "missing": run.missing,
            "token_details": {"present": has_details, "records": len(run.token_details or []), "fields": details_fields},
            "samples": manifests,
            "compare": comparison,
            "limits": limits.__dict__,
        },
        limits.max_text_chars * 10,  # the config text may be long
    )
