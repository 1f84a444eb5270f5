"""Prompts as an engine takes them: token ids and, for a vision-language policy, the pixels of their images.

:func:`encode_prompt_batch` is the one call a prompt source makes: text prompts go through
:func:`grove.rollout.engine.encode_prompts`; a vision-language policy's prompts (chat messages whose content may hold
``{"type": "image", "image": ...}`` parts) through its processor
(:func:`grove.vision.image_prompts.encode_image_prompts`), which expands every image into its image tokens.
:func:`fit_encoded` fits them to the model's context as :func:`grove.rollout.engine.fit_prompts` does, except that a
prompt with images is never cut (its image tokens must all stay, with their pixels).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import torch

from grove.rollout.engine import PromptTooLongError, encode_prompts, fit_prompts
from grove.vision.image_prompts import encode_image_prompts, has_images
from grove.vision.image_table import ImageTable
from grove.vision.processors import processor_of

__all__ = ["EncodedPrompts", "encode_prompt_batch", "fit_encoded"]


@dataclass(frozen=True)
class EncodedPrompts:
    """``ids`` of each prompt and ``images``, one owner per prompt (``None``: no prompt holds an image)."""

    ids: list[list[int]]
    images: ImageTable | None = None

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def image_kwargs(self) -> dict[str, ImageTable]:
        """``{"images": ...}`` for an engine's ``generate`` when the prompts hold images, else nothing (so an engine
        written before images keeps working for text prompts)."""
        return {"images": self.images} if self.images is not None else {}

    def rows(self, start: int, end: int) -> EncodedPrompts:
        """Prompts ``start .. end - 1``."""
        images = None if self.images is None else self.images.select(torch.arange(start, min(end, len(self.ids))))
        return EncodedPrompts(self.ids[start:end], images)


def encode_prompt_batch(
    tokenizer: Any,
    prompts: Sequence[str | list[dict[str, Any]]],
    *,
    system_prompt: str | None = None,
    use_chat_template: bool = True,
    describe: Callable[[int], str] = lambda i: f"prompt {i}",
) -> EncodedPrompts:
    """The prompts' ids (and images): through the processor for a vision-language policy (or prompts with images,
    which then name the missing model), else :func:`encode_prompts`."""
    if processor_of(tokenizer) is not None or any(has_images(p) for p in prompts):
        ids, images = encode_image_prompts(tokenizer, prompts, system_prompt=system_prompt, describe=describe)
        return EncodedPrompts(ids, images)
    return EncodedPrompts(
        encode_prompts(tokenizer, list(prompts), system_prompt=system_prompt, use_chat_template=use_chat_template)
    )


def fit_encoded(
    prompts: EncodedPrompts,
    *,
    context_length: int | None,
    max_new_tokens: int,
    overflow: Literal["error", "truncate_left"] = "error",
    describe: Callable[[int], str] = lambda i: f"prompt {i}",
    max_new_tokens_key: str = "rollout.max_new_tokens",
) -> tuple[EncodedPrompts, int]:
    """``(prompts fitted to the context, how many were cut)`` (:func:`grove.rollout.engine.fit_prompts`); a prompt
    with images that is too long is a :class:`PromptTooLongError` whatever ``overflow`` says."""
    if prompts.images is not None and context_length is not None:
        with_images = prompts.images.images_per_owner() > 0
        for i, ids in enumerate(prompts.ids):
            if bool(with_images[i]) and len(ids) + max_new_tokens > context_length:
                raise PromptTooLongError(
                    f"{describe(i)} holds images and is {len(ids)} tokens long; with {max_new_tokens_key} "
                    f"{max_new_tokens} it needs {len(ids) + max_new_tokens} tokens, more than the model's context of "
                    f"{context_length}, and a prompt with images is never cut: use fewer or smaller images, a "
                    f"shorter prompt, or a lower {max_new_tokens_key}"
                )
    ids, cut = fit_prompts(prompts.ids, context_length=context_length, max_new_tokens=max_new_tokens,
                           overflow=overflow, describe=describe, max_new_tokens_key=max_new_tokens_key)
    return EncodedPrompts(ids, prompts.images), cut
