"""Samples shaped for the report: training samples per step (single-turn completions or agent trajectories, with
their token details where ``token_details.jsonl`` has them) and held-out samples per evaluation.

Every text is cut at ``max_text_chars`` and every token list at ``max_tokens`` (the cut is said in the text);
numbers that are not finite become ``null``, so the data is valid JSON."""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

DETAIL_SERIES = ("logprob", "entropy", "advantage")
DETAIL_FLAGS = ("loss_mask", "kept")


def clipped(value: Any, max_chars: int) -> Any:
    """``value`` with every string cut at ``max_chars`` and every non-finite float replaced by ``None``."""
    if isinstance(value, str):
        if len(value) <= max_chars:
            return value
        return value[:max_chars] + f"\n… [{len(value) - max_chars} more characters not shown]"
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): clipped(v, max_chars) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [clipped(v, max_chars) for v in value]
    return value


def _short(x: Any) -> float | None:
    """A number with 4 significant digits (the page shows no more), ``None`` for anything else."""
    if isinstance(x, bool) or not isinstance(x, int | float) or not math.isfinite(x):
        return None
    return float(f"{x:.4g}")


def token_view(detail: dict[str, Any], max_tokens: int) -> dict[str, Any]:
    """One token-details record as the page colours it: the token strings and, per token, log-prob, entropy,
    advantage, loss mask and D^3S kept flag (``None`` where the record lacks a series)."""
    tokens = [str(t) for t in detail.get("tokens") or []]
    shown = tokens[:max_tokens]
    view: dict[str, Any] = {"tokens": shown, "cut": len(tokens) - len(shown)}
    for name in DETAIL_SERIES:
        values = detail.get(name)
        view[name] = [_short(v) for v in values[:max_tokens]] if isinstance(values, list) else None
    for name in DETAIL_FLAGS:
        values = detail.get(name)
        view[name] = [1 if v else 0 for v in values[:max_tokens]] if isinstance(values, list) else None
    view["sequence_advantage"] = _short(detail.get("sequence_advantage"))
    for key in ("turn", "anchor", "row", "group", "trajectory", "step_advantages"):
        if key in detail:
            view[key] = detail[key]
    return view


def _details_by(details: list[dict[str, Any]] | None, *keys: str) -> dict[int, dict[Any, list[dict]]]:
    """Token details per step, then per the first of ``keys`` the record has (``sample_row``, else ``row``; or
    ``trajectory``)."""
    out: dict[int, dict[Any, list[dict]]] = defaultdict(lambda: defaultdict(list))
    for d in details or []:
        key = next((k for k in keys if k in d), keys[-1])
        out[d["step"]][d.get(key)].append(d)
    return out


def _by_step(samples: list[dict[str, Any]]) -> dict[int, list[dict[str, Any]]]:
    out: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for s in samples:
        out[s["step"]].append(s)
    return out


def single_turn_training(
    samples: list[dict[str, Any]], details: list[dict[str, Any]] | None, max_text_chars: int, max_tokens: int
) -> dict[int, list[dict[str, Any]]]:
    """Training completions per step. A ``samples.jsonl`` line is the step's collected row of its position (the
    trainer writes the batch's first rows); a token-details record joins the row of its ``sample_row`` (its index in
    the collected batch; ``row`` in files that lack it) when their prompts agree,
    and a recorded row that ``samples.jsonl`` lacks is shown from its token details alone (its text the tokens
    joined). ``group``: the token details' group, else numbered by the order in which the step's prompts first appear
    (after the recorded groups' numbers)."""
    logged = _by_step(samples)
    detailed = _details_by(details, "sample_row", "row")
    out: dict[int, list[dict[str, Any]]] = {}
    for step in sorted(set(logged) | set(detailed)):
        rows: list[dict[str, Any]] = []
        detail_rows = detailed.get(step, {})
        used: set[Any] = set()
        for index, sample in enumerate(logged.get(step, [])):
            record = {**sample, "row": index}
            match = detail_rows.get(index)
            if match and match[0].get("prompt") in (None, sample.get("prompt")):
                record["details"] = token_view(match[0], max_tokens)
                record["group"] = match[0].get("group")
                used.add(index)
            rows.append(record)
        for row, found in sorted(detail_rows.items(), key=lambda kv: (kv[0] is None, kv[0] or 0)):
            if row in used:
                continue
            for d in found:
                rows.append({
                    "step": step, "row": row, "group": d.get("group"), "prompt": d.get("prompt", ""),
                    "completion": "".join(str(t) for t in d.get("tokens") or []), "rewards": d.get("rewards") or {},
                    "details": token_view(d, max_tokens), "from_token_details": True,
                })
        recorded = [r["group"] for r in rows if isinstance(r.get("group"), int)]
        first_free = max(recorded, default=-1) + 1  # a group by prompt never takes a recorded group's number
        prompts: dict[Any, int] = {}
        for record in rows:
            if record.get("group") is None:
                record["group"] = first_free + prompts.setdefault(record.get("prompt"), len(prompts))
        rows.sort(key=lambda r: (r["row"] is None, r["row"] if r["row"] is not None else 0))
        out[step] = [clipped(r, max_text_chars) for r in rows]
    return out


def agent_training(
    samples: list[dict[str, Any]], details: list[dict[str, Any]] | None, max_text_chars: int, max_tokens: int
) -> dict[int, list[dict[str, Any]]]:
    """Training trajectories per step, each with the token details whose ``trajectory`` is its ``trajectory_id``
    (the batch's trajectory index; files without it: the step's trajectories in ``samples.jsonl`` order): per turn
    (per-step prompts) or one conversation whose environment tokens are not trained on. Token details of a
    trajectory ``samples.jsonl`` lacks are shown on their own."""
    logged = _by_step(samples)
    detailed = _details_by(details, "trajectory")
    out: dict[int, list[dict[str, Any]]] = {}
    for step in sorted(set(logged) | set(detailed)):
        rows = []
        detail_rows = detailed.get(step, {})
        joined: set[Any] = set()
        for index, sample in enumerate(logged.get(step, [])):
            record = {**sample, "index": index}
            key = sample.get("trajectory_id", index)
            if key in detail_rows:
                record["details"] = [token_view(d, max_tokens) for d in detail_rows[key]]
                joined.add(key)
            rows.append(record)
        for trajectory_id in sorted(k for k in detail_rows if k is not None and k not in joined):
            found = detail_rows[trajectory_id]
            rows.append({
                "step": step, "index": len(rows), "trajectory_id": trajectory_id, "group": found[0].get("group"),
                "trajectory": [],
                "details": [token_view(d, max_tokens) for d in found], "from_token_details": True,
            })
        out[step] = [clipped(r, max_text_chars) for r in rows]
    return out


def held_out(eval_samples: dict[int, list[dict[str, Any]]], max_text_chars: int) -> dict[tuple[int, str], list[dict]]:
    """Held-out samples per (evaluation step, mode): ``greedy`` rows, then ``sampled`` ones (``eval.samples``)."""
    out: dict[tuple[int, str], list[dict]] = {}
    for step in sorted(eval_samples):
        for mode in ("greedy", "sampled"):
            rows = [r for r in eval_samples[step] if r.get("eval_mode", "greedy") == mode]
            if rows:
                out[(step, mode)] = [clipped({**r, "index": i}, max_text_chars) for i, r in enumerate(rows)]
    return out
