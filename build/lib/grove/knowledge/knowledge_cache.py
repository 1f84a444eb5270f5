"""On-disk cache of the knowledge bases: where it lives, how entries are keyed, atomic writes.

Layout: ``<root>/knowledge/<name>/<key>...`` where ``<root>`` is the ``cache_dir`` parameter, else
``$GROVE_CACHE_DIR``, else ``$GROVE_CACHE``, else ``~/.cache/grove`` (the same root as the ``clinical_hpo``
task's cache). ``<key>`` is a 16-hex-digit SHA-1 of a JSON payload holding everything the entry depends on:
the parameters that shape it (never ``cache_dir``), the versions of the libraries and data packages it is
built from (read from package metadata, without importing them) and the module's ``CACHE_FORMAT`` integer,
bumped whenever the rendering or the index changes. A stale entry is therefore never read; old entries are
simply left behind.

Writes are atomic (:mod:`grove.atomic_files`): a JSON file or ``.npy`` array is written to a temporary file in
the same directory and moved into place; an index directory is written to a temporary directory and renamed.
Two processes building the same entry at once both succeed and one result is kept.
"""

from __future__ import annotations

import hashlib
import json
import os
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from grove.atomic_files import replace_atomically

__all__ = [
    "cache_key",
    "knowledge_cache_root",
    "package_version",
    "read_json",
    "write_npy_atomic",
]


def knowledge_cache_root(cache_dir: str | None) -> Path:
    """``cache_dir`` (or ``$GROVE_CACHE_DIR``, ``$GROVE_CACHE``, ``~/.cache/grove``) ``/knowledge``."""
    root = cache_dir or os.environ.get("GROVE_CACHE_DIR") or os.environ.get("GROVE_CACHE")
    base = Path(root).expanduser() if root else Path.home() / ".cache" / "grove"
    return base / "knowledge"


def package_version(name: str) -> str:
    """Installed version of distribution ``name`` from its metadata (does not import it); ``"absent"`` if
    missing."""
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "absent"


def cache_key(payload: dict[str, Any]) -> str:
    """16 hex digits of the SHA-1 of ``payload`` as canonical JSON (sorted keys)."""
    blob = json.dumps(payload, sort_keys=True, ensure_ascii=True, default=str)
    return hashlib.sha1(blob.encode()).hexdigest()[:16]


def read_json(path: Path) -> Any:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def write_npy_atomic(path: Path, array: np.ndarray) -> None:
    """Write ``array`` as a ``.npy`` file to ``path`` atomically."""

    def write(tmp: Path) -> None:
        with open(tmp, "wb") as f:
            np.save(f, array, allow_pickle=False)

    replace_atomically(path, write)
