"""A sample's pixel inputs saved beside a demonstration file, and read back exactly.

A demonstration row holds token ids; for a vision-language policy its ids hold image tokens, and the pixels those
tokens stand for are what the processor made of the pictures when the sample was built. :func:`write_pixels` saves
that one-owner :class:`ImageTable` as a safetensors file (``row.<name>`` and ``image.<name>`` tensors, the images'
``rows``), so ``grove sft`` trains on exactly the pixels a rollout of the same episode saw. The file records
:func:`pixel_layout_fingerprint` of the processor that made it: another image processor (another size, another
cropping) would lay the pixels out otherwise, and :func:`read_pixels` refuses such a file naming the fix.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file

from grove.vision.image_table import ImageTable

__all__ = ["PixelFileError", "pixel_layout_fingerprint", "read_pixels", "write_pixels"]


class PixelFileError(ValueError):
    """A pixel file that cannot be read back for this policy; the message names the file and the fix."""


def pixel_layout_fingerprint(processor: Any, family: str) -> str:
    """A short hash of what decides how a processor lays out a picture's pixels: the model family and its image
    processor's settings."""
    image_processor = getattr(processor, "image_processor", None)
    settings = image_processor.to_dict() if image_processor is not None else {}
    payload = json.dumps([family, settings], sort_keys=True, default=str).encode("utf-8")
    return hashlib.sha256(payload).hexdigest()[:16]


def write_pixels(path: Path, table: ImageTable, fingerprint: str) -> None:
    """Save the one-owner ``table`` to ``path`` (its folder created) with the processor's ``fingerprint``."""
    if table.num_owners != 1:
        raise ValueError(f"write_pixels saves one sample's pixels, not {table.num_owners} samples'")
    tensors = {f"row.{k}": v.detach().cpu().contiguous() for k, v in table.row_tensors.items()}
    tensors |= {f"image.{k}": v.detach().cpu().contiguous() for k, v in table.image_tensors.items()}
    tensors["rows"] = table.rows.detach().cpu().contiguous()
    path.parent.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(path), metadata={"pixel_layout": fingerprint})


def read_pixels(path: Path, fingerprint: str) -> ImageTable:
    """The one-owner table saved at ``path``; :class:`PixelFileError` when it is missing, unreadable or was made by
    a processor with another pixel layout than ``fingerprint``'s."""
    if not path.is_file():
        raise PixelFileError(f"the pixel file {str(path)!r} is missing: keep the demonstration file's "
                             f"{path.parent.name}/ folder beside it, or regenerate both with grove demos")
    try:
        with safe_open(str(path), framework="pt") as f:
            metadata = f.metadata() or {}
            tensors = {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118 - safe_open is not a mapping
    except (OSError, ValueError, SafetensorError) as exc:
        raise PixelFileError(f"the pixel file {str(path)!r} cannot be read ({exc}): regenerate it with grove demos") \
            from None
    made_by = metadata.get("pixel_layout")
    if made_by != fingerprint:
        raise PixelFileError(
            f"the pixel file {str(path)!r} was made by another image processor (fingerprint {made_by!r}, this "
            f"model's is {fingerprint!r}): regenerate the demonstrations with grove demos under this config's model"
        )
    rows = tensors.pop("rows", None)
    if rows is None:
        raise PixelFileError(f"the pixel file {str(path)!r} has no 'rows' tensor: regenerate it with grove demos")
    row_tensors = {k.removeprefix("row."): v for k, v in tensors.items() if k.startswith("row.")}
    image_tensors = {k.removeprefix("image."): v for k, v in tensors.items() if k.startswith("image.")}
    try:
        return ImageTable(row_tensors, image_tensors, torch.zeros_like(rows), rows, 1)
    except ValueError as exc:
        raise PixelFileError(f"the pixel file {str(path)!r} is inconsistent ({exc}): regenerate it with grove demos") \
            from None
