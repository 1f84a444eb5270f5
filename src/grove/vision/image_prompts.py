"""Prompts with images: chat messages whose content holds ``{"type": "image", "image": ...}`` parts, encoded by a
vision-language policy's processor into token ids (each image expanded into its image tokens) and an
:class:`grove.vision.image_table.ImageTable` of their pixels."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from grove.optional_packages import PILLOW, require
from grove.vision.image_table import ImageTable
from grove.vision.processors import processor_of

__all__ = [
    "ImagePromptError", "encode_image_prompts", "encode_with_images", "has_images", "image_placeholder", "load_image",
    "parts_messages",
]


class ImagePromptError(ValueError):
    """A prompt's image cannot be used: an unreadable file, a malformed value, or images for a text-only model. The
    message names the prompt and the fix; the CLI prints it as ``error: ...`` (exit code 2)."""


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


def load_image(part: Mapping[str, Any], where: str):
    """A PIL image from an image part: ``image`` (a path, a PIL image, an ``[H, W]`` / ``[H, W, C]`` array or nested
    list of 0-255 or 0-1 values) or ``path``."""
    require(PILLOW, "a prompt with images")
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


def parts_messages(prompt: str | Sequence[Mapping[str, Any]], system_prompt: str | None, where: str):
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
                images.append(load_image(part, where))
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


def encode_with_images(tokenizer: Any, text: str, images: Sequence[Any]) -> tuple[list[int], ImageTable | None]:
    """Ids of already rendered ``text`` whose image placeholders stand for ``images`` (loaded PIL images, in order),
    and their pixels (one owner; ``None`` without images): a stretch of a conversation tokenised on its own."""
    processor, family = processor_of(tokenizer)
    if not images:
        return list(processor(text=[text], return_tensors="pt", add_special_tokens=False)["input_ids"][0].tolist()), None
    pixels = [list(images)] if family.nested_images else list(images)
    out = processor(text=[text], images=pixels, return_tensors="pt", add_special_tokens=False)
    return out["input_ids"][0].tolist(), family.table_of(out, len(images))


def image_placeholder(tokenizer: Any) -> str:
    """The text a vision-language policy's chat template writes for an image (its processor's ``image_token``)."""
    processor, _ = processor_of(tokenizer)
    return str(getattr(processor, "image_token", "<image>"))


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
        messages, images = parts_messages(prompt, system_prompt, describe(i))
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
