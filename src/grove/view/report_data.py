"""The report's overview data (``data/run.js``): the run, its config, its training curves as columns, its
evaluations, summary, objectives, what is missing, the index of the sample pages and the comparison."""

from __future__ import annotations

import math
from datetime import datetime
from typing import Any

from grove.view.run_contents import RunContents
from grove.view.sample_pages import ReportLimits, spread_evenly
from grove.view.sample_records import clipped


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


def run_data(
    run: RunContents,
    manifests: dict[str, dict[str, Any]],
    comparison: dict[str, Any] | None,
    limits: ReportLimits,
) -> dict[str, Any]:
    """The overview data of ``run``; ``manifests``: the sample collections' indexes (``train``, ``eval``)."""
    has_details = run.token_details is not None
    details_fields = sorted({k for d in run.token_details or [] for k in d})
    return clipped(
        {
            "run": {"name": run.name, "path": str(run.path.resolve()), "kind": run.kind,
                    "generated": datetime.now().isoformat(timespec="seconds")},
            "config_text": run.config_text,
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
