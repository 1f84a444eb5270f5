"""LoRA adapters (via peft): train a few low-rank matrices instead of the whole policy.

**Why.** Full fine-tuning keeps, per parameter, a float32 weight, its gradient and AdamW's two moments
(16 bytes), and a KL-regularised run keeps a second, frozen copy of the weights as the reference policy.
With LoRA (``model.lora`` in the config) the base weights are frozen: each targeted projection ``W``
(``out × in``) gets ``W x + (alpha / r) · B A x`` with ``A`` (``r × in``) and ``B`` (``out × r``, zero at
the start), and only ``A`` and ``B`` have gradients and optimizer state: ``r · (in + out)`` parameters per
projection, typically well under 1% of the model.

**The reference policy is the base model with adapters disabled.** The frozen base *is* the initial policy, so
the reference log-probs are computed by the same model under :func:`adapters_disabled` (peft's
``disable_adapter``): no second copy of the weights. Because ``B`` starts at zero, the policy and the reference
agree exactly at step 0.

**The output head stays un-adapted.** grove fuses the output projection with the log-softmax (a hand-written
kernel reads the head's weight directly, :mod:`grove.core.output_projection`), so ``lm_head`` cannot carry an
adapter; the config rejects it at load time.

**Checkpoints.** A LoRA run's checkpoint ``RUN/checkpoints/step-N/model/`` holds the adapter only:
``adapter_config.json`` (rank, alpha, targets and ``base_model_name_or_path``: the base model's directory or
embedded name, e.g. ``smollm2-135m``) and ``adapter_model.safetensors`` (:func:`save_adapter`), plus the
tokenizer. :func:`load_adapter_weights` puts such weights back into a live adapter-wrapped model (resume).

**Export.** :func:`export_merged` (``grove export CHECKPOINT_DIR OUT_DIR``) loads the base model named in the
adapter config, loads the adapter, folds ``(alpha / r) · B A`` into each ``W`` (peft's ``merge_and_unload``)
and writes a plain transformers model (float32 safetensors + tokenizer) that
``AutoModelForCausalLM.from_pretrained`` loads without peft. A full-fine-tuning checkpoint is copied the same
way, so the command works for both. Files that do not load (a truncated safetensors file, a config or tokenizer
file that is not JSON) raise :class:`ModelFilesError` naming the directory and the reader's complaint, before
anything is written. ``grove export`` first checks a grove checkpoint against its manifest
(:mod:`grove.training.checkpoint_export`), which also catches changed bytes that still load.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
import warnings
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Protocol

import torch
from peft import LoraConfig, PeftModel, get_peft_model, get_peft_model_state_dict, set_peft_model_state_dict
from peft.utils import load_peft_weights
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel

from grove.models.pretrained import resolve_model_path

__all__ = [
    "ADAPTER_CONFIG_FILE",
    "ADAPTER_WEIGHTS_FILE",
    "LoraSpec",
    "ModelFilesError",
    "adapter_parameter_count",
    "adapters_disabled",
    "apply_lora",
    "export_merged",
    "is_lora",
    "load_adapter_weights",
    "save_adapter",
    "trainable_parameter_count",
]

ADAPTER_CONFIG_FILE = "adapter_config.json"
ADAPTER_WEIGHTS_FILE = "adapter_model.safetensors"
_HEAD_NAMES = ("lm_head",)
_TOKENIZER_FILES = ("tokenizer_config.json", "tokenizer.json")


class ModelFilesError(ValueError):
    """A model directory's files (weights, config, tokenizer) do not load: damaged or incomplete."""


@contextlib.contextmanager
def _loading(directory: Path, what: str = "the model") -> Iterator[None]:
    """Turn what a reader raises for a damaged file into a :class:`ModelFilesError` naming ``directory``."""
    from safetensors import SafetensorError

    try:
        yield
    except ModelFilesError:
        raise
    except (OSError, ValueError, RuntimeError, SafetensorError) as exc:
        reason = " ".join(str(exc).split()) or type(exc).__name__
        raise ModelFilesError(f"{what} in {directory} does not load ({type(exc).__name__}: {reason})") from exc


class LoraSpec(Protocol):
    """What :func:`apply_lora` reads: ``grove.config.lora_section.LoraSettings`` or any look-alike."""

    r: int
    alpha: float
    target_modules: Sequence[str]
    dropout: float


def is_lora(model: Any) -> bool:
    """Whether ``model`` is wrapped with peft adapters."""
    return isinstance(model, PeftModel)


def adapters_disabled(model: Any) -> AbstractContextManager[Any]:
    """A context in which ``model`` runs as its base model (peft's ``disable_adapter``); a null context for a
    model without adapters. Used for the reference log-probs of a LoRA run: no second copy of the weights."""
    return model.disable_adapter() if is_lora(model) else contextlib.nullcontext()


def trainable_parameter_count(model: torch.nn.Module) -> int:
    """Number of parameters with ``requires_grad`` (the adapters only, for a LoRA model)."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


@contextlib.contextmanager
def _quiet_peft() -> Iterator[None]:
    """peft calls a deprecated transformers v5 alias (``is_gradient_checkpointing``): not the user's concern."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
        yield


def _matches(name: str, target: str) -> bool:
    """peft's rule for a list of target names: the module's full name, or its suffix after a dot."""
    return name == target or name.endswith("." + target)


def _adaptable_dims(module: torch.nn.Module) -> tuple[int, int] | None:
    """``(in, out)`` of a module LoRA can adapt (Linear, Embedding, transformers' Conv1D), else ``None``."""
    if isinstance(module, torch.nn.Linear):
        return module.in_features, module.out_features
    if isinstance(module, torch.nn.Embedding):
        return module.num_embeddings, module.embedding_dim
    if type(module).__name__ == "Conv1D" and hasattr(module, "nf"):  # GPT-2 style: weight is (in, out)
        return module.weight.shape[0], module.weight.shape[1]
    return None


def _check_settings(settings: LoraSpec) -> list[str]:
    targets = list(settings.target_modules)
    if not targets:
        raise ValueError("LoRA target_modules is empty: name at least one projection, e.g. [q_proj, v_proj]")
    head = [t for t in targets if t.rsplit(".", 1)[-1] in _HEAD_NAMES]
    if head:
        raise ValueError(
            f"LoRA target {head[0]!r} is the output projection, which grove fuses with the log-softmax (log-probs "
            "are computed from the head's weight directly by a hand-written kernel), so an adapter on the head is "
            "not supported; target the attention/MLP projections instead"
        )
    if settings.r < 1:
        raise ValueError(f"LoRA rank r must be >= 1, got {settings.r}")
    return targets


def _linear_names(model: torch.nn.Module) -> list[str]:
    """The distinct last name components of the model's Linear modules, head excluded (for error messages)."""
    names = {n.rsplit(".", 1)[-1] for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)}
    return sorted(names - set(_HEAD_NAMES))


def _missing_targets_error(model: torch.nn.Module, missing: list[str]) -> ValueError:
    return ValueError(
        f"LoRA target_modules {missing} match no module of {type(model).__name__}; its Linear modules are named "
        f"{_linear_names(model)} (set model.lora.target_modules to some of these)"
    )


def adapter_parameter_count(model: torch.nn.Module, settings: LoraSpec) -> int:
    """Adapter parameters LoRA with ``settings`` adds to ``model``: ``r · (in + out)`` per targeted module.

    ``model`` is the plain (unwrapped) model; for a model already wrapped with adapters, the count of its adapter
    parameters. The memory planner computes the same number from ``config.json`` alone
    (:func:`grove.infra.memory_plan.lora_parameter_count`)."""
    if is_lora(model):
        return sum(p.numel() for n, p in model.named_parameters() if "lora_" in n)
    targets = _check_settings(settings)
    total, matched = 0, set()
    for name, module in model.named_modules():
        hit = [t for t in targets if _matches(name, t)]
        dims = _adaptable_dims(module) if hit else None
        if dims is not None:
            matched.update(hit)
            total += settings.r * (dims[0] + dims[1])
    missing = [t for t in targets if t not in matched]
    if missing:
        raise _missing_targets_error(model, missing)
    return total


def apply_lora(model: PreTrainedModel, settings: LoraSpec, base_name: str | os.PathLike | None = None) -> PeftModel:
    """Wrap a transformers causal LM with LoRA adapters (in place: the returned model shares ``model``'s weights).

    Only the adapter parameters require grad; the base weights are frozen. ``base_name`` (the model directory or
    embedded name the run loaded, e.g. ``smollm2-135m``) is recorded as ``base_model_name_or_path`` in the saved
    adapter config, where :func:`export_merged` finds the base model; default: the model's ``name_or_path``.
    """
    targets = _check_settings(settings)
    names = [n for n, _ in model.named_modules()]
    missing = [t for t in targets if not any(_matches(n, t) for n in names)]
    if missing:
        raise _missing_targets_error(model, missing)
    config = LoraConfig(
        r=settings.r,
        lora_alpha=settings.alpha,
        target_modules=targets,
        lora_dropout=settings.dropout,
        bias="none",
        task_type="CAUSAL_LM",
    )
    try:
        with _quiet_peft():
            peft_model = get_peft_model(model, config)
    except ValueError as exc:  # e.g. a target that names a module type LoRA cannot adapt
        raise ValueError(f"cannot add LoRA adapters: {exc}; Linear modules: {_linear_names(model)}") from exc
    for name, param in peft_model.named_parameters():
        param.requires_grad_("lora_" in name)
    if base_name is not None:
        peft_model.peft_config["default"].base_model_name_or_path = str(base_name)
    return peft_model


def _require_peft(model: Any, what: str) -> PeftModel:
    if not is_lora(model):
        raise TypeError(
            f"{what} needs a model wrapped with LoRA adapters (apply_lora), got {type(model).__name__}; "
            "save a full model with model.save_pretrained(directory)"
        )
    return model


def save_adapter(
    model: PeftModel, directory: str | os.PathLike, state_dict: dict[str, torch.Tensor] | None = None
) -> Path:
    """Write ``adapter_config.json`` and ``adapter_model.safetensors`` (the adapter only) to ``directory``.

    ``state_dict``, when given, is the full state dict of the peft model (keys as in ``model.state_dict()``,
    e.g. gathered from sharded training); it is filtered to the adapter's entries before saving."""
    _require_peft(model, "save_adapter")
    directory = Path(directory)
    if state_dict is not None:
        adapter = get_peft_model_state_dict(model, state_dict=state_dict, save_embedding_layers=False)
        expected = get_peft_model_state_dict(model, save_embedding_layers=False)
        missing = sorted(set(expected) - set(adapter))
        if missing:
            raise ValueError(
                f"the state dict given to save_adapter lacks {len(missing)} adapter entries (e.g. {missing[0]!r}); "
                "pass the full state dict of the peft model (keys as in peft_model.state_dict())"
            )
    # peft's save_pretrained filters a full state dict with the same get_peft_model_state_dict; grove never resizes
    # the vocabulary, so the (frozen) embedding matrices are not saved with the adapter
    model.save_pretrained(directory, safe_serialization=True, state_dict=state_dict, save_embedding_layers=False)
    return directory


def load_adapter_weights(model: PeftModel, directory: str | os.PathLike) -> None:
    """Load ``directory/adapter_model.safetensors`` into ``model``'s adapters, in place (resume).

    Raises ``FileNotFoundError`` if the file is missing and ``ValueError`` if its keys or shapes differ from the
    model's adapters (a different rank or different target modules)."""
    _require_peft(model, "load_adapter_weights")
    directory = Path(directory)
    weights = directory / ADAPTER_WEIGHTS_FILE
    if not weights.is_file():
        raise FileNotFoundError(
            f"{weights} does not exist: {directory} is not a LoRA adapter directory (expected {ADAPTER_CONFIG_FILE} "
            f"and {ADAPTER_WEIGHTS_FILE}, as written by save_adapter)"
        )
    loaded = load_peft_weights(str(directory), device="cpu")
    expected = get_peft_model_state_dict(model, save_embedding_layers=False)
    missing, unexpected = sorted(set(expected) - set(loaded)), sorted(set(loaded) - set(expected))
    if missing or unexpected:
        raise ValueError(
            f"{weights} does not match the model's adapters: {len(missing)} missing keys {missing[:3]}, "
            f"{len(unexpected)} unexpected keys {unexpected[:3]} (different target_modules?)"
        )
    shapes = [
        f"{k}: {tuple(v.shape)} in the file, {tuple(expected[k].shape)} in the model"
        for k, v in loaded.items()
        if v.shape != expected[k].shape
    ]
    if shapes:
        raise ValueError(f"{weights} does not match the model's adapters (different rank r?): {shapes[0]}")
    result = set_peft_model_state_dict(model, loaded)
    leftover = [k for k in getattr(result, "unexpected_keys", []) if "lora_" in k]
    if leftover:
        raise ValueError(f"{weights}: adapter entries the model has no place for: {leftover[:3]}")


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


def _has_tokenizer(directory: Path) -> bool:
    return any((directory / f).is_file() for f in _TOKENIZER_FILES)


def _offline() -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def load_merged_adapter(model_dir: Path) -> tuple[PreTrainedModel, Path]:
    """The base model named in ``model_dir``'s adapter config with the adapter merged in; and the base directory."""
    with _loading(model_dir, "the adapter"):
        config = json.loads((model_dir / ADAPTER_CONFIG_FILE).read_text(encoding="utf-8"))
    base = config.get("base_model_name_or_path") if isinstance(config, dict) else None
    if not base:
        raise ValueError(
            f"{model_dir / ADAPTER_CONFIG_FILE} names no base_model_name_or_path; set it to the base model's "
            "directory or embedded name (e.g. smollm2-135m)"
        )
    try:
        base_dir = resolve_model_path(base)
    except (ValueError, FileNotFoundError) as exc:
        raise ValueError(
            f"the adapter's base model {base!r} (base_model_name_or_path in {model_dir / ADAPTER_CONFIG_FILE}) "
            f"cannot be loaded: {exc}"
        ) from exc
    with _loading(base_dir, "the adapter's base model"):
        base_model = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32, local_files_only=True)
    with _loading(model_dir, "the adapter"), _quiet_peft():
        peft_model = PeftModel.from_pretrained(base_model, str(model_dir))
    return peft_model.merge_and_unload(), base_dir


def export_merged(checkpoint_dir: str | os.PathLike, out_dir: str | os.PathLike) -> Path:
    """Write a plain transformers model (safetensors + tokenizer) from a grove checkpoint to ``out_dir``.

    ``checkpoint_dir`` is ``RUN/checkpoints/step-N`` (or its ``model/`` directory). A LoRA checkpoint (an
    ``adapter_config.json`` in ``model/``) is merged into its base model (``base_model_name_or_path``: a local
    directory or an embedded name) in float32; a full checkpoint is loaded and saved as it is. Files that do not
    load raise :class:`ModelFilesError` before anything is written. The directory is written under a temporary
    name and renamed, so a failure leaves no partial ``out_dir``. Returns ``out_dir``.
    """
    checkpoint_dir, out_dir = Path(checkpoint_dir), Path(out_dir)
    model_dir = _model_dir(checkpoint_dir)
    _check_out_dir(out_dir)
    _offline()
    if (model_dir / ADAPTER_CONFIG_FILE).is_file():
        model, base_dir = load_merged_adapter(model_dir)
        tokenizer_dir = model_dir if _has_tokenizer(model_dir) else base_dir
    else:
        if not (model_dir / "config.json").is_file():
            raise FileNotFoundError(
                f"{model_dir} holds neither {ADAPTER_CONFIG_FILE} (a LoRA checkpoint) nor config.json (a full model)"
            )
        with _loading(model_dir):
            model = AutoModelForCausalLM.from_pretrained(model_dir, dtype="auto", local_files_only=True)
        tokenizer_dir = model_dir
    if not _has_tokenizer(tokenizer_dir):
        raise FileNotFoundError(f"no tokenizer in {tokenizer_dir} (expected {' or '.join(_TOKENIZER_FILES)})")
    with _loading(tokenizer_dir, "the tokenizer"):
        tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir, local_files_only=True)

    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".tmp-export-{out_dir.name}-", dir=out_dir.parent))
    umask = os.umask(0)
    os.umask(umask)
    tmp.chmod(0o777 & ~umask)  # mkdtemp makes it 0700
    try:
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        _check_out_dir(out_dir)
        if out_dir.is_dir():
            out_dir.rmdir()  # empty (checked above)
        os.rename(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out_dir
