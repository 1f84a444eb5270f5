"""``grove export``: a grove checkpoint checked before it is written out as a plain transformers model.

:func:`grove.models.merged_export.export_merged` loads and writes the model; a flipped byte inside the weights still loads,
so a checkpoint's ``model/`` is first compared with its ``manifest.json`` and read the way a resume reads it
(:mod:`grove.infra.checkpoint_integrity`). A damaged checkpoint is refused with a :class:`DamagedCheckpointError`
naming the file and the newest earlier checkpoint of the run that is intact, and nothing is written.
"""

from __future__ import annotations

import os
from pathlib import Path

from grove.infra import checkpoint as ckpt
from grove.infra.checkpoint_integrity import MODEL_DIR, manifest_mismatch, unloadable_file
from grove.models.merged_export import export_merged
from grove.models.model_files import ModelFilesError

__all__ = ["DamagedCheckpointError", "export_checkpoint"]


class DamagedCheckpointError(ValueError):
    """The checkpoint to export is damaged; the message names the file and the previous intact checkpoint."""


def _checkpoint_root(path: Path) -> Path | None:
    """The checkpoint directory ``path`` is (``RUN/checkpoints/step-N``) or whose ``model/`` it is; ``None`` for a
    plain model directory."""
    if (path / MODEL_DIR).is_dir():
        return path
    if path.name == MODEL_DIR and (path.parent / ckpt.MANIFEST).is_file():
        return path.parent
    return None


def model_problem(checkpoint: Path) -> str | None:
    """What is wrong with the checkpoint's ``model/`` (its manifest entries, then whether its files load)."""
    return manifest_mismatch(checkpoint, under=f"{MODEL_DIR}/") or unloadable_file(checkpoint, model_only=True)


def _earlier_intact(checkpoint: Path) -> Path | None:
    """The newest checkpoint of the same run before ``checkpoint`` whose ``model/`` is intact."""
    if checkpoint not in ckpt.list_checkpoints(checkpoint.parent.parent):
        return None
    step = ckpt.checkpoint_step(checkpoint)
    earlier = [c for c in ckpt.list_checkpoints(checkpoint.parent.parent) if ckpt.checkpoint_step(c) < step]
    return next((c for c in reversed(earlier) if model_problem(c) is None), None)


def _refusal(checkpoint: Path, problem: str, out_dir: Path) -> DamagedCheckpointError:
    previous = _earlier_intact(checkpoint)
    way_on = (
        f"export the previous checkpoint instead: grove export {previous} {out_dir}" if previous is not None
        else "no earlier checkpoint of this run is intact"
    )
    return DamagedCheckpointError(f"checkpoint {checkpoint} is damaged: {problem}; nothing was written; {way_on}")


def export_checkpoint(checkpoint_dir: str | os.PathLike, out_dir: str | os.PathLike) -> Path:
    """Check a grove checkpoint (``RUN/checkpoints/step-N`` or its ``model/``), then write it to ``out_dir`` as a
    plain transformers model (:func:`grove.models.merged_export.export_merged`). Raises :class:`DamagedCheckpointError`
    (a ``ValueError``) without writing anything when a file of its ``model/`` is damaged."""
    checkpoint_dir, out_dir = Path(checkpoint_dir), Path(out_dir)
    root = _checkpoint_root(checkpoint_dir)
    if root is not None and ckpt.is_sharded(root):
        raise ValueError(ckpt.sharded_model_refusal(root, "grove export") + "; nothing was written")
    if root is not None:
        problem = model_problem(root)
        if problem is not None:
            raise _refusal(root, problem, out_dir)
    try:
        return export_merged(checkpoint_dir, out_dir)
    except ModelFilesError as exc:
        if root is None:
            raise
        raise _refusal(root, str(exc), out_dir) from exc
