"""Per-sample ↔ per-token operations under a mask: the one copy of each.

Per-token tensors are ``[N, R]`` aligned with ``response_ids``; per-sample values are ``[N]``. Masking
uses ``where`` (not a multiplication), so NaN or inf in masked-out positions never leaks.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["masked", "per_token", "row_mean"]


def masked(values: Tensor, mask: Tensor) -> Tensor:
    """``values`` where ``mask`` is set, 0 elsewhere (same shape and dtype as ``values``)."""
    return torch.where(mask.bool(), values, torch.zeros((), dtype=values.dtype, device=values.device))


def per_token(values: Tensor, mask: Tensor) -> Tensor:
    """Broadcast per-sample ``values [N]`` over the tokens of ``mask [N, R]``: ``[N, R]``, 0 outside the mask."""
    return masked(values.unsqueeze(-1).expand(mask.shape), mask)


def row_mean(values: Tensor, mask: Tensor) -> Tensor:
    """``[N]``: the mean of ``values [N, R]`` over each row's masked tokens (0 for a row without any)."""
    weights = mask.to(values.dtype)
    return (values * weights).sum(1) / weights.sum(1).clamp_min(1.0)
