"""Rotary position embeddings as a table indexed by position, computed once by the model's own rotary module.

The static-cache engine reads ``cos``/``sin`` of each token's position from this table (a gather, which a CUDA graph
can replay for any positions) instead of calling the rotary module every step. The table is the module's output for
positions ``0 … length-1`` in the generation dtype, so every rotary type whose values depend on the position alone
(:data:`grove.rollout.decoder_spec.STATIC_ROPE_TYPES`, with their attention scaling) gives the same numbers as the
model's forward.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from grove.rollout.decoder_spec import base_causal_lm

__all__ = ["RotaryTable"]

_GRAIN = 1024  # the table grows in multiples of this many positions


class RotaryTable:
    """``cos`` / ``sin`` ``[length, head_dim]`` of ``model``'s rotary embedding in ``dtype`` on ``device``."""

    def __init__(self, model: nn.Module, dtype: torch.dtype, device: torch.device) -> None:
        self.rotary = base_causal_lm(model).model.rotary_emb
        self.dtype, self.device = dtype, device
        self.cos = self.sin = torch.empty(0, device=device, dtype=dtype)

    @property
    def length(self) -> int:
        return self.cos.shape[0]

    def ensure(self, positions: int) -> bool:
        """Make the table cover positions ``0 … positions-1``; whether it was rebuilt (new tensors)."""
        if positions <= self.length:
            return False
        length = -(-positions // _GRAIN) * _GRAIN
        home = self.rotary.inv_freq.device  # computed where the model keeps its rotary module
        ids = torch.arange(length, device=home)[None]
        cos, sin = self.rotary(torch.empty(0, dtype=self.dtype, device=home), ids)
        self.cos = cos[0].to(device=self.device, dtype=self.dtype).contiguous()
        self.sin = sin[0].to(device=self.device, dtype=self.dtype).contiguous()
        return True

    def at(self, positions: Tensor) -> tuple[Tensor, Tensor]:
        """``(cos, sin)`` ``[N, 1, L, head_dim]`` of ``positions [N, L]``, broadcast over heads."""
        return self.cos[positions].unsqueeze(1), self.sin[positions].unsqueeze(1)
