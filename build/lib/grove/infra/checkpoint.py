"""Atomic, resumable checkpoints.

A checkpoint is a directory ``RUN_DIR/checkpoints/step-NNNNNN`` holding

* ``model/``: the policy as safetensors (``save_pretrained``) plus its tokenizer, loadable by
  ``grove eval --model`` and by any transformers code; with ``model.lora``, the peft adapter
  (``adapter_config.json`` + ``adapter_model.safetensors``; ``grove export`` merges it into a full model);
* ``trainer_state.pt``: optimizer (full state keyed by parameter name, whatever strategy wrote it),
  scheduler, sampler position, step, and every RNG state (Python, NumPy, torch, and the rollout sampling
  generator; one set per rank in ``rank_states``), saved with plain tensors so it loads with
  ``torch.load(weights_only=True)``;
* ``manifest.json``: the size and SHA-256 of every other file, written last
  (:mod:`grove.infra.checkpoint_integrity`).

With several ranks, only rank 0 writes (the full states are gathered to it first:
:mod:`grove.distributed.checkpoint_state`), so a checkpoint is the same whatever strategy or world size
wrote it, and resumes under any other. A *sharded* checkpoint (``checkpoint.format: sharded``) holds the model
and optimizer states in ``sharded/`` instead, as ``torch.distributed.checkpoint`` files that every rank writes
its shard of into the temporary directory (:func:`start_checkpoint`, then :func:`save_checkpoint` with
``started=True``); ``model/`` then holds the model's config and tokenizer, and ``trainer_state.pt`` no optimizer
state. The manifest covers the shard files too, and the whole directory is renamed into place in one step.

It is written to a temporary directory and renamed into place, so a run killed at any moment
(``kill -9`` included) leaves only complete checkpoints. :func:`find_loadable` picks the newest checkpoint
that matches its manifest *and* loads (:func:`checkpoint_problem`), and names what is wrong with each newer one;
``keep_last`` counts and keeps complete checkpoints only, so it never deletes the last good one. A save that
fails (a full disk, a file-size limit, any error of the writers, or an interrupt) removes its temporary
directory, leaves the previous checkpoints as they were and raises :class:`CheckpointWriteError` naming the
part that failed, the cause, the previous intact checkpoint and how to continue.
"""

from __future__ import annotations

import errno
import logging
import random
import shutil
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np
import torch

from grove.infra import fault_points
from grove.infra.checkpoint_integrity import (
    MANIFEST,
    SHARDED_DIR,
    TRAINER_STATE,
    read_trainer_state,
    unloadable_file,
    verify_manifest,
    write_manifest,
)
from grove.infra.write_failures import (
    DISK_FULL,
    SIZE_LIMIT,
    RunWriteError,
    describe_write_failure,
    write_failure_cause,
)

__all__ = [
    "MANIFEST",
    "SHARDED_DIR",
    "CheckpointWriteError",
    "TrainerState",
    "capture_rng",
    "checkpoint_dir",
    "checkpoint_problem",
    "checkpoint_step",
    "find_loadable",
    "latest_checkpoint",
    "list_checkpoints",
    "load_model_weights",
    "load_trainer_state",
    "discard_checkpoint",
    "is_sharded",
    "restore_rng",
    "save_checkpoint",
    "sharded_model_refusal",
    "start_checkpoint",
    "temporary_dir",
    "verify_checkpoint",
    "write_manifest",
]

PREFIX = "step-"
_TMP = ".tmp-"  # a checkpoint being written
_DELETING = ".deleting-"  # a pruned checkpoint being removed

log = logging.getLogger(__name__)


class CheckpointWriteError(RunWriteError):
    """A checkpoint could not be written; the previous checkpoints are intact."""


def verify_checkpoint(directory: Path, *, checksums: bool = True) -> str | None:
    """``None`` if ``directory`` matches its manifest (or has none), else what is wrong
    (:func:`grove.infra.checkpoint_integrity.verify_manifest`)."""
    return verify_manifest(directory, checksums=checksums)


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


def is_sharded(directory: Path) -> bool:
    """Whether the checkpoint holds its model and optimizer states as DCP shards (``checkpoint.format: sharded``)."""
    return (directory / SHARDED_DIR).is_dir()


def sharded_model_refusal(checkpoint: Path, use: str) -> str:
    """Why ``use`` (``grove export``, ``model.init_from``) cannot read a sharded checkpoint, and the way on."""
    return (
        f"{use}: checkpoint {checkpoint} is sharded (checkpoint.format: sharded): its weights are "
        "torch.distributed.checkpoint shards in sharded/, not a transformers model, and only full checkpoints are "
        "read as models; continue the run with --resume and --set checkpoint.format=full (with more steps: "
        "--set train.steps=N) so that it writes a full checkpoint, and use that one"
    )


def checkpoint_step(directory: Path) -> int:
    """The step a checkpoint directory ``step-NNNNNN`` holds."""
    return int(directory.name[len(PREFIX) :])


def list_checkpoints(run_dir: Path) -> list[Path]:
    root = run_dir / "checkpoints"
    if not root.is_dir():
        return []
    found = [p for p in root.iterdir() if p.is_dir() and p.name.startswith(PREFIX) and p.name[len(PREFIX) :].isdigit()]
    return sorted(found, key=checkpoint_step)


def checkpoint_problem(directory: Path) -> str | None:
    """``None`` if the checkpoint matches its manifest (when it has one) and loads as a resume reads it, else
    what is wrong: a file changed since it was written, a file that does not load, or a trainer state that is not
    this step's."""
    problem = verify_manifest(directory) or unloadable_file(directory)
    if problem is not None:
        return problem
    state = read_trainer_state(directory / TRAINER_STATE, mmap=True)
    expected = {f.name for f in fields(TrainerState)}
    required = {f.name for f in fields(TrainerState) if f.default is MISSING and f.default_factory is MISSING}
    missing, unknown = sorted(required - set(state)), sorted(set(state) - expected)
    if missing or unknown:
        return f"{TRAINER_STATE} has fields {sorted(state)}: missing {missing}, unknown {unknown}"
    if state["step"] != checkpoint_step(directory):
        return f"{TRAINER_STATE} holds step {state['step']!r}, not {checkpoint_step(directory)}"
    return None


@dataclass(frozen=True)
class LoadableCheckpoint:
    """The newest checkpoint that loads (``None``: none does), and each newer one with what is wrong with it."""

    path: Path | None
    damaged: list[tuple[Path, str]]


def find_loadable(run_dir: Path) -> LoadableCheckpoint:
    """Try the checkpoints newest first (:func:`checkpoint_problem`); stop at the first that loads."""
    damaged = []
    for candidate in reversed(list_checkpoints(run_dir)):
        problem = checkpoint_problem(candidate)
        if problem is None:
            return LoadableCheckpoint(candidate, damaged)
        damaged.append((candidate, problem))
    return LoadableCheckpoint(None, damaged)


def latest_checkpoint(run_dir: Path) -> Path | None:
    """The newest checkpoint that matches its manifest and loads (:func:`find_loadable`)."""
    return find_loadable(run_dir).path


def _is_write_failure(exc: Exception, path: Path) -> bool:
    """An error of a writer (``OSError``; ``torch.save``'s ``RuntimeError``; safetensors' ``SafetensorError``;
    anything :func:`grove.infra.write_failures.write_failure_cause` recognises), not a bug."""
    from safetensors import SafetensorError

    return isinstance(exc, OSError | RuntimeError | SafetensorError) or write_failure_cause(exc, path) is not None


def _resume_hint(run_dir: Path, previous: Path | None) -> str:
    intact = (
        f"the previous checkpoint {previous.name} is intact" if previous is not None
        else "no earlier checkpoint exists, so the run starts again from step 0"
    )
    return f"continue with --resume {run_dir} ({intact})"


@contextmanager
def _reported(part: str, final: Path, run_dir: Path) -> Iterator[None]:
    """Turn a failed write of checkpoint ``final``'s ``part`` into a :class:`CheckpointWriteError` that names the
    part, the cause (:func:`grove.infra.write_failures.describe_write_failure`) and the previous intact checkpoint."""
    try:
        yield
    except CheckpointWriteError:
        raise
    except Exception as exc:
        if not _is_write_failure(exc, final):
            raise
        _release_writers(exc)
        previous = latest_checkpoint(run_dir)
        cause = write_failure_cause(exc, final.parent)
        hint = _resume_hint(run_dir, previous)
        message = describe_write_failure(exc, final.parent, f"checkpoint {final.name} ({part}) in", hint)
        code = {DISK_FULL: errno.ENOSPC, SIZE_LIMIT: errno.EFBIG}.get(cause, errno.EIO)
        raise CheckpointWriteError(code, message) from exc


def _release_writers(exc: BaseException) -> None:
    """Drop the local variables of the frames ``exc`` (and the exceptions it chains) passed through: a failed
    ``torch.save`` leaves its zip writer, and with it the half-written file open, in them. Kept alive with the
    exception, the file's space on a full disk would stay taken after the temporary directory is removed."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        traceback.clear_frames(exc.__traceback__)
        exc = exc.__cause__ or exc.__context__


def _remove_leftovers(root: Path) -> None:
    """Temporary directories a killed process left behind (a checkpoint half written or half pruned)."""
    for leftover in root.iterdir() if root.is_dir() else ():
        if leftover.is_dir() and leftover.name.startswith((_TMP, _DELETING)):
            shutil.rmtree(leftover)


def _prune(run_dir: Path, keep_last: int) -> None:
    """Delete checkpoints older than the ``keep_last`` newest *complete* ones (a damaged one is never counted,
    so the last good checkpoint always stays). Each is renamed out of the checkpoint names first, so a kill
    during the removal leaves no half-deleted directory that looks like a checkpoint."""
    found = list_checkpoints(run_dir)
    good = [c for c in found if verify_checkpoint(c, checksums=False) is None]
    if len(good) <= keep_last:
        return
    oldest_kept = good[-keep_last]
    for old in found[: found.index(oldest_kept)]:
        doomed = old.with_name(f"{_DELETING}{old.name}")
        old.rename(doomed)
        shutil.rmtree(doomed)


def _temporary(final: Path) -> Path:
    return final.parent / f"{_TMP}{final.name}"


def start_checkpoint(run_dir: Path, step: int) -> Path:
    """The empty temporary directory the checkpoint of ``step`` is written into (what a killed process left behind
    is removed first); the sharded states go into its ``sharded/`` before :func:`save_checkpoint` (``started=True``)
    completes it. Raises :class:`CheckpointWriteError`."""
    final = checkpoint_dir(run_dir, step)
    with _reported("its directory", final, run_dir):
        _remove_leftovers(final.parent)
        _temporary(final).mkdir(parents=True)
    return _temporary(final)


def temporary_dir(run_dir: Path, step: int) -> Path:
    """Where the checkpoint of ``step`` is written before it is renamed into place."""
    return _temporary(checkpoint_dir(run_dir, step))


def discard_checkpoint(run_dir: Path, step: int) -> None:
    """Remove the temporary directory of a checkpoint whose writing failed; earlier checkpoints stay."""
    shutil.rmtree(_temporary(checkpoint_dir(run_dir, step)), ignore_errors=True)


def save_checkpoint(
    run_dir: Path, write_model: Callable[[Path], None], tokenizer, state: TrainerState, keep_last: int,
    *, started: bool = False,
) -> Path:
    """Write ``state`` and the policy (``write_model(directory)``: ``save_pretrained``, an adapter, or the config
    alone) atomically, with its manifest; then prune to ``keep_last`` complete checkpoints. ``started``: the
    temporary directory exists already (:func:`start_checkpoint`) and holds the sharded states.

    Any failure (and an interrupt) removes the temporary directory; earlier checkpoints are never touched. A
    failed write raises :class:`CheckpointWriteError`."""
    final = checkpoint_dir(run_dir, state.step)
    tmp = _temporary(final)
    try:
        if not started:
            start_checkpoint(run_dir, state.step)
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # the run's own progress bar is the one to read
        with _reported("the model weights", final, run_dir):
            write_model(tmp / "model")
        with _reported("the tokenizer files", final, run_dir):
            tokenizer.save_pretrained(tmp / "model")
        fault_points.reached("checkpoint", state.step)
        with _reported(f"the trainer state {TRAINER_STATE}", final, run_dir):
            torch.save(state.__dict__, tmp / TRAINER_STATE)
        with _reported(f"the manifest {MANIFEST}", final, run_dir):
            write_manifest(tmp)
        with _reported("the rename into place", final, run_dir):
            if final.exists():  # a damaged checkpoint of this step, which the resume fell back past: replace it
                final.rename(final.with_name(f"{_DELETING}{final.name}"))
            tmp.rename(final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    try:
        _remove_leftovers(final.parent)
        _prune(run_dir, keep_last)
    except OSError as exc:
        raise CheckpointWriteError(
            exc.errno or errno.EIO,
            f"checkpoint {final.name} was written in {final.parent} and is intact, but pruning the older ones "
            f"(checkpoint.keep_last {keep_last}) failed: {exc}; fix that (or remove them yourself), then continue "
            f"with --resume {run_dir}",
        ) from exc
    return final


def load_trainer_state(ckpt: Path) -> TrainerState:
    return TrainerState(**read_trainer_state(ckpt / TRAINER_STATE))


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
