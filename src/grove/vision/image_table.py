"""The pixel inputs of a batch's images as one table, indexed by the sample (or prompt) each image belongs to.

A vision-language processor turns a prompt's images into tensors whose first dimension counts *rows* of an
image: one row per image (LLaVA's ``pixel_values [I, C, H, W]``), one per crop (Idefics3 / SmolVLM split an image
into tiles) or one per patch (Qwen2-VL's flattened ``pixel_values [patches, D]``); some tensors hold one row per
image instead (Qwen2-VL's ``image_grid_thw [I, 3]``). :class:`ImageTable` keeps both kinds flat, with

* ``owner [I]``: the sample (or prompt) each image belongs to, non-decreasing (a sample's images in prompt order);
* ``rows [I]``: how many rows of every row-level tensor each image holds.

Selecting samples (micro-batches, fanning a prompt out to its completions) and concatenating batches are index
operations on these two tensors, never per-sample loops over pixels, so the table travels with the
:class:`grove.batch.RolloutBatch` the way the step table does. How a model family wants the tensors for its
forward (stacked per sample, or flat) is :mod:`grove.vision.families`'s business.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

__all__ = ["ImageTable"]


def _segment_positions(starts: Tensor, counts: Tensor) -> Tensor:
    """``cat([starts[k] + arange(counts[k]) for k])`` without a loop."""
    total = int(counts.sum())
    if total == 0:
        return torch.zeros(0, dtype=torch.long, device=starts.device)
    offsets = torch.cumsum(counts, 0) - counts
    within = torch.arange(total, device=starts.device) - torch.repeat_interleave(offsets, counts)
    return torch.repeat_interleave(starts, counts) + within


@dataclass(frozen=True)
class ImageTable:
    """The images of ``num_owners`` samples (see the module docstring).

    ``row_tensors`` have ``rows.sum()`` entries along dimension 0, image ``i``'s rows following image ``i - 1``'s;
    ``image_tensors`` have one entry per image. ``num_owners`` is the number of samples (or prompts) the table
    indexes, images or not."""

    row_tensors: Mapping[str, Tensor]
    image_tensors: Mapping[str, Tensor]
    owner: Tensor
    rows: Tensor
    num_owners: int

    def __post_init__(self) -> None:
        images = self.owner.shape[0]
        if self.rows.shape != (images,):
            raise ValueError(f"ImageTable: rows has shape {tuple(self.rows.shape)}, expected ({images},)")
        if images and (int(self.owner.min()) < 0 or int(self.owner.max()) >= self.num_owners):
            raise ValueError(f"ImageTable: an image's owner lies outside 0..{self.num_owners - 1}")
        if images > 1 and bool((self.owner[1:] < self.owner[:-1]).any()):
            raise ValueError("ImageTable: owner must be non-decreasing (a sample's images together, in order)")
        total = int(self.rows.sum())
        for name, t in self.row_tensors.items():
            if t.shape[0] != total:
                raise ValueError(f"ImageTable: {name} has {t.shape[0]} rows, the images hold {total}")
        for name, t in self.image_tensors.items():
            if t.shape[0] != images:
                raise ValueError(f"ImageTable: {name} has {t.shape[0]} entries for {images} images")

    @property
    def num_images(self) -> int:
        return self.owner.shape[0]

    def images_per_owner(self) -> Tensor:
        """``[num_owners]`` how many images each sample holds."""
        return torch.bincount(self.owner, minlength=self.num_owners)

    @classmethod
    def of_owners(cls, tables: Sequence[ImageTable | None], counts: Sequence[int] | None = None) -> ImageTable:
        """One table of several, owners renumbered consecutively (table ``k``'s owner ``o`` becomes ``o`` plus the
        owners of the tables before it); ``None`` stands for ``counts[k]`` owners without images (default 1).
        Every table present must carry the same tensors."""
        present = [t for t in tables if t is not None]
        if not present:
            raise ValueError("ImageTable.of_owners needs at least one table")
        keys = (set(present[0].row_tensors), set(present[0].image_tensors))
        if any((set(t.row_tensors), set(t.image_tensors)) != keys for t in present):
            raise ValueError("ImageTable.of_owners: the tables carry different pixel tensors")
        counts = list(counts) if counts is not None else [t.num_owners if t is not None else 1 for t in tables]
        owners, offset = [], 0
        for table, count in zip(tables, counts, strict=True):
            if table is not None:
                if table.num_owners != count:
                    raise ValueError(f"ImageTable.of_owners: a table of {table.num_owners} owners counted as {count}")
                owners.append(table.owner + offset)
            offset += count
        return cls(
            {k: torch.cat([t.row_tensors[k] for t in present]) for k in keys[0]},
            {k: torch.cat([t.image_tensors[k] for t in present]) for k in keys[1]},
            torch.cat(owners),
            torch.cat([t.rows for t in present]),
            offset,
        )

    @classmethod
    def joined(cls, tables: Sequence[ImageTable]) -> ImageTable:
        """The images of several one-owner tables (pieces of one sample, in order) as one owner's."""
        table = cls.of_owners(list(tables))
        return cls(table.row_tensors, table.image_tensors, torch.zeros_like(table.owner), table.rows, 1)

    def select(self, indices: Tensor | Sequence[int]) -> ImageTable:
        """The images of the owners ``indices`` (in that order, repeats allowed: one prompt's images copied to each of
        its completions), the ``k``-th selected owner becoming owner ``k``."""
        idx = torch.as_tensor(indices, dtype=torch.long, device=self.owner.device)
        per_owner = self.images_per_owner()
        first_image = torch.cumsum(per_owner, 0) - per_owner
        counts = per_owner[idx]
        images = _segment_positions(first_image[idx], counts)
        first_row = torch.cumsum(self.rows, 0) - self.rows
        rows = _segment_positions(first_row[images], self.rows[images])
        return ImageTable(
            {k: t.index_select(0, rows.to(t.device)) for k, t in self.row_tensors.items()},
            {k: t.index_select(0, images.to(t.device)) for k, t in self.image_tensors.items()},
            torch.repeat_interleave(torch.arange(len(idx), device=idx.device), counts),
            self.rows[images],
            len(idx),
        )

    def to(self, device: torch.device | str) -> ImageTable:
        return ImageTable(
            {k: t.to(device) for k, t in self.row_tensors.items()},
            {k: t.to(device) for k, t in self.image_tensors.items()},
            self.owner.to(device),
            self.rows.to(device),
            self.num_owners,
        )

    def fingerprints(self) -> Tensor:
        """``[num_owners]`` int64: equal for owners with the same images (a hash of their pixel tensors' bytes; 0
        for an owner without images), so identical prompts can be told from prompts that differ only in an image."""
        out = torch.zeros(self.num_owners, dtype=torch.long)
        if not self.num_images:
            return out
        first_row = (torch.cumsum(self.rows, 0) - self.rows).tolist()
        per_image = []
        for i, (start, count) in enumerate(zip(first_row, self.rows.tolist(), strict=True)):
            parts = [t[start : start + count] for t in self.row_tensors.values()]
            parts += [t[i : i + 1] for t in self.image_tensors.values()]
            digest = hashlib.blake2b(digest_size=8)
            for p in parts:
                digest.update(p.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
            per_image.append(digest.digest())
        owner_digests: dict[int, hashlib.blake2b] = {}
        for owner, image_digest in zip(self.owner.cpu().tolist(), per_image, strict=True):
            owner_digests.setdefault(owner, hashlib.blake2b(digest_size=8)).update(image_digest)
        for owner, digest in owner_digests.items():
            out[owner] = int.from_bytes(digest.digest(), "little") & 0x7FFF_FFFF_FFFF_FFFF or 1
        return out
