"""Tokenised prompts as the rows an engine prefills: left-padded, identical prompts once each."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from grove.vision.image_table import ImageTable

__all__ = ["DistinctPrompts", "left_pad"]


def left_pad(prompts: list[list[int]], pad_token_id: int) -> tuple[Tensor, Tensor]:
    """``(ids, mask)`` ``[B, P]``: the prompts left-padded to the longest, ``P`` its length."""
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_token_id, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for i, p in enumerate(prompts):
        if p:
            ids[i, width - len(p) :] = torch.tensor(p, dtype=torch.long)
            mask[i, width - len(p) :] = 1
    return ids, mask


@dataclass
class DistinctPrompts:
    """The distinct rows of left-padded prompts (``ids``/``mask`` ``[D, P]``) and ``fan_out`` ``[B * n]``: the
    distinct row each of the ``B * n`` completions (prompt-major) continues. Identical prompts (the G copies of an
    environment at turn 0) are prefilled once and fanned out like ``n`` samples of one prompt."""

    ids: Tensor
    mask: Tensor
    fan_out: Tensor
    merged: bool = False  # some prompts were identical (fewer distinct rows than prompts)
    first: Tensor | None = None  # [D] a prompt each distinct row stands for (None: row i is prompt i)

    @classmethod
    def of(cls, ids: Tensor, mask: Tensor, n: int, images: ImageTable | None = None) -> DistinctPrompts:
        """The distinct rows of ``ids``/``mask`` and the fan-out of ``n`` completions per prompt; with ``images``
        (one owner per prompt) two prompts are identical only when their images are too."""
        key = torch.cat([ids, mask], dim=1)
        if images is not None:
            key = torch.cat([key, images.fingerprints().to(key.device)[:, None]], dim=1)
        distinct, row_of = torch.unique(key, dim=0, return_inverse=True)
        if len(distinct) < len(ids):
            width = ids.shape[1]
            order = torch.arange(len(ids), device=ids.device)
            first = torch.full((len(distinct),), len(ids), device=ids.device).scatter_reduce(0, row_of, order, "amin")
            return cls(distinct[:, :width], distinct[:, width : 2 * width], row_of.repeat_interleave(n), True, first)
        return cls(ids, mask, torch.arange(len(ids), device=ids.device).repeat_interleave(n))

    def images_of(self, images: ImageTable | None) -> ImageTable | None:
        """The pixels of the distinct rows (one owner per row) from those of the prompts."""
        if images is None or self.first is None:
            return images
        return images.select(self.first)
