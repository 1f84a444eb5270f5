"""Whether a checkpoint directory can be trusted: its manifest, and whether its files load.

Every checkpoint grove writes ends with ``manifest.json``: the size and SHA-256 of every other file, written last
(:func:`write_manifest`). :func:`verify_manifest` compares the files with it, which catches any change made after
the checkpoint was written (a flipped byte, a truncated or missing file). It cannot catch a file that was already
broken when it was hashed, and a checkpoint copied without its manifest has no checksums at all, so
:func:`unloadable_file` also reads each file the way a resume does: ``trainer_state.pt`` as a zip archive (whose
CRC-32 per record catches most flipped bytes even without a manifest) and with ``torch.load(weights_only=True)``,
every ``*.safetensors`` under ``model/`` tensor by tensor, and every JSON file. Without a manifest, a changed byte
inside a safetensors file's tensor data (or in a text file such as a chat template) still loads: only the
manifest can tell. A sharded checkpoint (``checkpoint.format: sharded``) has no weights under ``model/``; its
``sharded/.metadata`` must load and index only bytes that its shard files hold.
"""

from __future__ import annotations

import hashlib
import json
import zipfile
from pathlib import Path
from typing import Any

import torch

__all__ = [
    "MANIFEST",
    "MODEL_DIR",
    "SHARDED_DIR",
    "TRAINER_STATE",
    "manifest_mismatch",
    "read_trainer_state",
    "unloadable_file",
    "verify_manifest",
    "write_manifest",
]

MANIFEST = "manifest.json"
TRAINER_STATE = "trainer_state.pt"
MODEL_DIR = "model"
SHARDED_DIR = "sharded"  # checkpoint.format: sharded: the model and optimizer states as DCP files, one per rank
_MODEL_CONFIGS = ("config.json", "adapter_config.json")  # a full model, or a LoRA adapter


def _sha256(path: Path) -> str:
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def write_manifest(directory: Path) -> None:
    """``manifest.json``: size and SHA-256 of every file under ``directory`` (written last)."""
    files = sorted(p for p in directory.rglob("*") if p.is_file() and p.name != MANIFEST)
    entries = {str(p.relative_to(directory)): {"bytes": p.stat().st_size, "sha256": _sha256(p)} for p in files}
    (directory / MANIFEST).write_text(json.dumps({"files": entries}, indent=1))


def _manifest_entries(manifest: Path) -> dict[str, tuple[int, str]]:
    """``{relative path: (bytes, sha256)}``; raises ``ValueError`` for a manifest that is not one."""
    data = json.loads(manifest.read_text(encoding="utf-8"))
    files = data.get("files") if isinstance(data, dict) else None
    if not isinstance(files, dict):
        raise ValueError("no 'files' mapping")
    entries = {}
    for name, entry in files.items():
        if not isinstance(entry, dict) or not isinstance(entry.get("bytes"), int) or not isinstance(entry.get("sha256"), str):
            raise ValueError(f"the entry of {name} is not {{bytes, sha256}}")
        entries[name] = (entry["bytes"], entry["sha256"])
    return entries


def verify_manifest(directory: Path, *, checksums: bool = True) -> str | None:
    """``None`` if ``directory`` has its two parts and its files match ``manifest.json``, else what is wrong.

    ``checksums=False`` checks presence and sizes only (cheap: no file is read). A directory without
    ``manifest.json`` passes when its two parts exist (:func:`unloadable_file` then tells whether it loads)."""
    if not (directory / TRAINER_STATE).is_file():
        return f"{TRAINER_STATE} is missing"
    if not (directory / MODEL_DIR).is_dir():
        return f"{MODEL_DIR}/ is missing"
    return manifest_mismatch(directory, checksums=checksums)


def manifest_mismatch(directory: Path, *, checksums: bool = True, under: str = "") -> str | None:
    """The first file (of those whose path starts with ``under``, e.g. ``"model/"``) that does not match
    ``manifest.json``, or an unreadable manifest; ``None`` if they match or there is no manifest."""
    manifest = directory / MANIFEST
    if not manifest.is_file():
        return None
    try:
        entries = _manifest_entries(manifest)
    except (OSError, ValueError) as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        return f"its {MANIFEST} is unreadable ({' '.join(str(exc).split())})"
    for name, (size, digest) in entries.items():
        if not name.startswith(under):
            continue
        path = directory / name
        if not path.is_file():
            return f"{name} is missing"
        if path.stat().st_size != size:
            return f"{name} has {path.stat().st_size} bytes, the manifest says {size}"
        if checksums and _sha256(path) != digest:
            return f"{name} does not match its checksum"
    return None


def read_trainer_state(path: Path, *, mmap: bool = False) -> dict[str, Any]:
    """``trainer_state.pt`` as saved (plain tensors and containers: ``torch.load(weights_only=True)``)."""
    data = torch.load(path, weights_only=True, mmap=mmap)
    if not isinstance(data, dict):
        raise ValueError(f"holds a {type(data).__name__}, not the trainer state's fields")
    return data


def _trainer_state_problem(path: Path) -> str | None:
    with zipfile.ZipFile(path) as archive:
        bad = archive.testzip()  # reads every record and checks its CRC-32
    if bad is not None:
        return f"its record {bad} does not match its CRC-32"
    read_trainer_state(path, mmap=True)  # the pickle and the tensors' places; the tensor bytes stay on disk
    return None


def _safetensors_problem(path: Path) -> str | None:
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        for key in f.keys():  # noqa: SIM118 - safe_open has keys(), not iteration
            f.get_tensor(key)  # one tensor at a time: the header, the offsets and every byte read
    return None


def _sharded_problem(path: Path) -> str | None:
    """A DCP directory's ``.metadata`` (written last, by the coordinator) loads and every byte range it indexes
    lies in a file of the directory."""
    from torch.distributed.checkpoint import FileSystemReader

    metadata = FileSystemReader(path).read_metadata()
    ends: dict[str, int] = {}
    for info in (metadata.storage_data or {}).values():
        ends[info.relative_path] = max(ends.get(info.relative_path, 0), info.offset + info.length)
    if not ends:
        return "its .metadata indexes no data file"
    for name, end in sorted(ends.items()):
        if not (path / name).is_file():
            return f"{name} is missing"
        if (path / name).stat().st_size < end:
            return f"{name} has {(path / name).stat().st_size} bytes, its .metadata indexes {end}"
    return None


def _json_problem(path: Path) -> str | None:
    json.loads(path.read_text(encoding="utf-8"))
    return None


def unloadable_file(directory: Path, *, model_only: bool = False) -> str | None:
    """``None`` if the checkpoint's files load as a resume reads them, else the first file that does not and why:
    ``trainer_state.pt`` (zip CRC-32 and ``torch.load(weights_only=True)``; not with ``model_only``), ``model/``
    (its ``config.json`` or ``adapter_config.json`` and at least one ``*.safetensors``, each read in full) and
    every ``*.json``."""
    model = directory / MODEL_DIR
    if not any((model / name).is_file() for name in _MODEL_CONFIGS):
        return f"{' and '.join(f'{MODEL_DIR}/{name}' for name in _MODEL_CONFIGS)} are missing (one of them must be there)"
    sharded = (directory / SHARDED_DIR).is_dir()
    weights = sorted(model.glob("*.safetensors"))
    if not weights and not sharded:
        return f"{MODEL_DIR}/*.safetensors is missing (no weights file)"
    checks = [] if model_only else [(directory / TRAINER_STATE, _trainer_state_problem)]
    if sharded and not model_only:
        checks.append((directory / SHARDED_DIR, _sharded_problem))
    checks += [(path, _safetensors_problem) for path in weights]
    checks += [(path, _json_problem) for path in sorted((model if model_only else directory).rglob("*.json"))]
    for path, check in checks:
        name = path.relative_to(directory)
        try:
            problem = check(path)
        except Exception as exc:  # whatever a damaged file makes its reader raise
            return f"{name} does not load ({type(exc).__name__}: {_first_line(exc)})"
        if problem is not None:
            return f"{name}: {problem}"
    return None


def _first_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text if len(text) <= 160 else text[:157] + "..."
