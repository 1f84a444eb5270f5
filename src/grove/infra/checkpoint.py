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
(``kill -9`` included) leaves only complete checkpoints; resume picks the newest one.
"""

from __future__ import annotations

import random
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

PREFIX = "step-"


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
    found = list_checkpoints(run_dir)
    return found[-1] if found else None


def save_checkpoint(
    run_dir: Path, write_model: Callable[[Path], None], tokenizer, state: TrainerState, keep_last: int
) -> Path:
    """Write ``state`` and the policy (``write_model(directory)``: ``save_pretrained`` or an adapter) atomically."""
    final = checkpoint_dir(run_dir, state.step)
    tmp = final.parent / f".tmp-{final.name}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # the run's own progress bar is the one to read
    write_model(tmp / "model")
    tokenizer.save_pretrained(tmp / "model")
    torch.save(state.__dict__, tmp / "trainer_state.pt")
    if final.exists():  # a re-run of the same step after resume: replace it
        shutil.rmtree(final)
    tmp.rename(final)
    for old in list_checkpoints(run_dir)[:-keep_last]:
        shutil.rmtree(old, ignore_errors=True)
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
