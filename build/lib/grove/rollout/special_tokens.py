"""The token ids that end a completion and pad a row, as every rollout engine reads them from a model and tokenizer."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["end_token_ids", "padding_token_id"]


def end_token_ids(model: Any, tokenizer: Any, given: Sequence[int] | int | None = None) -> list[int]:
    """The sorted ids that end a completion: ``given`` (``[]`` disables stopping at an end token), by default the
    tokenizer's eos plus ``model.generation_config.eos_token_id`` (one id or several end tokens)."""
    if given is None:
        generation_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
        extra = generation_eos if isinstance(generation_eos, list) else [generation_eos]
        given = [t for t in [tokenizer.eos_token_id, *extra] if t is not None]
    if isinstance(given, int):
        given = [given]
    return sorted({int(t) for t in given})


def padding_token_id(tokenizer: Any, end_ids: Sequence[int]) -> int:
    """The id that pads prompts and completions: the tokenizer's pad token, else the first end token, else 0."""
    pad = tokenizer.pad_token_id
    return int(pad if pad is not None else (list(end_ids) or [0])[0])
