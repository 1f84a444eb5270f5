"""What a decode loop produces, row by row, and its packing into a :class:`grove.rollout.engine.RolloutOutput`."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from grove.rollout.engine import RolloutOutput

__all__ = ["EOS", "LENGTH", "STOP", "GeneratedRows"]

LENGTH, EOS, STOP = 0, 1, 2  # finish-reason codes, in the order of _REASONS
_REASONS = ("length", "eos", "stop")


@dataclass
class GeneratedRows:
    """The ``M = B * n`` completions of one call in prompt-major row order: ``tokens`` / ``logprobs``
    ``[M, max_new_tokens]`` (valid up to ``lengths [M]``), ``reasons [M]`` finish-reason codes
    (:data:`LENGTH`, :data:`EOS`, :data:`STOP`), and how many prompt tokens the engine did not run."""

    tokens: Tensor
    logprobs: Tensor
    lengths: Tensor
    reasons: Tensor
    prompt_tokens_reused: int = 0

    def output(
        self, prompt_ids: Tensor, prompt_mask: Tensor, n: int, tokenizer: Any, pad_token_id: int, start: float
    ) -> RolloutOutput:
        """The rollout output of these rows for the ``B`` left-padded prompts ``prompt_ids``/``prompt_mask``
        (``n`` completions each); ``start``: the call's ``time.perf_counter()`` at its beginning."""
        lengths = self.lengths
        width = int(lengths.max())
        response_mask = (torch.arange(width, device=lengths.device)[None, :] < lengths[:, None]).long()
        response_ids = self.tokens[:, :width].masked_fill(response_mask == 0, pad_token_id)
        per_row = [row[:length] for row, length in zip(response_ids.tolist(), lengths.tolist(), strict=True)]
        return RolloutOutput(
            prompt_ids=prompt_ids.repeat_interleave(n, dim=0),
            prompt_mask=prompt_mask.repeat_interleave(n, dim=0),
            response_ids=response_ids.cpu(),
            response_mask=response_mask.cpu(),
            logprobs=(self.logprobs[:, :width].float() * response_mask).cpu(),
            finish_reasons=[_REASONS[r] for r in self.reasons.tolist()],
            texts=tokenizer.batch_decode(per_row, skip_special_tokens=True),
            prompt_index=torch.arange(len(prompt_ids)).repeat_interleave(n),
            num_generated_tokens=int(lengths.sum()),
            seconds=time.perf_counter() - start,
            prompt_tokens_reused=self.prompt_tokens_reused,
        )
