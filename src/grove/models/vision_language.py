"""Vision-language policies: which transformers families grove trains, their processors, and the pixel inputs of
their forwards.

A vision-language model directory (a ``config.json`` with a ``vision_config``) loads as
``AutoModelForImageTextToText`` with its ``AutoProcessor``; the policy's tokenizer is the processor's, and the
processor stays reachable from it (:func:`processor_of`), so every place that encodes prompts can turn image parts
into pixel inputs. The processor expands each image into its image tokens inside the prompt's ids; the pixels
travel beside the ids as an :class:`grove.image_table.ImageTable`, and the multimodal model (the
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

import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from grove.image_table import ImageTable

__all__ = [
    "ImagePromptError",
    "VISION_FAMILIES",
    "VisionFamily",
    "attach_processor",
    "encode_image_prompts",
    "family_of",
    "has_images",
    "is_vision_language",
    "multimodal_backbone",
    "pixel_inputs",
    "placeholder_token_ids",
    "processor_of",
    "save_tokenizer_files",
    "tokenizer_files",
]


class ImagePromptError(ValueError):
    """A prompt's image cannot be used: an unreadable file, a malformed value, or images for a text-only model. The
    message names the prompt and the fix; the CLI prints it as ``error: ...`` (exit code 2)."""


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


# the processor of each vision-language tokenizer (the tokenizer is what grove passes around; it does not own the
# processor, and a processor must not outlive its model's run)
_PROCESSORS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def attach_processor(tokenizer: Any, processor: Any, family: VisionFamily) -> None:
    """Make ``processor`` (and the model's family) reachable from its ``tokenizer`` (:func:`processor_of`)."""
    _PROCESSORS[tokenizer] = (processor, family)


def processor_of(tokenizer: Any) -> tuple[Any, VisionFamily] | None:
    """``(processor, family)`` of a vision-language policy's tokenizer; ``None`` for a text-only one."""
    return _PROCESSORS.get(tokenizer)


def tokenizer_files(tokenizer: Any) -> Any:
    """What saves the files that load the policy's tokenizer again (``save_pretrained``): the processor of a
    vision-language policy (its tokenizer, image processor and chat template), else the tokenizer itself."""
    found = processor_of(tokenizer)
    return found[0] if found is not None else tokenizer


def save_tokenizer_files(tokenizer: Any, directory: str | Path) -> None:
    """Save :func:`tokenizer_files` of ``tokenizer`` into ``directory``."""
    tokenizer_files(tokenizer).save_pretrained(directory)


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


# ---------------------------------------------------------------------------------------------------- prompts
def _is_image_part(part: Any) -> bool:
    return isinstance(part, Mapping) and part.get("type") == "image"


def has_images(prompt: Any) -> bool:
    """Whether a prompt (a string, or chat messages whose content may be a list of parts) holds an image part."""
    if isinstance(prompt, str):
        return False
    return any(
        isinstance(m, Mapping) and isinstance(m.get("content"), list) and any(_is_image_part(p) for p in m["content"])
        for m in prompt
    )


def _load_image(part: Mapping[str, Any], where: str):
    """A PIL image from an image part: ``image`` (a path, a PIL image, an ``[H, W]`` / ``[H, W, C]`` array or nested
    list of 0-255 or 0-1 values) or ``path``."""
    from PIL import Image

    value = part.get("image", part.get("path"))
    if value is None:
        raise ImagePromptError(f"{where}: an image part needs 'image' (a file path, a PIL image or an array) or 'path'")
    if isinstance(value, Image.Image):
        return value.convert("RGB")
    if isinstance(value, (str, Path)):
        try:
            with Image.open(Path(value).expanduser()) as img:
                return img.convert("RGB")
        except (OSError, ValueError) as exc:
            raise ImagePromptError(f"{where}: cannot read the image file {str(value)!r}: {exc}") from None
    array = np.asarray(value)
    if array.ndim not in (2, 3) or array.size == 0 or not np.issubdtype(array.dtype, np.number):
        raise ImagePromptError(
            f"{where}: an image array must be numeric [H, W] or [H, W, C], got shape {array.shape} ({array.dtype})"
        )
    if array.dtype != np.uint8:
        scale = 255.0 if float(np.nanmax(array)) <= 1.0 else 1.0
        array = np.clip(np.nan_to_num(array.astype(np.float64)) * scale, 0, 255).astype(np.uint8)
    image = Image.fromarray(array)
    return image.convert("RGB")


def _parts_messages(prompt: str | Sequence[Mapping[str, Any]], system_prompt: str | None, where: str):
    """Chat messages with list-of-parts content (what vision-language chat templates iterate over), image parts
    reduced to ``{"type": "image"}``, and the prompt's images in order."""
    messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else [dict(m) for m in prompt]
    if system_prompt is not None and (not messages or messages[0].get("role") != "system"):
        messages = [{"role": "system", "content": system_prompt}, *messages]
    images = []
    for message in messages:
        content = message.get("content")
        if isinstance(content, str):
            message["content"] = [{"type": "text", "text": content}]
            continue
        if not isinstance(content, list):
            raise ImagePromptError(f"{where}: a message's content must be a string or a list of parts, got {content!r}")
        parts = []
        for part in content:
            if _is_image_part(part):
                images.append(_load_image(part, where))
                parts.append({"type": "image"})
            elif isinstance(part, Mapping) and part.get("type") == "text":
                parts.append({"type": "text", "text": str(part.get("text", ""))})
            else:
                raise ImagePromptError(
                    f"{where}: a content part must be {{'type': 'text', 'text': ...}} or {{'type': 'image', "
                    f"'image': ...}}, got {part!r}"
                )
        message["content"] = parts
    return messages, images


def encode_image_prompts(
    tokenizer: Any,
    prompts: Sequence[str | Sequence[Mapping[str, Any]]],
    *,
    system_prompt: str | None = None,
    describe: Callable[[int], str] = lambda i: f"prompt {i}",
) -> tuple[list[list[int]], ImageTable | None]:
    """Token ids of each prompt (image tokens expanded by the processor) and the pixels of their images, one table
    owner per prompt (``None`` when no prompt has an image). ``tokenizer`` is a vision-language policy's
    (:func:`processor_of`); a prompt with images for a text-only policy is an :class:`ImagePromptError`."""
    found = processor_of(tokenizer)
    if found is None:
        first = next((i for i, p in enumerate(prompts) if has_images(p)), None)
        if first is not None:
            raise ImagePromptError(
                f"{describe(first)} holds an image, but the policy is a text-only model; set model.name to a "
                "vision-language model directory (docs/vision-language.md)"
            )
        raise ImagePromptError("encode_image_prompts needs a vision-language policy's tokenizer")
    processor, family = found
    ids: list[list[int]] = []
    tables: list[ImageTable | None] = []
    for i, prompt in enumerate(prompts):
        messages, images = _parts_messages(prompt, system_prompt, describe(i))
        text = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        # the template wrote the special tokens already (as transformers' own apply_chat_template(tokenize=True))
        if images:
            pixels = [images] if family.nested_images else images
            out = processor(text=[text], images=pixels, return_tensors="pt", add_special_tokens=False)
            tables.append(family.table_of(out, len(images)))
        else:
            out = processor(text=[text], return_tensors="pt", add_special_tokens=False)
            tables.append(None)
        row = out["input_ids"][0].tolist()
        if not row:
            raise ImagePromptError(f"{describe(i)} encodes to no tokens")
        ids.append(row)
    if all(t is None for t in tables):
        return ids, None
    return ids, ImageTable.of_owners(tables)
