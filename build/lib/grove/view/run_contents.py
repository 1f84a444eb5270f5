"""A run directory read into typed records: its resolved config, per-step metrics, held-out evaluations and
their samples, training samples, token details and summary.

Reading never stops at a damaged line: lines that are not records are skipped with one warning per file naming
them (the step logs through :class:`grove.infra.run_logs.JsonlLog`, the other files alike). A file that is
absent is listed in ``missing``, for the report to say so where it would have shown it."""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from grove.infra.run_logs import JsonlLog

log = logging.getLogger("grove.view")

RUN_FILES = ("config.yaml", "metrics.jsonl", "eval.jsonl", "samples.jsonl", "summary.json")
EVAL_SAMPLES = re.compile(r"^eval_samples_step(\d+)\.jsonl$")
TOKEN_DETAILS = "token_details.jsonl"


class NotARunError(ValueError):
    """The directory given is not a run directory written by ``grove train`` or ``grove sft``."""


@dataclass
class RunContents:
    """What one run directory holds. ``kind`` is ``single_turn``, ``agent``, ``sft`` or ``reward_model``."""

    path: Path
    kind: str
    config_text: str | None
    config: dict[str, Any]
    metrics: list[dict[str, Any]]
    evals: list[dict[str, Any]]
    summary: dict[str, Any] | None
    train_samples: list[dict[str, Any]]
    eval_samples: dict[int, list[dict[str, Any]]]
    token_details: list[dict[str, Any]] | None  # None: the run has no token_details.jsonl
    missing: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def objectives(self) -> list[str]:
        """Objectives named in the metrics (``objective/<name>/...``) or evaluations (``objective/<name>``), in order;
        else the reward columns of the samples when there are several."""
        names: dict[str, None] = {}
        for record in [*self.metrics, *self.evals]:
            for key in record:
                parts = key.split("/")
                if parts[0] == "objective" and len(parts) >= 2 and parts[1]:
                    names.setdefault(parts[1])
        if not names:
            columns = reward_columns(self.train_samples) or reward_columns(
                [row for rows in self.eval_samples.values() for row in rows]
            )
            if len(columns) > 1:
                names = dict.fromkeys(columns)
        return list(names)


def reward_columns(samples: list[dict[str, Any]]) -> list[str]:
    """The reward names of the samples' ``rewards`` dicts, in order of appearance."""
    names: dict[str, None] = {}
    for sample in samples:
        rewards = sample.get("rewards")
        if isinstance(rewards, dict):
            names.update(dict.fromkeys(rewards))
    return list(names)


def read_objects(path: Path) -> list[dict[str, Any]]:
    """The JSON objects of a JSONL file that has no ``step`` field per line (``eval_samples_step*.jsonl``); lines
    that are not objects are skipped with one warning naming them."""
    if not path.exists():
        return []
    rows, bad = [], []
    for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            row = None
        if isinstance(row, dict):
            rows.append(row)
        else:
            bad.append(number)
    if bad:
        shown = ", ".join(map(str, bad[:10])) + (f" and {len(bad) - 10} more" if len(bad) > 10 else "")
        log.warning("warning: %s: skipped line(s) %s, which are not JSON objects", path, shown)
    return rows


def _read_config(path: Path) -> tuple[str | None, dict[str, Any]]:
    if not path.exists():
        return None, {}
    text = path.read_text(encoding="utf-8", errors="replace")
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        log.warning("warning: %s is not valid YAML (%s); the run's kind is read from its logs", path, exc)
        data = None
    return text, data if isinstance(data, dict) else {}


def _read_summary(path: Path) -> dict[str, Any] | None:
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8", errors="replace"))
    except json.JSONDecodeError:
        log.warning("warning: %s is not valid JSON; the report leaves it out", path)
        return None
    return data if isinstance(data, dict) else None


def _run_kind(config: dict[str, Any], metrics: list[dict], samples: list[dict], eval_rows: list[dict]) -> str:
    if config.get("env") or any("trajectory" in s for s in [*samples, *eval_rows[:1]]):
        return "agent"
    if config.get("sft") and not samples and not any("reward_mean" in m for m in metrics):
        return "sft"
    if config.get("rm") and not samples and not any("reward_mean" in m for m in metrics):
        return "reward_model"
    return "single_turn"


def read_run(path: Path) -> RunContents:
    """Read the run directory ``path``; raises :class:`NotARunError` when it is not one."""
    path = Path(path)
    if not path.is_dir():
        raise NotARunError(f"{path} is not a directory; expected a run directory written by grove train or grove sft")
    if not any((path / name).exists() for name in RUN_FILES):
        raise NotARunError(
            f"{path} is not a run directory: it has none of {', '.join(RUN_FILES)} "
            "(written by grove train or grove sft into their output_dir)"
        )
    config_text, config = _read_config(path / "config.yaml")
    metrics = JsonlLog(path / "metrics.jsonl").read()
    evals = JsonlLog(path / "eval.jsonl").read()
    samples = JsonlLog(path / "samples.jsonl").read()
    eval_samples: dict[int, list[dict[str, Any]]] = {}
    for file in sorted(path.iterdir()):
        match = EVAL_SAMPLES.match(file.name)
        if match:
            eval_samples[int(match.group(1))] = read_objects(file)
    details_path = path / TOKEN_DETAILS
    token_details = JsonlLog(details_path).read() if details_path.exists() else None
    kind = _run_kind(config, metrics, samples, [r for rows in eval_samples.values() for r in rows])
    missing = [
        f"{name} ({why})"
        for name, why, absent in (
            ("config.yaml", "the resolved config", config_text is None),
            ("metrics.jsonl", "training curves", not metrics),
            ("eval.jsonl", "held-out evaluations", not evals),
            ("samples.jsonl", "training samples", not samples and kind not in ("sft", "reward_model")),
            ("eval_samples_step*.jsonl", "held-out samples", not eval_samples),
            ("summary.json", "the finished run's summary; the run may still be going or was stopped", not (path / "summary.json").exists()),
        )
        if absent
    ]
    return RunContents(
        path=path,
        kind=kind,
        config_text=config_text,
        config=config,
        metrics=metrics,
        evals=evals,
        summary=_read_summary(path / "summary.json"),
        train_samples=samples,
        eval_samples=eval_samples,
        token_details=token_details,
        missing=missing,
    )
