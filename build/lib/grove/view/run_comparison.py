"""Two runs on the same held-out items, side by side: each run's last evaluation with samples
(``eval_samples_stepNNNNNN.jsonl``), its greedy rows matched by ``task_id`` (agents) or by prompt (single-turn),
with each run's accuracy (or success rate) and 95 % interval from its ``eval.jsonl``."""

from __future__ import annotations

from typing import Any

from grove.view.run_contents import RunContents
from grove.view.sample_records import clipped

HEADLINE = ("accuracy", "correct", "total", "ci_low", "ci_high", "success_rate", "sampled/accuracy",
            "sampled/ci_low", "sampled/ci_high")


def _key(row: dict[str, Any], kind: str) -> Any:
    return row.get("task_id") if kind == "agent" else row.get("prompt")


def _outcome(row: dict[str, Any], kind: str) -> bool | None:
    value = row.get("won") if kind == "agent" else row.get("correct")
    return None if value is None else bool(value)


def _answer(row: dict[str, Any], kind: str, max_chars: int) -> dict[str, Any]:
    """What a run answered on one item: the completion, or an agent's actions and return."""
    if kind == "agent":
        turns = row.get("trajectory") or []
        text = " → ".join(str(t.get("action") if t.get("valid", True) else f"✗ {t.get('model_text', '')!r}") for t in turns)
        extra = {"return": row.get("return"), "turns": row.get("turns", len(turns)), "ended": row.get("ended")}
    else:
        text = row.get("completion", "")
        extra = {"rewards": row.get("rewards")}
    return clipped({"text": text, "outcome": _outcome(row, kind), **extra}, max_chars)


def _last_rows(run: RunContents) -> tuple[int | None, dict[Any, dict], dict[Any, list[bool]]]:
    """The last evaluation step with samples, its greedy row per item and its sampled outcomes per item."""
    if not run.eval_samples:
        return None, {}, {}
    step = max(run.eval_samples)
    greedy: dict[Any, dict] = {}
    sampled: dict[Any, list[bool]] = {}
    for row in run.eval_samples[step]:
        key = _key(row, run.kind)
        if key is None:
            continue
        if row.get("eval_mode", "greedy") == "greedy":
            greedy.setdefault(key, row)
        else:
            outcome = _outcome(row, run.kind)
            if outcome is not None:
                sampled.setdefault(key, []).append(outcome)
    return step, greedy, sampled


def _headline(run: RunContents, step: int | None) -> dict[str, Any]:
    record = next((e for e in reversed(run.evals) if e.get("step") == step), {})
    return {"name": run.name, "path": str(run.path), "step": step, **{k: record[k] for k in HEADLINE if k in record}}


def compare_runs(a: RunContents, b: RunContents, max_items: int, max_chars: int) -> dict[str, Any]:
    """The comparison the report shows; ``error`` says why there is none (kinds differ, no held-out samples)."""
    runs = [_headline(a, None), _headline(b, None)]
    if a.kind != b.kind:
        return {"runs": runs, "error": f"{a.path} is a {a.kind} run and {b.path} a {b.kind} run: their held-out items differ"}
    step_a, greedy_a, sampled_a = _last_rows(a)
    step_b, greedy_b, sampled_b = _last_rows(b)
    runs = [_headline(a, step_a), _headline(b, step_b)]
    lacking = [str(r.path) for r, step in ((a, step_a), (b, step_b)) if step is None]
    if lacking:
        return {"runs": runs, "error": f"no held-out samples (eval_samples_step*.jsonl) in {' and '.join(lacking)}"}
    matched = [k for k in greedy_a if k in greedy_b]
    counts = {"both": 0, "only_a": 0, "only_b": 0, "neither": 0, "unknown": 0}
    items = []
    for key in matched:
        ra, rb = _answer(greedy_a[key], a.kind, max_chars), _answer(greedy_b[key], b.kind, max_chars)
        oa, ob = ra["outcome"], rb["outcome"]
        verdict = "unknown" if oa is None or ob is None else (
            "both" if oa and ob else "only_a" if oa else "only_b" if ob else "neither")
        counts[verdict] += 1
        row = greedy_a[key]
        item = {"key": str(key), "verdict": verdict, "a": ra, "b": rb,
                "prompt": row.get("prompt") if a.kind != "agent" else None, "answer": row.get("answer")}
        for side, sampled in (("a", sampled_a), ("b", sampled_b)):
            if key in sampled:
                item[side]["sampled"] = [sum(sampled[key]), len(sampled[key])]
        items.append(clipped(item, max_chars))
    order = {"only_a": 0, "only_b": 1, "unknown": 2, "neither": 3, "both": 4}  # disagreements first
    items.sort(key=lambda i: order[i["verdict"]])
    for run, greedy in ((runs[0], greedy_a), (runs[1], greedy_b)):
        outcomes = [_outcome(greedy[k], a.kind) for k in matched]
        run["matched_correct"] = sum(1 for o in outcomes if o)
    return {
        "runs": runs, "kind": a.kind, "matched": len(matched), "only_in_a": len(greedy_a) - len(matched),
        "only_in_b": sum(1 for k in greedy_b if k not in greedy_a), "counts": counts,
        "items": items[:max_items], "items_cut": max(0, len(items) - max_items),
        "matched_by": "task_id" if a.kind == "agent" else "prompt",
    }
