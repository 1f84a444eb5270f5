"""The rows of one supervised fine-tuning data file, each with the place it came from (``path:line``).

Files are read through 🤗 ``datasets`` (``load_dataset("json" | "parquet", data_files=..., split="train")``) with
its cache in a temporary folder, the table kept in memory and ``datasets`` offline, so nothing is left behind
and nothing goes over the network:

* ``.jsonl``: one JSON object per line; a row's origin is its line number (blank lines are skipped and counted);
* ``.json``: an array of objects (origin: the index + 1) or one object per line, like ``.jsonl``;
* ``.parquet``: one row per table row (origin: the row number, 1-based).

A JSON file must be UTF-8 text (a byte-order mark at its start is allowed), as for the ``jsonl`` task: a byte that
is not is an error naming the line, never replaced. Lines end at LF, CR LF or CR only: U+2028, U+0085
and the like are text inside a JSON string, as ``json.dumps(..., ensure_ascii=False)`` writes them.

When ``datasets`` cannot read a JSON file (a malformed line, a line that is not an object, values whose types
change between rows, which Arrow cannot put in one column), the file is read line by line with :mod:`json`
instead, so the error names the line. ``datasets`` fills keys a row lacks (also inside nested objects such as chat
messages) with ``None``: callers treat a ``None`` value as an absent key, as TRL's ``remove_none_values`` does.
"""

from __future__ import annotations

import codecs
import json
import logging
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

__all__ = ["DATA_SUFFIXES", "SftDataError", "json_kind", "read_rows"]

#: file name endings ``grove sft`` reads, and the reader for each
DATA_SUFFIXES = {".jsonl": "json", ".json": "json", ".parquet": "parquet"}

Row = tuple[str, dict[str, Any]]  # (origin "path:line", row)


class SftDataError(ValueError):
    """A data file or row that cannot be trained on; the message names the file, the line, the problem and the fix."""


def read_rows(path: str | Path) -> list[Row]:
    """Every row of the data file ``path`` with its origin ``"path:line"``, in file order.

    Raises :class:`SftDataError` for a missing file, a directory, an unknown file ending, an empty file, an
    unreadable file, a JSON file that is not UTF-8 text, a malformed JSON line and a row that is not a JSON object.
    """
    path = Path(path)
    accepted = ", ".join(DATA_SUFFIXES)
    if path.is_dir():
        raise SftDataError(f"{path} is a directory: name the data files in it (accepted: {accepted})")
    if not path.is_file():
        raise SftDataError(f"data file {path} does not exist (accepted: {accepted} files)")
    suffix = path.suffix.lower()
    if suffix not in DATA_SUFFIXES:
        raise SftDataError(f"{path}: unknown data file ending {suffix or '(none)'!r}; accepted: {accepted}")
    if suffix == ".parquet":
        rows = [(f"{path}:{i + 1}", row) for i, row in enumerate(_load_with_datasets("parquet", path))]
    else:
        rows = _json_rows(path)
    if not rows:
        raise SftDataError(f"{path}: the file holds no rows: give it at least one example, or leave it out")
    return rows


@contextmanager
def _offline_datasets() -> Iterator[None]:
    """``datasets`` with no network (it pings a download counter on every ``load_dataset`` unless offline, which
    stalls for seconds where there is no network), no progress bars and no error log of its own (a file it cannot
    read is read again here and its problem reported once); its settings are restored afterwards."""
    from datasets import config
    from datasets.utils.logging import (
        disable_progress_bar,
        enable_progress_bar,
        get_verbosity,
        is_progress_bar_enabled,
        set_verbosity,
    )

    saved = config.HF_HUB_OFFLINE, config.HF_UPDATE_DOWNLOAD_COUNTS
    bars, verbosity = is_progress_bar_enabled(), get_verbosity()
    set_verbosity(logging.CRITICAL)
    config.HF_HUB_OFFLINE, config.HF_UPDATE_DOWNLOAD_COUNTS = True, False
    disable_progress_bar()
    try:
        yield
    finally:
        config.HF_HUB_OFFLINE, config.HF_UPDATE_DOWNLOAD_COUNTS = saved
        set_verbosity(verbosity)
        if bars:
            enable_progress_bar()


def _load_with_datasets(builder: str, path: Path) -> list[dict[str, Any]]:
    import datasets

    try:
        with _offline_datasets(), tempfile.TemporaryDirectory(prefix="grove-sft-") as cache:
            table = datasets.load_dataset(
                builder, data_files=str(path), split="train", cache_dir=cache, keep_in_memory=True
            )
            return table.to_list()
    except Exception as exc:  # noqa: BLE001 - datasets wraps Arrow's and the builders' errors in many types
        if builder == "json":
            raise _DatasetsFailed from exc
        raise SftDataError(
            f"{path}: cannot read the Parquet file ({exc}); write it again, e.g. with pandas.to_parquet"
        ) from None


class _DatasetsFailed(Exception):
    """``datasets`` could not read a JSON file: it is read line by line instead, to name the bad line."""


def _json_rows(path: Path) -> list[Row]:
    text = _utf8_text(path)
    stripped = text.lstrip()
    if not stripped:
        return []
    is_array = path.suffix.lower() == ".json" and stripped.startswith("[")
    # line numbers of the non-blank lines: the i-th JSON-lines row is on the i-th of them
    lines = [n + 1 for n, line in enumerate(_lines(text)) if line.strip()]
    try:
        loaded = _load_with_datasets("json", path)
    except _DatasetsFailed:
        loaded = None
    if loaded is not None and (is_array or len(loaded) == len(lines)):
        where = range(1, len(loaded) + 1) if is_array else lines
        return [(f"{path}:{n}", row) for n, row in zip(where, loaded, strict=True)]
    return _array_rows(path, text) if is_array else _line_rows(path, text)


def _utf8_text(path: Path) -> str:
    """The file's text; :class:`SftDataError` naming the line of the first byte that is not UTF-8."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise SftDataError(f"{path}: cannot read the data file: {exc.strerror or exc}") from None
    bom = len(codecs.BOM_UTF8) if data.startswith(codecs.BOM_UTF8) else 0
    try:
        return data[bom:].decode("utf-8")
    except UnicodeDecodeError as exc:
        start = bom + exc.start
        before = data[:start]
        line = before.replace(b"\r\n", b"\n").replace(b"\r", b"\n").count(b"\n") + 1
        column = start - max(before.rfind(b"\n"), before.rfind(b"\r")) - 1
        raise SftDataError(
            f"{path}:{line}: not UTF-8 text ({exc.reason} at byte {column} of the line); save the file as UTF-8"
        ) from None


def _lines(text: str) -> list[str]:
    """The lines of ``text``, split at LF, CR LF and CR (as JSON-lines readers do), not at the other
    characters :meth:`str.splitlines` breaks at, which a JSON string may hold."""
    return text.replace("\r\n", "\n").replace("\r", "\n").split("\n")


def _array_rows(path: Path, text: str) -> list[Row]:
    try:
        items = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SftDataError(
            f"{path}:{exc.lineno}: not valid JSON ({exc.msg}, column {exc.colno}): fix the file "
            "(a .json file holds an array of objects, or one object per line)"
        ) from None
    if not isinstance(items, list):
        raise SftDataError(f"{path}:1: a .json file holds an array of objects or one object per line")
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise SftDataError(f"{path}:{i + 1}: array element {i + 1} is {json_kind(item)}, not an object: make it one")
    return [(f"{path}:{i + 1}", item) for i, item in enumerate(items)]


def _line_rows(path: Path, text: str) -> list[Row]:
    rows: list[Row] = []
    for n, line in enumerate(_lines(text), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise SftDataError(
                f"{path}:{n}: not valid JSON ({exc.msg}, column {exc.colno}): fix the line "
                "(each line holds one JSON object)"
            ) from None
        if not isinstance(row, dict):
            raise SftDataError(f"{path}:{n}: the line holds {json_kind(row)}, not a JSON object: make it one")
        rows.append((f"{path}:{n}", row))
    return rows


def json_kind(value: Any) -> str:
    """How a JSON value is named in messages: ``a string``, ``a list``, ``null``, ..."""
    names = {str: "a string", list: "a list", dict: "an object", bool: "a boolean", int: "a number", float: "a number"}
    return "null" if value is None else names.get(type(value), type(value).__name__)
