"""File-backed tasks: ``jsonl`` (JSON lines) and ``hf_dataset`` (local ``datasets`` files / folders).

Both read one row per problem, take the prompt from ``prompt_column`` (a string, or a list of chat
messages ``{"role", "content"}``) and the gold answer from ``answer_column`` (converted to ``str``).
All other columns are kept in :attr:`Example.columns` and reach reward functions as keyword
arguments; ``answer_column: null`` reads rows without a gold answer. Without an eval file, ``eval_fraction`` of
the rows is held out, chosen by ``seed``; both splits keep file order. Relative paths are resolved against the
current working directory. Nothing is ever downloaded: ``hf_dataset`` only reads local files.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from grove.optional_packages import PILLOW, require
from grove.tasks.task import TASKS, Example, Task, TaskDataError, TaskSplits


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
    answer_column: str | None = Field(
        "answer",
        description="Column holding the gold answer (converted to str); null: the rows have no gold answer (the "
        "answer is empty), for rewards that judge a completion without one.",
    )
    prompt_template: str | None = Field(
        None, description="If set, the prompt is this text with '{prompt}' replaced by the prompt column."
    )
    image_column: str | None = Field(
        None,
        description="Column holding the row's images for a vision-language policy: an image file path (relative "
        "paths are read from the data file's folder) or a list of them; with hf_dataset also the dataset's Image "
        "values. They go before the text of the prompt's last user message. null: text prompts only.",
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


class MissingColumnError(TaskDataError):
    """A required column is missing from a data file (a ValueError, so the message prints unquoted)."""


class DataFileNotFoundError(TaskDataError, FileNotFoundError):
    """A task's data file does not exist (both a :class:`TaskDataError` and a ``FileNotFoundError``)."""


def _existing(path: str, what: str, field: str | None = None) -> Path:
    p = Path(path).expanduser()
    if not p.exists():
        fix = f"set task.{field} to an existing file" if field else "point the task's paths at existing files"
        raise DataFileNotFoundError(f"{what} {path!r} does not exist (resolved to {p.resolve()}); {fix}")
    return p


def read_jsonl_lines(path: str, field: str | None = None) -> list[tuple[int, dict[str, Any]]]:
    """``(line number, row)`` of each non-blank line of a JSON-lines file (1-based line numbers).

    Raises :class:`TaskDataError` naming the file and line: a missing (``field``: the parameter naming it) or
    unreadable file, text that is not UTF-8, invalid JSON, or a line that is not a JSON object.
    """
    p = _existing(path, "JSONL file", field)
    rows: list[tuple[int, dict[str, Any]]] = []
    for lineno, line in _text_lines(path, p, "JSONL"):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except (json.JSONDecodeError, RecursionError) as e:
            problem = f"{e.msg} (column {e.colno})" if isinstance(e, json.JSONDecodeError) else "nested too deeply"
            raise TaskDataError(
                f"{path}:{lineno}: invalid JSON: {problem}; each line must be one JSON object, "
                'e.g. {"prompt": "...", "answer": "..."}'
            ) from None
        if not isinstance(row, dict):
            raise TaskDataError(
                f"{path}:{lineno}: expected a JSON object, got {type(row).__name__}; each line must be one JSON "
                'object, e.g. {"prompt": "...", "answer": "..."}'
            )
        rows.append((lineno, row))
    return rows


def _text_lines(path: str, p: Path, kind: str) -> list[tuple[int, str]]:
    """``(line number, text)`` of each line of the text file ``p`` (a byte-order mark at its start dropped); a line
    that is not UTF-8 is a :class:`TaskDataError` naming the file and the line."""
    try:
        data = p.read_bytes()
    except OSError as e:
        raise TaskDataError(f"{path}: cannot read the {kind} file: {e.strerror or e}") from None
    lines = []
    for lineno, raw in enumerate(data.splitlines(), 1):
        try:
            lines.append((lineno, raw.decode("utf-8-sig" if lineno == 1 else "utf-8")))
        except UnicodeDecodeError as e:
            raise TaskDataError(
                f"{path}:{lineno}: not UTF-8 text ({e.reason} at byte {e.start} of the line); save the file as UTF-8"
            ) from None
    return lines


def read_jsonl(path: str) -> list[dict[str, Any]]:
    """Rows of a JSON-lines file (blank lines skipped); errors name the file and line."""
    return [row for _, row in read_jsonl_lines(path)]


def _check_messages(prompt: list, where: str, column: str) -> None:
    if not prompt:
        raise TaskDataError(f"{where}: column {column!r} is an empty list of chat messages")
    for j, message in enumerate(prompt):
        if not isinstance(message, dict):
            raise TaskDataError(
                f"{where}: column {column!r} must be a string or a list of chat messages "
                f'{{"role": ..., "content": ...}}; message {j} is a {type(message).__name__}'
            )
        for key in ("role", "content"):
            if key not in message:
                raise TaskDataError(
                    f"{where}: chat message {j} of column {column!r} has no {key!r}; each message needs "
                    '"role" and "content"'
                )
        if not isinstance(message["role"], str):
            raise TaskDataError(f"{where}: chat message {j} of column {column!r}: 'role' must be a string")


def _image_part(value: Any, where: str, column: str, image_dir: Path | None) -> dict[str, Any]:
    """One image part of a prompt from an image column's value: a path (relative to ``image_dir``), a PIL image, or
    a ``datasets`` Image value (``{"bytes": ..., "path": ...}``)."""
    if isinstance(value, dict) and (value.get("bytes") is not None or value.get("path")):
        if value.get("bytes") is not None:
            import io

            require(PILLOW, f"the images of column {column!r}")
            from PIL import Image

            return {"type": "image", "image": Image.open(io.BytesIO(value["bytes"]))}
        value = value["path"]
    if isinstance(value, str):
        path = Path(value).expanduser()
        if not path.is_absolute() and image_dir is not None:
            path = image_dir / path
        if not path.is_file():
            raise TaskDataError(
                f"{where}: image {value!r} of column {column!r} does not exist (resolved to {path}); relative image "
                "paths are read from the data file's folder"
            )
        return {"type": "image", "image": str(path)}
    if hasattr(value, "convert") and hasattr(value, "size"):  # a PIL image
        return {"type": "image", "image": value}
    raise TaskDataError(
        f"{where}: column {column!r} must hold an image path or a list of them, got {type(value).__name__}"
    )


def _with_images(prompt: str | list, value: Any, where: str, column: str, image_dir: Path | None) -> str | list:
    """``prompt`` with the row's images (``value``: one or a list) before the text of its last user message; the
    prompt unchanged when the row has none."""
    if value is None or value == []:
        return prompt
    values = value if isinstance(value, list) else [value]
    images = [_image_part(v, where, column, image_dir) for v in values]
    messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else [dict(m) for m in prompt]
    users = [i for i, m in enumerate(messages) if m.get("role") == "user"]
    if not users:
        raise TaskDataError(f"{where}: the prompt has no user message to put the images of column {column!r} in")
    last = messages[users[-1]]
    content = last["content"]
    text = [{"type": "text", "text": content}] if isinstance(content, str) else list(content)
    last["content"] = [*images, *text]
    return messages


def rows_to_examples(
    rows: Sequence[dict[str, Any]],
    source: str,
    params: FileTaskParams,
    locations: Sequence[str] | None = None,
    image_dir: Path | None = None,
) -> list[Example]:
    """Turn rows into :class:`Example` s; errors (:class:`TaskDataError`) name the row and the columns that exist.

    A row is named by ``locations[i]`` when given (e.g. ``"data.jsonl:12"``), else ``"<source> row <i>"``. With
    ``params.image_column`` a row's images join its prompt (relative paths read from ``image_dir``).
    """
    examples: list[Example] = []
    for i, row in enumerate(rows):
        where = locations[i] if locations is not None else f"{source} row {i}"
        for column, role, key in (
            (params.prompt_column, "prompt", "prompt_column"),
            (params.answer_column, "gold answer", "answer_column"),
        ):
            if column is not None and column not in row:
                raise MissingColumnError(
                    f"{where}: column {column!r} not found in this row; available columns: "
                    f"{', '.join(map(str, row)) or '(none)'}; add it, or set the task's {key} to the column "
                    f"holding the {role}"
                )
        prompt = row[params.prompt_column]
        if isinstance(prompt, str):
            if params.prompt_template is not None:
                prompt = params.prompt_template.replace("{prompt}", prompt)
        elif isinstance(prompt, list):
            _check_messages(prompt, where, params.prompt_column)
            if params.prompt_template is not None:
                raise TaskDataError(
                    f"{where}: prompt_template applies to string prompts, but column "
                    f"{params.prompt_column!r} holds chat messages"
                )
            prompt = [dict(m) for m in prompt]
        else:
            raise TaskDataError(
                f"{where}: column {params.prompt_column!r} must be a string or a list of chat "
                f"messages, got {type(prompt).__name__}"
            )
        if params.image_column is not None:
            prompt = _with_images(prompt, row.get(params.image_column), where, params.image_column, image_dir)
        answer = "" if params.answer_column is None else row[params.answer_column]
        if answer is None:
            raise TaskDataError(
                f"{where}: answer column {params.answer_column!r} is empty (null); give every row an answer, or set "
                "the task's answer_column: null when the rewards need no gold answer"
            )
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
        raise TaskDataError(
            f"the train split is empty: holding out {n_eval} of the {n} rows of {source} for eval leaves no "
            "training rows; lower eval_fraction, add rows, or give an eval_path"
        )
    chosen = set(random.Random(seed).sample(range(n), n_eval))
    train = [ex for i, ex in enumerate(examples) if i not in chosen]
    eval_ = [ex for i, ex in enumerate(examples) if i in chosen]
    return train, eval_


def _build(
    name: str,
    train: list[Example],
    eval_: list[Example] | None,
    params: FileTaskParams,
    train_source: str,
    eval_source: str | None = None,
) -> Task:
    if not train:
        raise TaskDataError(f"task {name!r}: the train split is empty: {train_source} has no rows")
    if eval_ is None:
        try:
            train, eval_ = hold_out(train, params.eval_fraction, params.seed, train_source)
        except TaskDataError as e:
            raise TaskDataError(f"task {name!r}: {e}") from None
    elif not eval_:
        raise TaskDataError(f"task {name!r}: the eval split is empty: {eval_source} has no rows")
    return TaskSplits(name=name, train=tuple(train), eval=tuple(eval_))


def _jsonl_examples(path: str, params: FileTaskParams, field: str) -> list[Example]:
    lines = read_jsonl_lines(path, field)
    return rows_to_examples([row for _, row in lines], path, params, [f"{path}:{n}" for n, _ in lines],
                            image_dir=Path(path).expanduser().parent)


@TASKS.register("jsonl", params=JsonlTaskParams, summary="Prompts and answers from JSON-lines files")
def jsonl(params: JsonlTaskParams) -> Task:
    """Build a task from ``train_path`` (and ``eval_path``, or a held-out fraction) JSONL files."""
    train = _jsonl_examples(params.train_path, params, "train_path")
    eval_ = None
    if params.eval_path is not None:
        eval_ = _jsonl_examples(params.eval_path, params, "eval_path")
    return _build("jsonl", train, eval_, params, repr(params.train_path), repr(params.eval_path))


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
                    raise TaskDataError(
                    f"cannot tell the format of {path!r} from its extension; set format to json, csv or parquet"
                )
    if fmt != "disk" and p.is_dir():
        raise TaskDataError(f"{path!r} is a directory; format {fmt!r} expects a file")
    if fmt in ("json", "csv"):  # text: datasets would fail on a byte that is not UTF-8 without naming its line
        _text_lines(path, p, fmt.upper())
    try:
        if fmt == "disk":
            loaded = datasets.load_from_disk(str(p))
        else:
            loaded = datasets.load_dataset(fmt, data_files=str(p), split="train", cache_dir=params.cache_dir)
    except (datasets.exceptions.DatasetsError, ValueError, OSError) as e:
        reason = e.__cause__ if isinstance(e, datasets.exceptions.DatasetsError) and e.__cause__ else e
        raise TaskDataError(f"{path!r}: cannot read it as {fmt}: {reason}") from None
    if isinstance(loaded, datasets.DatasetDict):
        split = split or "train"
        if split not in loaded:
            raise TaskDataError(f"split {split!r} not in {path!r}; splits: {', '.join(loaded)}")
        loaded = loaded[split]
    return loaded.to_list()


@TASKS.register(
    "hf_dataset",
    params=HFDatasetTaskParams,
    summary="Prompts and answers from local json/csv/parquet files or a save_to_disk folder (no hub)",
)
def hf_dataset(params: HFDatasetTaskParams) -> Task:
    """Build a task from local files read by ``datasets`` (``load_dataset(format, data_files=...)`` or
    ``load_from_disk``). For a ``DatasetDict`` folder, ``train_split``/``eval_split`` pick the splits."""
    train_source = repr(params.train_path)
    def folder(path: str) -> Path:
        p = Path(path).expanduser()
        return p if p.is_dir() else p.parent

    train = rows_to_examples(_load_local(params.train_path, params, params.train_split), train_source, params,
                             image_dir=folder(params.train_path))
    eval_, eval_source = None, None
    if params.eval_path is not None:
        eval_source = repr(params.eval_path)
        eval_ = rows_to_examples(_load_local(params.eval_path, params, params.eval_split), eval_source, params,
                                 image_dir=folder(params.eval_path))
    elif params.eval_split is not None:
        eval_source = f"{train_source} split {params.eval_split!r}"
        eval_ = rows_to_examples(_load_local(params.train_path, params, params.eval_split), eval_source, params,
                                 image_dir=folder(params.train_path))
    return _build("hf_dataset", train, eval_, params, train_source, eval_source)
