"""Row selection in the decode loop's KV cache: dropping finished rows, fanning a prompt's row out to its samples.

transformers' ``DynamicLayer.batch_select_indices`` selects rows by advanced indexing (``keys[indices, ...]``),
a generic gather on a CPU; ``index_select`` along the batch dimension copies whole rows. For one SmolLM2
layer's cache ``[64, 3, 100, 64]``, keeping 56 rows took 204 µs as ``keys[indices]`` and 71 µs with
``index_select`` in bf16 (225 vs 157 µs in fp32); a 64-token generation of 8 × 8 completions drops rows ≈ 35
times over 60 tensors: 4.53 → 4.23 s in bf16, 8.10 → 7.90 s in fp32, the same samples (docs/benchmarks.md,
issue 16).

Not here, measured: buffers with room reserved for the decode steps (each step writing its keys in place
instead of ``DynamicLayer.update``'s ``torch.cat``). In fp32 the profile's ``cat`` time fell from 1.55 s to
0.06 s of an 8 s generation and the attention's products over the buffer views rose from 0.54 to 0.70 s, but
the wall time moved only 7.71 → 7.63 s (1%); in bf16 PyTorch's CPU products copy such views.
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
