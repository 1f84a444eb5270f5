"""Files and folders that appear whole or not at all: written beside their place and renamed over it.

Every cache, demonstration set, config copy and rewritten log grove writes goes through here. A write that fails
part-way (a full disk, a file-size limit, a row that does not serialise, an interrupt) leaves the old content and
no temporary file behind; readers never see half a file. The temporary name starts with a dot and sits in the same
folder, so the rename stays on one file system. New files get ``0o644`` (``mkstemp`` makes ``0o600``): caches may
be shared between users.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

__all__ = ["replace_atomically", "write_dir_atomic", "write_json_atomic", "write_jsonl_atomic", "write_text_atomic"]


def replace_atomically(path: Path, write: Callable[[Path], None], *, durable: bool = False) -> None:
    """Give ``path`` new content: ``write(tmp)`` fills a fresh temporary file next to it, which then replaces
    ``path`` (:func:`os.replace`). ``durable``: flush the file to the disk before the rename (what must survive a
    power cut, not only a crash of the process)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    tmp = Path(name)
    try:
        write(tmp)
        if durable:
            with open(tmp, "rb+") as f:
                os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_text_atomic(path: Path, text: str, *, durable: bool = False) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically."""
    replace_atomically(path, lambda tmp: tmp.write_text(text, encoding="utf-8"), durable=durable)


def write_json_atomic(path: Path, data: Any) -> None:
    """Write ``data`` as compact UTF-8 JSON to ``path`` atomically."""

    def write(tmp: Path) -> None:
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(data, f, ensure_ascii=False, separators=(",", ":"))

    replace_atomically(path, write)


def write_jsonl_atomic(path: Path, rows: Iterable[dict[str, Any]]) -> None:
    """Write ``rows`` as JSON lines to ``path``, renamed over it once every row is written and flushed to disk
    (nothing is left behind when a row fails)."""

    def write(tmp: Path) -> None:
        with open(tmp, "w", encoding="utf-8") as f:
            for row in rows:
                f.write(json.dumps(row, ensure_ascii=False))
                f.write("\n")

    replace_atomically(path, write, durable=True)


def write_dir_atomic(path: Path, fill: Callable[[Path], None]) -> None:
    """Create directory ``path`` by calling ``fill(tmp_dir)`` on a fresh temporary directory next to it, then
    renaming it into place. If ``path`` appeared meanwhile (another process built the same thing), the temporary
    copy is discarded."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp"))
    try:
        fill(tmp)
        os.chmod(tmp, 0o755)
        try:
            os.rename(tmp, path)
        except OSError:
            if not path.is_dir():
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
