"""Atomic, resumable checkpoints.

A checkpoint is a directory ``RUN_DIR/checkpoints/step-NNNNNN`` holding

* ``model/``: the policy as safetensors (``save_pretrained``) plus its tokenizer, loadable by
  ``grove eval --model`` and by any transformers code; with ``model.lora``, the peft adapter
  (``adapter_config.json`` + ``adapter_model.safetensors``; ``grove export`` merges it into a full model);
* ``trainer_state.pt``: optimizer (full state keyed by parameter name, whatever strategy wrote it),
  scheduler, sampler position, step, and every RNG state (Python, NumPy, torch, and the rollout sampling
  generator; one set per rank in ``rank_states``), saved with plain tensors so it loads with
  ``torch.load(weights_only=True)``.

With several ranks, only rank 0 writes (the full states are gathered to it first:
:mod:`grove.distributed.checkpoint_state`), so a checkpoint is the same whatever strategy or world size
wrote it, and resumes under any other.

It is written to a temporary directory and renamed into place, so a run killed at any moment
(``kill -9`` included) leaves only complete checkpoints. Each checkpoint ends with ``manifest.json``: the size
and SHA-256 of every file, written last. ``--resume`` takes the newest checkpoint that verifies against its
manifest and warns about (and skips) any newer one that does not (truncated, corrupted, or missing files);
``keep_last`` counts and keeps verified checkpoints only, so it never deletes the last good one. A save that
fails (a full disk, say) removes its temporary directory, leaves the previous checkpoints as they were and
raises :class:`CheckpointWriteError` saying so.
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import random
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from grove.infra import fault_points

PREFIX = "step-"
MANIFEST = "manifest.json"

log = logging.getLogger(__name__)


class CheckpointWriteError(OSError):
    """A checkpoint could not be written; the previous checkpoints are intact."""


def _sha256(path: Path) -> str:
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def write_manifest(directory: Path) -> None:
    """``manifest.json``: size and SHA-256 of every file under ``directory`` (written last)."""
    files = sorted(p for p in directory.rglob("*") if p.is_file() and p.name != MANIFEST)
    entries = {str(p.relative_to(directory)): {"bytes": p.stat().st_size, "sha256": _sha256(p)} for p in files}
    (directory / MANIFEST).write_text(json.dumps({"files": entries}, indent=1))


def verify_checkpoint(directory: Path, *, checksums: bool = True) -> str | None:
    """``None`` if ``directory`` is a complete checkpoint matching its manifest, else what is wrong.

    ``checksums=False`` checks presence and sizes only (cheap: no file is read). A checkpoint from before
    manifests (no ``manifest.json``) is accepted when its two parts exist."""
    if not (directory / "trainer_state.pt").is_file() or not (directory / "model").is_dir():
        return "trainer_state.pt or model/ is missing"
    manifest = directory / MANIFEST
    if not manifest.is_file():
        return None
    try:
        entries = json.loads(manifest.read_text())["files"]
    except (ValueError, KeyError) as exc:
        return f"unreadable {MANIFEST} ({exc})"
    for name, entry in entries.items():
        path = directory / name
        if not path.is_file():
            return f"{name} is missing"
        if path.stat().st_size != entry["bytes"]:
            return f"{name} has {path.stat().st_size} bytes, the manifest says {entry['bytes']}"
        if checksums and _sha256(path) != entry["sha256"]:
            return f"{name} does not match its checksum"
    return None


@dataclass
class TrainerState:
    step: int
    optimizer: dict[str, Any]
    scheduler: dict[str, Any]
    sampler: dict[str, Any]  # the experience source's position (task order, environment seed stream)
    generator: torch.Tensor
    rng: dict[str, Any]
    controllers: dict[str, dict[str, Any]]
    # per rank, in rank order: {"generator": rollout generator state, "rng": capture_rng()}; rank 0's are also
    # ``generator`` / ``rng`` above (and all a checkpoint from before multi-rank runs has)
    rank_states: list[dict[str, Any]] = field(default_factory=list)


def capture_rng() -> dict[str, Any]:
    version, internal, gauss = random.getstate()
    np_state = np.random.get_state()
    return {
        "python": [version, list(internal), gauss],
        "numpy": [np_state[0], torch.from_numpy(np_state[1].astype(np.int64)), *np_state[2:]],
        "torch": torch.get_rng_state(),
    }


def restore_rng(rng: dict[str, Any]) -> None:
    version, internal, gauss = rng["python"]
    random.setstate((version, tuple(internal), gauss))
    name, keys, *rest = rng["numpy"]
    np.random.set_state((name, keys.numpy().astype(np.uint32), *rest))
    torch.set_rng_state(rng["torch"])


def checkpoint_dir(run_dir: Path, step: int) -> Path:
    return run_dir / "checkpoints" / f"{PREFIX}{step:06d}"


def list_checkpoints(run_dir: Path) -> list[Path]:
    root = run_dir / "checkpoints"
    if not root.is_dir():
        return []
    found = [p for p in root.iterdir() if p.is_dir() and p.name.startswith(PREFIX) and p.name[len(PREFIX) :].isdigit()]
    return sorted(found, key=lambda p: int(p.name[len(PREFIX) :]))


def latest_checkpoint(run_dir: Path) -> Path | None:
    """The newest checkpoint that verifies (:func:`verify_checkpoint`); newer broken ones are skipped with a
    warning naming what is wrong with each."""
    for candidate in reversed(list_checkpoints(run_dir)):
        problem = verify_checkpoint(candidate)
        if problem is None:
            return candidate
        log.warning("checkpoint %s is damaged (%s); falling back to the previous one", candidate, problem)
    return None


def _prune(run_dir: Path, keep_last: int) -> None:
    """Delete checkpoints older than the ``keep_last`` newest *verified* ones (a damaged one is never counted,
    so the last good checkpoint always stays)."""
    found = list_checkpoints(run_dir)
    good = [c for c in found if verify_checkpoint(c, checksums=False) is None]
    if len(good) <= keep_last:
        return
    oldest_kept = good[-keep_last]
    for old in found[: found.index(oldest_kept)]:
        shutil.rmtree(old, ignore_errors=True)


def save_checkpoint(
    run_dir: Path, write_model: Callable[[Path], None], tokenizer, state: TrainerState, keep_last: int
) -> Path:
    """Write ``state`` and the policy (``write_model(directory)``: ``save_pretrained`` or an adapter) atomically,
    with its manifest; then prune to ``keep_last`` verified checkpoints."""
    final = checkpoint_dir(run_dir, state.step)
    tmp = final.parent / f".tmp-{final.name}"
    try:
        if tmp.exists():
            shutil.rmtree(tmp)
        tmp.mkdir(parents=True)
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # the run's own progress bar is the one to read
        write_model(tmp / "model")
        tokenizer.save_pretrained(tmp / "model")
        fault_points.reached("checkpoint", state.step)
        torch.save(state.__dict__, tmp / "trainer_state.pt")
        write_manifest(tmp)
    except (OSError, RuntimeError) as exc:  # torch.save reports a full disk as RuntimeError
        shutil.rmtree(tmp, ignore_errors=True)
        previous = latest_checkpoint(run_dir)
        full = isinstance(exc, OSError) and exc.errno == errno.ENOSPC or "No space left" in str(exc)
        raise CheckpointWriteError(
            errno.ENOSPC if full else errno.EIO,
            f"could not write checkpoint {final.name} in {run_dir / 'checkpoints'} ({exc}); "
            + (f"the previous checkpoint {previous.name} is intact: " if previous else "no earlier checkpoint exists: ")
            + ("free disk space, then " if full else "")
            + f"continue with --resume {run_dir}",
        ) from exc
    if final.exists():  # a re-run of the same step after resume: replace it
        shutil.rmtree(final)
    tmp.rename(final)
    _prune(run_dir, keep_last)
    return final


def load_trainer_state(ckpt: Path) -> TrainerState:
    data = torch.load(ckpt / "trainer_state.pt", weights_only=True)
    return TrainerState(**data)


def load_model_weights(model: torch.nn.Module, ckpt: Path) -> None:
    """Load the checkpoint's safetensors into ``model`` in place (strict)."""
    from safetensors.torch import load_file

    files = sorted((ckpt / "model").glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"{ckpt / 'model'} holds no .safetensors file")
    state: dict[str, torch.Tensor] = {}
    for f in files:
        state.update(load_file(f))
    missing, unexpected = model.load_state_dict(state, strict=False)
    tied = {k for k in missing if k.endswith("lm_head.weight")} if getattr(model.config, "tie_word_embeddings", False) else set()
    missing = [k for k in missing if k not in tied]
    if missing or unexpected:
        raise RuntimeError(f"checkpoint {ckpt} does not match the model: missing {missing}, unexpected {unexpected}")
