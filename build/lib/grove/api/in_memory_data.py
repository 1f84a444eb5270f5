"""A task's rows handed over from Python (a 🤗 ``datasets.Dataset``, or a list of dicts), kept in the run directory.

The rows are written once to ``OUTPUT_DIR/data/train.jsonl`` (and ``eval.jsonl``) and the config's task becomes the
``jsonl`` task reading them, so the run directory holds everything the run trained on: it resumes from the command
line like a run started there, and its config says where its data is. A file that is already there is never
replaced by other rows: a directory holding a run (or another call's data) keeps its files, and the error says
how to go on.

Reading the rows (:func:`rows_file`) and writing them (:meth:`RowsFile.write`) are two steps, so that a call writes
its rows only once every check that can refuse it has passed: a refused call leaves the directory as it was.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grove.atomic_files import write_text_atomic
from grove.config import ConfigError
from grove.infra.write_failures import reporting_write_failures

__all__ = ["DATA_DIR", "RowsFile", "rows_file"]

DATA_DIR = "data"


def _rows(dataset: Any, argument: str) -> Iterable[Mapping[str, Any]]:
    """The rows of a ``datasets.Dataset``, a list (or other iterable) of mappings; a ``DatasetDict`` or a single
    mapping is refused, naming the argument and the fix."""
    if isinstance(dataset, Mapping):
        splits = ", ".join(map(repr, dataset)) if all(isinstance(k, str) for k in dataset) else ""
        raise ConfigError(
            f"{argument}: expected rows (a datasets.Dataset or a list of dicts), got a mapping"
            + (f" with the keys {splits}; pass one split, e.g. {argument}=ds['train']" if splits else "")
        )
    if isinstance(dataset, str | bytes) or not isinstance(dataset, Iterable):
        raise ConfigError(
            f"{argument}: expected rows (a datasets.Dataset or a list of dicts), got {type(dataset).__name__}; for "
            "a data file, set the config's task to {id: jsonl, train_path: ...} or {id: hf_dataset, ...}"
        )
    return dataset


def _json_line(row: Any, index: int, argument: str) -> str:
    if not isinstance(row, Mapping):
        raise ConfigError(f"{argument} row {index}: expected a dict of columns, got {type(row).__name__}")
    try:
        return json.dumps(dict(row), ensure_ascii=False, allow_nan=False, default=_plain)
    except (TypeError, ValueError) as exc:
        bad = next((k for k, v in row.items() if not _serialisable(v)), None)
        where = f" column {bad!r}" if bad is not None else ""
        raise ConfigError(
            f"{argument} row {index}{where}: cannot be stored as JSON ({exc}); keep the columns to strings, numbers, "
            "booleans, lists and dicts (chat prompts are lists of {role, content} dicts)"
        ) from None


def _plain(value: Any) -> Any:
    """NumPy scalars and arrays (what ``datasets`` may hand out with a numpy format) as plain values."""
    if hasattr(value, "tolist"):
        return value.tolist()
    raise TypeError(f"{type(value).__name__} is not JSON data")


def _serialisable(value: Any) -> bool:
    try:
        json.dumps(value, allow_nan=False, default=_plain)
    except (TypeError, ValueError):
        return False
    return not (isinstance(value, float) and not math.isfinite(value))


@dataclass(frozen=True)
class RowsFile:
    """A split's rows as the text of their JSONL file, and where that file goes; nothing is written until
    :meth:`write`."""

    path: Path
    text: str
    output_dir: str
    argument: str

    def written(self) -> bool:
        """Whether the file already holds these rows.

        Raises:
            ConfigError: it holds other rows (a run's data is never replaced).
        """
        if not self.path.exists():
            return False
        if self.path.read_text(encoding="utf-8") != self.text:
            raise ConfigError(
                f"{self.argument}: {self.path} already holds other rows (the data of the run in {self.output_dir}, "
                "or of another call with this output_dir); a run's data is never replaced. Pass the same rows to "
                "resume that run, or choose a new output_dir"
            )
        return True

    def write(self) -> None:
        """Write the file (a file already holding these rows is left as it is).

        Raises:
            ConfigError: the file holds other rows by now.
            RunWriteError: the file could not be written (a full disk), naming it.
        """
        if self.written():
            return
        with reporting_write_failures(self.path, f"the rows of {self.argument} to", "call again"):
            self.path.parent.mkdir(parents=True, exist_ok=True)
            write_text_atomic(self.path, self.text)


def rows_file(dataset: Any, output_dir: str, split: str, argument: str) -> RowsFile:
    """``dataset``'s rows as the file ``OUTPUT_DIR/data/<split>.jsonl`` (under ``output_dir`` as given, relative or
    absolute), checked and not yet written.

    Raises:
        ConfigError: the rows are not rows of JSON data (naming the row and column), there are none, or the file
            exists with other rows (a run's data is never replaced).
    """
    lines = [_json_line(row, i, argument) for i, row in enumerate(_rows(dataset, argument))]
    if not lines:
        raise ConfigError(f"{argument}: no rows; a task needs at least one example in each split")
    rows = RowsFile(Path(output_dir) / DATA_DIR / f"{split}.jsonl", "\n".join(lines) + "\n", output_dir, argument)
    rows.written()
    return rows
