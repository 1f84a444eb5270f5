"""The preallocated key/value cache of the static-cache engine: a fixed number of rows (slots) and columns.

Layer ``l`` holds ``keys[l]`` / ``values[l]`` ``[rows, KV, width, D]`` and every slot a ``key_valid [rows, width]``
row saying which columns hold a key its tokens may attend to. The tensors are allocated once and reused by every call
that fits (:meth:`StaticKVCache.fits`), so a CUDA graph captured over them stays valid; a call needing more rows or
columns allocates a larger cache (and the engine captures its graphs again). The columns of a call are its prompt
block (the prefill's layout: left pads, reused prefixes, new tokens) followed by one column per decode step.
"""

from __future__ import annotations

import torch
from torch import Tensor

from grove.rollout.decoder_spec import DecoderSpec

__all__ = ["StaticKVCache"]

COLUMN_GRAIN = 64  # widths are allocated in multiples of this many columns


class StaticKVCache:
    """See the module docstring. ``rows`` and ``width`` are the allocated capacity."""

    def __init__(self, spec: DecoderSpec, rows: int, width: int, dtype: torch.dtype, device: torch.device) -> None:
        width = -(-width // COLUMN_GRAIN) * COLUMN_GRAIN
        shape = (rows, spec.kv_heads, width, spec.head_dim)
        self.keys = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(spec.layers)]
        self.values = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(spec.layers)]
        self.key_valid = torch.zeros((rows, width), dtype=torch.bool, device=device)
        self.columns = torch.arange(width, device=device)

    @property
    def rows(self) -> int:
        return self.key_valid.shape[0]

    @property
    def width(self) -> int:
        return self.key_valid.shape[1]

    def fits(self, rows: int, width: int) -> bool:
        return rows <= self.rows and width <= self.width

    @staticmethod
    def bytes_per_row(spec: DecoderSpec, width: int, dtype: torch.dtype) -> int:
        """Bytes one slot of ``width`` columns takes (keys and values of every layer, and its mask row)."""
        element = torch.empty(0, dtype=dtype).element_size()
        return 2 * spec.layers * spec.kv_heads * spec.head_dim * width * element + width

    def front(self, count: int) -> tuple[list[Tensor], list[Tensor], Tensor]:
        """Views of the first ``count`` slots: ``(keys, values, key_valid)``."""
        return [k[:count] for k in self.keys], [v[:count] for v in self.values], self.key_valid[:count]

    def load_prompts(
        self, keys: list[Tensor], values: list[Tensor], valid: Tensor, rows: Tensor, slots: int
    ) -> None:
        """Fill slots ``0 … slots-1`` with prompt rows ``rows`` of a prefill (``keys[l]``/``values[l]``
        ``[D, KV, P, Dh]``, ``valid [D, P]``) in columns ``0 … P-1``; the columns after them are cleared and
        marked valid (the decode steps write them in order, causality hides those not written yet)."""
        width = valid.shape[1]
        for target, source in zip(self.keys + self.values, keys + values, strict=True):
            target[:slots, :, :width].copy_(source.index_select(0, rows))
            target[:slots, :, width:].zero_()
        self.key_valid[:slots, :width].copy_(valid.index_select(0, rows))
        self.key_valid[:slots, width:] = True

    def reorder_front(self, order: Tensor) -> None:
        """Slots ``0 … len(order)-1`` take the contents of slots ``order`` (a permutation of them)."""
        count = len(order)
        for tensor in self.keys + self.values:
            tensor[:count] = tensor[:count].index_select(0, order)
        self.key_valid[:count] = self.key_valid[:count].index_select(0, order)
