"""select_cache_rows keeps the same rows, in the same order, as transformers' batch_select_indices."""

from __future__ import annotations

import torch
from transformers.cache_utils import DynamicCache

from grove.rollout.decode_cache import select_cache_rows


def _cache(seed: int) -> DynamicCache:
    gen = torch.Generator().manual_seed(seed)
    cache = DynamicCache()
    for layer in range(3):
        keys = torch.randn(5, 2, 7, 4, generator=gen)
        cache.update(keys, keys * 2 + layer, layer)
    return cache


def test_rows_dropped_and_fanned_out_as_transformers_selects_them():
    for rows in (torch.tensor([0, 2, 4]), torch.tensor([3, 3, 1, 0, 0, 4])):
        ours, theirs = _cache(0), _cache(0)
        select_cache_rows(ours, rows)
        theirs.batch_select_indices(rows)
        for a, b in zip(ours.layers, theirs.layers, strict=True):
            assert torch.equal(a.keys, b.keys) and torch.equal(a.values, b.values)
            assert a.keys.shape[0] == len(rows) and a.keys.is_contiguous()
        assert ours.get_seq_length() == 7


def test_an_empty_cache_is_left_alone():
    cache = DynamicCache()
    select_cache_rows(cache, torch.tensor([0]))
    assert cache.get_seq_length() == 0
