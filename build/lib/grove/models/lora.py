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
kernel reads the head's weight directly, :mod:`grove.kernels.output_projection`), so ``lm_head`` cannot carry an
adapter; the config rejects it at load time.

**Checkpoints.** A LoRA run's checkpoint ``RUN/checkpoints/step-N/model/`` holds the adapter only:
``adapter_config.json`` (rank, alpha, targets and ``base_model_name_or_path``: the base model's directory or
embedded name, e.g. ``smollm2-135m``) and ``adapter_model.safetensors`` (:func:`save_adapter`), plus the
tokenizer. :func:`load_adapter_weights` puts such weights back into a live adapter-wrapped model (resume).

**Export.** :func:`grove.models.merged_export.export_merged` folds an adapter into its base model.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Protocol

import torch
from peft import LoraConfig, PeftModel, get_peft_model, get_peft_model_state_dict, set_peft_model_state_dict
from peft.utils import load_peft_weights
from transformers import PreTrainedModel

from grove.models.model_files import ADAPTER_CONFIG_FILE, ADAPTER_WEIGHTS_FILE, quiet_peft

__all__ = [
    "LoraSpec",
    "adapter_parameter_count",
    "adapters_disabled",
    "apply_lora",
    "is_lora",
    "load_adapter_weights",
    "save_adapter",
    "trainable_parameter_count",
]

_HEAD_NAMES = ("lm_head",)


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


def apply_lora(
    model: PreTrainedModel, settings: LoraSpec, base_name: str | os.PathLike | None = None, task_type: str = "CAUSAL_LM"
) -> PeftModel:
    """Wrap a transformers causal LM with LoRA adapters (in place: the returned model shares ``model``'s weights).

    Only the adapter parameters require grad; the base weights are frozen. ``base_name`` (the model directory or
    embedded name the run loaded, e.g. ``smollm2-135m``) is recorded as ``base_model_name_or_path`` in the saved
    adapter config, where :func:`export_merged` finds the base model; default: the model's ``name_or_path``.
    ``task_type="SEQ_CLS"`` wraps a sequence classifier (a reward model): peft then trains and saves a full copy
    of its new score head (``modules_to_save``) beside the adapters.
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
        task_type=task_type,
    )
    try:
        with quiet_peft():
            peft_model = get_peft_model(model, config)
    except ValueError as exc:  # e.g. a target that names a module type LoRA cannot adapt
        raise ValueError(f"cannot add LoRA adapters: {exc}; Linear modules: {_linear_names(model)}") from exc
    for name, param in peft_model.named_parameters():
        param.requires_grad_("lora_" in name or "modules_to_save" in name)
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


