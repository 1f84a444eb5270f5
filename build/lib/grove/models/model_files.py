"""What every model reader shares: the file names of a model directory, offline mode, and one error for files
that do not load.

A grove checkpoint's ``model/`` directory holds a full transformers model (``config.json`` + safetensors) or a LoRA
adapter (``adapter_config.json`` + ``adapter_model.safetensors``), plus the tokenizer files. Readers wrap their loads
in :func:`reading_model_files`, so a truncated safetensors file or a config that is not JSON becomes a
:class:`ModelFilesError` naming the directory and the reader's complaint.
"""

from __future__ import annotations

import contextlib
import os
import warnings
from collections.abc import Iterator
from pathlib import Path

__all__ = [
    "ADAPTER_CONFIG_FILE",
    "ADAPTER_WEIGHTS_FILE",
    "TOKENIZER_FILES",
    "ModelFilesError",
    "has_tokenizer",
    "quiet_peft",
    "reading_model_files",
    "work_offline",
]

ADAPTER_CONFIG_FILE = "adapter_config.json"
ADAPTER_WEIGHTS_FILE = "adapter_model.safetensors"
TOKENIZER_FILES = ("tokenizer_config.json", "tokenizer.json")


class ModelFilesError(ValueError):
    """A model directory's files (weights, config, tokenizer) do not load: damaged or incomplete."""


@contextlib.contextmanager
def reading_model_files(directory: Path, what: str = "the model") -> Iterator[None]:
    """Turn what a reader raises for a damaged file into a :class:`ModelFilesError` naming ``directory``."""
    from safetensors import SafetensorError

    try:
        yield
    except ModelFilesError:
        raise
    except (OSError, ValueError, RuntimeError, SafetensorError) as exc:
        reason = " ".join(str(exc).split()) or type(exc).__name__
        raise ModelFilesError(f"{what} in {directory} does not load ({type(exc).__name__}: {reason})") from exc


@contextlib.contextmanager
def quiet_peft() -> Iterator[None]:
    """peft calls a deprecated transformers v5 alias (``is_gradient_checkpointing``): not the user's concern."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
        yield


def has_tokenizer(directory: Path) -> bool:
    """Whether ``directory`` holds a tokenizer's files."""
    return any((directory / f).is_file() for f in TOKENIZER_FILES)


def work_offline() -> None:
    """Keep transformers and the hub client from reaching the network (unless the user set these already)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
