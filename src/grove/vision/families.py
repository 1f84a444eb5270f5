"""Vision-language policies: which transformers families grove trains and the pixel inputs of their forwards.

A vision-language model directory (a ``config.json`` with a ``vision_config``) loads as
``AutoModelForImageTextToText`` with its ``AutoProcessor``; the policy's tokenizer is the processor's, and the
processor stays reachable from it (:func:`grove.vision.processors.processor_of`), so every place that encodes prompts can turn image parts
into pixel inputs. The processor expands each image into its image tokens inside the prompt's ids; the pixels
travel beside the ids as an :class:`grove.vision.image_table.ImageTable`, and the multimodal model (the
``ForConditionalGeneration``'s ``.model``) puts the image features in place of the image tokens in the prefill and
in every training forward. Image tokens are prompt tokens, so they never enter the loss.

Each supported family says how its processor's tensors become table rows and how the table becomes its forward's
keyword arguments (:data:`VISION_FAMILIES`). The three families share one property grove relies on: image features
are scattered into the image tokens of the whole batch in row-major order, so a batch's pixels are its samples'
pixels concatenated in sample order.

* ``llava`` (LLaVA-1.5 style: any vision tower, a projector, any decoder): ``pixel_values [images, C, H, W]``;
* ``idefics3`` / ``smolvlm`` (Idefics3, SmolVLM): each image split into crops, ``pixel_values [1, crops, C, H, W]``
  and ``pixel_attention_mask [1, crops, H, W]`` (the processor's all-zero padding crops are dropped).

Qwen2-VL / Qwen2.5-VL are refused for now, naming why: their multimodal rotary positions (three position ids per
token, computed from the image grid) differ from the one position per token that grove's rollout engine and
training forward share.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from grove.vision.image_table import ImageTable

__all__ = [
    "VISION_FAMILIES",
    "VisionFamily",
    "family_of",
    "is_vision_language",
    "multimodal_backbone",
    "pixel_inputs",
    "placeholder_token_ids",
]


@dataclass(frozen=True)
class VisionFamily:
    """How one transformers vision-language family's processor output becomes an :class:`ImageTable` of one prompt,
    and a table the keyword arguments of its multimodal forward."""

    name: str
    table_of: Callable[[Mapping[str, Tensor], int], ImageTable]
    forward_kwargs: Callable[[ImageTable], dict[str, Tensor]]
    nested_images: bool  # the processor takes images as one list per text (True) or one flat list (False)


def _llava_table(out: Mapping[str, Tensor], num_images: int) -> ImageTable:
    pixels = out["pixel_values"]
    if pixels.shape[0] != num_images:
        raise ValueError(f"the processor returned {pixels.shape[0]} images' pixels for {num_images} images")
    return ImageTable({"pixel_values": pixels}, {}, torch.zeros(num_images, dtype=torch.long),
                      torch.ones(num_images, dtype=torch.long), 1)


def _llava_kwargs(table: ImageTable) -> dict[str, Tensor]:
    return {"pixel_values": table.row_tensors["pixel_values"]}


def _idefics3_table(out: Mapping[str, Tensor], num_images: int) -> ImageTable:
    """One entry for the prompt's crops of all its images (Idefics3 does not say which crop is whose)."""
    pixels, mask = out["pixel_values"][0], out["pixel_attention_mask"][0]
    real = pixels.flatten(1).ne(0).any(dim=1)  # the processor pads a prompt's crops with all-zero ones
    pixels, mask = pixels[real], mask[real]
    return ImageTable({"pixel_values": pixels, "pixel_attention_mask": mask}, {}, torch.zeros(1, dtype=torch.long),
                      torch.tensor([pixels.shape[0]]), 1)


def _idefics3_kwargs(table: ImageTable) -> dict[str, Tensor]:
    return {
        "pixel_values": table.row_tensors["pixel_values"][None],
        "pixel_attention_mask": table.row_tensors["pixel_attention_mask"][None],
    }


#: the vision-language families grove trains, by ``config.model_type``
VISION_FAMILIES: dict[str, VisionFamily] = {
    "llava": VisionFamily("llava", _llava_table, _llava_kwargs, nested_images=False),
    "idefics3": VisionFamily("idefics3", _idefics3_table, _idefics3_kwargs, nested_images=True),
    "smolvlm": VisionFamily("smolvlm", _idefics3_table, _idefics3_kwargs, nested_images=True),
}

_REFUSED = {
    "qwen2_vl": "Qwen2-VL's multimodal rotary positions (three ids per token from the image grid)",
    "qwen2_5_vl": "Qwen2.5-VL's multimodal rotary positions (three ids per token from the image grid)",
}


def is_vision_language(config: Any) -> bool:
    """Whether a model config (or its ``config.json`` as a dict) describes a vision-language model."""
    if isinstance(config, Mapping):
        return "vision_config" in config
    return getattr(config, "vision_config", None) is not None


def family_of(config: Any) -> VisionFamily:
    """The :class:`VisionFamily` of a vision-language model config; a clear error for the others."""
    model_type = config.get("model_type") if isinstance(config, Mapping) else getattr(config, "model_type", None)
    if model_type in VISION_FAMILIES:
        return VISION_FAMILIES[model_type]
    why = _REFUSED.get(str(model_type))
    supported = ", ".join(sorted(VISION_FAMILIES))
    if why:
        raise NotImplementedError(
            f"vision-language model type {model_type!r} is not supported yet: {why} differ from the one position "
            f"per token grove's rollout and training forwards share. Supported: {supported}"
        )
    raise NotImplementedError(
        f"vision-language model type {model_type!r} is not supported; supported: {supported} (grove must know how "
        "its processor's pixel tensors are laid out)"
    )


def multimodal_backbone(model: nn.Module) -> nn.Module:
    """The module that merges image features into the token embeddings and runs the decoder: the
    ``ForConditionalGeneration``'s ``.model`` (a peft model is unwrapped first)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    backbone = getattr(base, "model", None)
    if backbone is None or not hasattr(backbone, "get_image_features"):
        raise TypeError(f"{type(base).__name__} has no multimodal backbone (.model with get_image_features)")
    return backbone


def placeholder_token_ids(model: nn.Module) -> list[int]:
    """The image placeholder token ids of a vision-language model (the tokens its forward replaces with image
    features); none for a text model."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    config = base.config
    if not is_vision_language(config):
        return []
    ids = {getattr(config, name, None) for name in ("image_token_id", "image_token_index")}
    return sorted(i for i in ids if isinstance(i, int) and i >= 0)


def pixel_inputs(model: nn.Module, images: ImageTable | None) -> dict[str, Tensor]:
    """The keyword arguments that carry ``images`` into ``model``'s forward (none without images); floating pixels
    in the model's dtype."""
    if images is None or images.num_images == 0:
        return {}
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    family = family_of(base.config)
    param = next(base.parameters())
    return {
        k: (v.to(device=param.device, dtype=param.dtype) if v.is_floating_point() else v.to(param.device))
        for k, v in family.forward_kwargs(images).items()
    }
