"""File-backed tasks: ``jsonl`` (JSON lines) and ``hf_dataset`` (local ``datasets`` files / folders).

Both read one row per problem, take the prompt from ``prompt_column`` (a string, or a list of chat
messages ``{"role", "content"}``) and the gold answer from ``answer_column`` (converted to ``str``).
All other columns are kept in :attr:`Example.columns` and reach reward functions as keyword
arguments. Without an eval file, ``eval_fraction`` of the rows is held out, chosen by ``seed``; both
splits keep file order. Relative paths are resolved against the current working directory. Nothing
is ever downloaded: ``hf_dataset`` only reads local files.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from grove.tasks.task import TASKS, Example, Task, TaskSplits


class FileTaskParams(BaseModel):
    """Parameters shared by the file-backed tasks."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    train_path: str = Field(description="Training data file (or, for hf_dataset, a save_to_disk folder).")
    eval_path: str | None = Field(
        None, description="Eval data file; if null, eval_fraction of train is held out."
    )
    eval_fraction: float = Field(
        0.1, ge=0, lt=1, description="Fraction of train rows held out for eval when there is no eval file."
    )
    prompt_column: str = Field("prompt", description="Column holding the prompt (string or chat messages).")
    answer_column: str = Field("answer", description="Column holding the gold answer (converted to str).")
    prompt_template: str | None = Field(
        None, description="If set, the prompt is this text with '{prompt}' replaced by the prompt column."
    )
    seed: int = Field(0, description="Seed choosing the held-out eval rows.")

    @field_validator("prompt_template")
    @classmethod
    def _has_placeholder(cls, v: str | None) -> str | None:
        if v is not None and "{prompt}" not in v:
            raise ValueError("prompt_template must contain the '{prompt}' placeholder")
        return v


class JsonlTaskParams(FileTaskParams):
    """Parameters of the ``jsonl`` task."""


class HFDatasetTaskParams(FileTaskParams):
    """Parameters of the ``hf_dataset`` task (local files only)."""

    format: Literal["auto", "json", "csv", "parquet", "disk"] = Field(
        "auto",
        description="Reader: 'json' (also JSON lines), 'csv', 'parquet', or 'disk' (datasets.load_from_disk). "
        "'auto' picks from the extension; a directory means 'disk'.",
    )
    train_split: str = Field(
        "train", description="Split used for training when the folder holds a DatasetDict."
    )
    eval_split: str | None = Field(
        None,
        description="Split used for eval when the folder holds a DatasetDict (else eval_path / eval_fraction).",
    )
    cache_dir: str | None = Field(
        None, description="datasets cache directory (default: the datasets default)."
    )


class MissingColumnError(ValueError):
    """A required column is missing from a data file (a ValueError, so the message prints unquoted)."""


def _existing(path: str, what: str) -> Path:
    p = Path(path).expanduser()
    if not p.exists():
        raise FileNotFoundError(f"{what} {path!r} does not exist (resolved to {p.resolve()})")
    return p


def read_jsonl(path: str) -> list[dict[str, Any]]:
    """Rows of a JSON-lines file (blank lines skipped); errors name the file and line."""
    p = _existing(path, "JSONL file")
    rows: list[dict[str, Any]] = []
    with p.open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{lineno}: invalid JSON: {e}") from None
            if not isinstance(row, dict):
                raise ValueError(f"{path}:{lineno}: expected a JSON object, got {type(row).__name__}")
            rows.append(row)
    return rows


def rows_to_examples(rows: Sequence[dict[str, Any]], source: str, params: FileTaskParams) -> list[Example]:
    """Turn rows into :class:`Example` s; errors name ``source``, the row and the columns that exist."""
    examples: list[Example] = []
    for i, row in enumerate(rows):
        for column in (params.prompt_column, params.answer_column):
            if column not in row:
                raise MissingColumnError(
                    f"column {column!r} not found in {source} (row {i}); available columns: "
                    f"{', '.join(map(str, row)) or '(none)'}"
                )
        prompt = row[params.prompt_column]
        if isinstance(prompt, str):
            if params.prompt_template is not None:
                prompt = params.prompt_template.replace("{prompt}", prompt)
        elif isinstance(prompt, list) and all(isinstance(m, dict) for m in prompt):
            if params.prompt_template is not None:
                raise ValueError(
                    f"{source} row {i}: prompt_template applies to string prompts, but column "
                    f"{params.prompt_column!r} holds chat messages"
                )
            prompt = [dict(m) for m in prompt]
        else:
            raise ValueError(
                f"{source} row {i}: column {params.prompt_column!r} must be a string or a list of chat "
                f"messages, got {type(prompt).__name__}"
            )
        answer = row[params.answer_column]
        if answer is None:
            raise ValueError(f"{source} row {i}: answer column {params.answer_column!r} is empty (null)")
        answer = str(answer)
        columns = {k: v for k, v in row.items() if k != params.prompt_column}
        columns["answer"] = answer
        examples.append(Example(prompt=prompt, answer=answer, columns=columns))
    return examples


def hold_out(
    examples: list[Example], fraction: float, seed: int, source: str
) -> tuple[list[Example], list[Example]]:
    """Split off ``round(fraction * n)`` examples (at least 1 when ``fraction > 0``) chosen by ``seed``.

    Returns ``(train, eval)``, each in original order.
    """
    n = len(examples)
    n_eval = round(fraction * n)
    if fraction > 0 and n_eval == 0 and n >= 2:
        n_eval = 1
    if n_eval >= n and n > 0:
        raise ValueError(f"{source}: holding out {n_eval} of {n} rows for eval leaves no training rows")
    chosen = set(random.Random(seed).sample(range(n), n_eval))
    train = [ex for i, ex in enumerate(examples) if i not in chosen]
    eval_ = [ex for i, ex in enumerate(examples) if i in chosen]
    return train, eval_


def _build(name: str, train: list[Example], eval_: list[Example] | None, params: FileTaskParams) -> Task:
    if not train:
        raise ValueError(f"task {name!r}: {params.train_path!r} has no rows")
    if eval_ is None:
        train, eval_ = hold_out(train, params.eval_fraction, params.seed, params.train_path)
    return TaskSplits(name=name, train=tuple(train), eval=tuple(eval_))


@TASKS.register("jsonl", params=JsonlTaskParams, summary="Prompts and answers from JSON-lines files")
def jsonl(params: JsonlTaskParams) -> Task:
    """Build a task from ``train_path`` (and ``eval_path``, or a held-out fraction) JSONL files."""
    train = rows_to_examples(read_jsonl(params.train_path), params.train_path, params)
    eval_ = None
    if params.eval_path is not None:
        eval_ = rows_to_examples(read_jsonl(params.eval_path), params.eval_path, params)
    return _build("jsonl", train, eval_, params)


_EXTENSIONS = {".json": "json", ".jsonl": "json", ".csv": "csv", ".parquet": "parquet"}


def _load_local(path: str, params: HFDatasetTaskParams, split: str | None) -> list[dict[str, Any]]:
    """Rows of a local file or ``save_to_disk`` folder, read with ``datasets`` (never the hub)."""
    import datasets

    p = _existing(path, "dataset path")
    fmt = params.format
    if fmt == "auto":
        if p.is_dir():
            fmt = "disk"
        else:
            fmt = _EXTENSIONS.get(p.suffix.lower(), "")
            if not fmt:
                raise ValueError(
                    f"cannot tell the format of {path!r} from its extension; set format to json, csv or parquet"
                )
    if fmt == "disk":
        loaded = datasets.load_from_disk(str(p))
        if isinstance(loaded, datasets.DatasetDict):
            split = split or "train"
            if split not in loaded:
                raise ValueError(f"split {split!r} not in {path!r}; splits: {', '.join(loaded)}")
            loaded = loaded[split]
    else:
        if p.is_dir():
            raise ValueError(f"{path!r} is a directory; format {fmt!r} expects a file")
        loaded = datasets.load_dataset(fmt, data_files=str(p), split="train", cache_dir=params.cache_dir)
    return loaded.to_list()


@TASKS.register(
    "hf_dataset",
    params=HFDatasetTaskParams,
    summary="Prompts and answers from local json/csv/parquet files or a save_to_disk folder (no hub)",
)
def hf_dataset(params: HFDatasetTaskParams) -> Task:
    """Build a task from local files read by ``datasets`` (``load_dataset(format, data_files=...)`` or
    ``load_from_disk``). For a ``DatasetDict`` folder, ``train_split``/``eval_split`` pick the splits."""
    train = rows_to_examples(
        _load_local(params.train_path, params, params.train_split), f"{params.train_path!r}", params
    )
    eval_ = None
    if params.eval_path is not None:
        source = params.eval_path
        eval_ = rows_to_examples(_load_local(source, params, params.eval_split), f"{source!r}", params)
    elif params.eval_split is not None:
        eval_ = rows_to_examples(
            _load_local(params.train_path, params, params.eval_split),
            f"{params.train_path!r} split {params.eval_split!r}",
            params,
        )
    return _build("hf_dataset", train, eval_, params)
