"""Row selection in the decode loop's KV cache: dropping finished rows, fanning a prompt's row out to its samples.

transformers' ``DynamicLayer.batch_select_indices`` selects rows by advanced indexing (``keys[indices, ...]``),
a generic gather on a CPU; ``index_select`` along the batch dimension copies whole rows, faster per layer in bf16
and in fp32 (``benchmarks/cache_row_selection.py``; results in docs/benchmarks.md). A 64-token generation of 8 × 8
completions drops rows ≈ 35 times over 60 tensors, so the whole generation is shorter too, with the same samples.

Not here, measured: buffers with room reserved for the decode steps (each step writing its keys in place
instead of ``DynamicLayer.update``'s ``torch.cat``). In fp32 they remove almost all of the ``cat`` time but make
the attention's products over the buffer views slower, so the wall time barely moves; in bf16 PyTorch's CPU
products copy such views (``benchmarks/decode_step_parts.py``, part 5; results in docs/benchmarks.md).
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
