"""Whether a completion's decoded text now contains one of the stop strings."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

__all__ = ["stop_string_hits"]


def stop_string_hits(tokenizer: Any, tokens: Tensor, stop: tuple[str, ...]) -> Tensor:
    """``bool [rows]``: whether the decoded completions ``tokens [rows, L]`` (every row ``L`` tokens long) contain
    a stop string, checked when their last token was added.

    Only a tail window is decoded: a string of ``c`` characters spans at most ``4c`` byte-level tokens, and it can
    only newly appear in the tokens added since the last check (which is every token)."""
    if len(tokens) == 0:
        return torch.zeros(0, dtype=torch.bool, device=tokens.device)
    window = 4 * max(len(s) for s in stop) + 4
    texts = tokenizer.batch_decode(tokens[:, -window:].tolist(), skip_special_tokens=True)
    return torch.tensor([any(s in t for s in stop) for t in texts], dtype=torch.bool, device=tokens.device)
