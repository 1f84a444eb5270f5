"""Dropping finished rows from a decode KV cache: advanced indexing (transformers' ``batch_select_indices``) vs
``index_select`` (:func:`grove.rollout.decode_cache.select_cache_rows`), per layer and per drop event
(results in docs/benchmarks.md).

    python benchmarks/cache_row_selection.py
    python benchmarks/cache_row_selection.py --rows 64 --cached 100 --dtypes bf16 fp32

One SmolLM2 layer's keys ``[rows, 3 KV heads, cached, 64]``; a drop keeps all but every ninth row. Prints the
median µs of each form and their ratio, and checks that both keep the same values; "per drop event" is ×60
(keys and values of 30 layers).
"""

from __future__ import annotations

import argparse
import statistics

import torch
from roofline import run_seconds  # this directory (benchmarks are run as scripts)

DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}


def median_us(fn, repeats: int = 300) -> float:
    return statistics.median(run_seconds(fn, repeats, warmup=10)) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=64)
    parser.add_argument("--cached", type=int, default=100)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--dtypes", nargs="+", choices=DTYPES, default=list(DTYPES))
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    keep = torch.tensor([i for i in range(args.rows) if i % 9])
    for name in args.dtypes:
        keys = torch.randn(args.rows, 3, args.cached, 64).to(DTYPES[name])
        assert torch.equal(keys[keep, ...], keys.index_select(0, keep))
        indexing = median_us(lambda k=keys: k[keep, ...])
        selecting = median_us(lambda k=keys: k.index_select(0, keep))
        print(f"{name}: keys[indices] {indexing:.0f} µs, index_select {selecting:.0f} µs per layer tensor "
              f"({indexing / selecting:.2f}×); per drop event (60 tensors) {60 * indexing / 1000:.1f} vs "
              f"{60 * selecting / 1000:.1f} ms")


if __name__ == "__main__":
    main()
