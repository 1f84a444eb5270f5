"""Row selection in the decode loop's KV cache: dropping finished rows, fanning a prompt's row out to its samples.

transformers' ``DynamicLayer.batch_select_indices`` selects rows by advanced indexing (``keys[indices, ...]``),
which on a CPU is a generic gather; ``index_select`` along the batch dimension copies whole rows. For one
SmolLM2 layer's cache ``[64, 3, 100, 64]``, keeping 56 rows took 204 µs as ``keys[indices]`` and 71 µs with
``index_select`` in bf16 (225 vs 157 µs in fp32); a 64-token generation of 8 × 8 completions drops rows
≈ 35 times over 60 tensors (docs/benchmarks.md, issue 16). The values are the same either way.
"""

from __future__ import annotations

from torch import Tensor
from transformers.cache_utils import DynamicCache, DynamicLayer

__all__ = ["select_cache_rows"]


def select_cache_rows(cache: DynamicCache, rows: Tensor) -> None:
    """Keep, in this order, the cache rows ``rows`` (an index tensor; repeats fan a row out) of every layer.

    Plain :class:`DynamicLayer` layers are selected with ``index_select``; any other layer type (sliding
    windows, layers with extra per-row state) by its own ``batch_select_indices``."""
    for layer in cache.layers:
        if type(layer) is DynamicLayer and getattr(layer, "is_initialized", False) and layer.keys.numel():
            layer.keys = layer.keys.index_select(0, rows)
            layer.values = layer.values.index_select(0, rows)
        else:
            layer.batch_select_indices(rows)
