"""Export a grove checkpoint as a plain transformers model (``grove export CHECKPOINT_DIR OUT_DIR``).

:func:`export_merged` loads the base model named in a LoRA checkpoint's adapter config, loads the adapter, folds
``(alpha / r) · B A`` into each ``W`` (peft's ``merge_and_unload``, :func:`grove.models.pretrained.load_merged_adapter`)
and writes a plain transformers model (float32 safetensors + tokenizer) that ``AutoModelForCausalLM.from_pretrained``
loads without peft. A full-fine-tuning checkpoint is copied the same way, so the command works for both. Files that
do not load (a truncated safetensors file, a config or tokenizer file that is not JSON) raise
:class:`grove.models.model_files.ModelFilesError` naming the directory and the reader's complaint, before anything
is written. ``grove export`` first checks a grove checkpoint against its manifest
(:mod:`grove.training.checkpoint_export`), which also catches changed bytes that still load.

The model is written into a temporary directory beside ``out_dir`` and renamed into place. A write that fails (a
read-only directory, a full disk, a file-size limit) raises :class:`grove.infra.write_failures.RunWriteError`
(``could not write the exported model OUT_DIR: <cause>; <fix>, then <retry_hint>``) and leaves nothing behind: not
the temporary directory, nor the parent directories the export created.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from grove.infra.write_failures import reporting_write_failures
from grove.models.model_files import (
    ADAPTER_CONFIG_FILE,
    TOKENIZER_FILES,
    has_tokenizer,
    reading_model_files,
    work_offline,
)
from grove.models.pretrained import load_merged_adapter, load_tokenizer, model_class_of
from grove.vision.processors import save_tokenizer_files

__all__ = ["export_merged"]


def _model_dir(checkpoint_dir: Path) -> Path:
    if not checkpoint_dir.is_dir():
        raise FileNotFoundError(
            f"checkpoint directory {checkpoint_dir} does not exist; pass a grove checkpoint such as "
            "RUN/checkpoints/step-N"
        )
    model_dir = checkpoint_dir / "model"
    if model_dir.is_dir():
        return model_dir
    if (checkpoint_dir / ADAPTER_CONFIG_FILE).is_file() or (checkpoint_dir / "config.json").is_file():
        return checkpoint_dir  # the checkpoint's model/ directory itself
    raise FileNotFoundError(
        f"{checkpoint_dir} has no model/ directory: it is not a grove checkpoint (pass RUN/checkpoints/step-N)"
    )


def _check_out_dir(out_dir: Path) -> None:
    if out_dir.is_file() or (out_dir.is_dir() and any(out_dir.iterdir())):
        raise FileExistsError(f"{out_dir} already exists and is not empty; choose a new output directory or remove it")


def _write_model(model: Any, tokenizer: Any, out_dir: Path) -> None:
    """Save ``model`` and ``tokenizer`` into a temporary directory beside ``out_dir``, then rename it to
    ``out_dir``; on any failure remove the temporary directory and the parents this call created."""
    created = [p for p in out_dir.parents if not p.exists()]
    tmp = None
    try:
        out_dir.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".tmp-export-{out_dir.name}-", dir=out_dir.parent))
        umask = os.umask(0)
        os.umask(umask)
        tmp.chmod(0o777 & ~umask)  # mkdtemp makes it 0700
        model.save_pretrained(tmp, safe_serialization=True)
        save_tokenizer_files(tokenizer, tmp)
        _check_out_dir(out_dir)
        if out_dir.is_dir():
            out_dir.rmdir()  # empty (checked above)
        os.rename(tmp, out_dir)
    except BaseException:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
        for parent in created:  # innermost first; only those still empty
            try:
                parent.rmdir()
            except OSError:
                break
        raise


def export_merged(
    checkpoint_dir: str | os.PathLike, out_dir: str | os.PathLike, *, auto_class: type | None = None,
    config_updates: dict[str, Any] | None = None,
    retry_hint: str = "run the export again (or export to another directory)",
) -> Path:
    """Write a plain transformers model (safetensors + tokenizer) from a grove checkpoint to ``out_dir``.

    ``checkpoint_dir`` is ``RUN/checkpoints/step-N`` (or its ``model/`` directory). A LoRA checkpoint (an
    ``adapter_config.json`` in ``model/``) is merged into its base model (``base_model_name_or_path``: a local
    directory or an embedded name) in float32; a full checkpoint is loaded and saved as it is. Files that do not
    load raise :class:`ModelFilesError` before anything is written. The directory is written under a temporary
    name and renamed, so a failure leaves no partial ``out_dir``; a write that fails raises
    :class:`grove.infra.write_failures.RunWriteError` ending with ``retry_hint``. Returns ``out_dir``.

    ``auto_class``: the transformers class the model loads as (default: a policy's, ``AutoModelForCausalLM`` or for
    a vision-language model ``AutoModelForImageTextToText``; a reward model: ``AutoModelForSequenceClassification``,
    its base loaded with ``num_labels`` from ``config_updates["id2label"]``); ``config_updates``: attributes set on
    the written model's config (a reward model's heads and problem type).
    """
    checkpoint_dir, out_dir = Path(checkpoint_dir), Path(out_dir)
    model_dir = _model_dir(checkpoint_dir)
    _check_out_dir(out_dir)
    work_offline()
    if (model_dir / ADAPTER_CONFIG_FILE).is_file():
        labels = (config_updates or {}).get("id2label")
        base_kwargs = {"num_labels": len(labels)} if labels is not None else {}
        model, base_dir = load_merged_adapter(model_dir, auto_class, **base_kwargs)
        tokenizer_dir = model_dir if has_tokenizer(model_dir) else base_dir
    else:
        if not (model_dir / "config.json").is_file():
            raise FileNotFoundError(
                f"{model_dir} holds neither {ADAPTER_CONFIG_FILE} (a LoRA checkpoint) nor config.json (a full model)"
            )
        with reading_model_files(model_dir):
            model = (auto_class or model_class_of(model_dir)).from_pretrained(model_dir, dtype="auto",
                                                                            local_files_only=True)
        tokenizer_dir = model_dir
    if not has_tokenizer(tokenizer_dir):
        raise FileNotFoundError(f"no tokenizer in {tokenizer_dir} (expected {' or '.join(TOKENIZER_FILES)})")
    if config_updates:
        model.config.update(config_updates)
    with reading_model_files(tokenizer_dir, "the tokenizer"):
        tokenizer = load_tokenizer(tokenizer_dir, model.config)  # a vision-language model: its processor too

    with reporting_write_failures(out_dir, "the exported model", retry_hint):
        _write_model(model, tokenizer, out_dir)
    return out_dir
