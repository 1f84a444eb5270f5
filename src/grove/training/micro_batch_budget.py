"""The token budget of a micro-batch (``train.micro_batch_tokens``): fixed, or derived from the memory the machine
has when the update starts.

Micro-batches count samples (``train.micro_batch_size``); an agent's samples can be whole conversations of thousands
of tokens, and a micro-batch of them can need many times the memory a step of short completions needs (the
training activations grow with the tokens: ``grove.infra.memory_plan.activation_bytes_per_token``; about 1.3 MB per
token for the 135M default in fp32). ``auto`` gives a micro-batch at most :data:`AUTO_SHARE` of the memory available
when the update starts (RAM on a CPU, free device memory on a GPU), in tokens, so that a step of long conversations
is cut into more micro-batches instead of being killed by the kernel's OOM killer; the gradients are sums over
micro-batches, so nothing but float rounding changes.
"""

from __future__ import annotations

import logging
from typing import Literal

import torch
from torch import nn

from grove.batch import RolloutBatch
from grove.infra.memory_plan import ModelDims, activation_bytes_per_token

__all__ = ["AUTO_SHARE", "MicroBatchBudget", "available_memory"]

log = logging.getLogger(__name__)

AUTO_SHARE = 0.5  # of the available memory, for one micro-batch's activations (the rest: logits, the allocator)


def available_memory(device: torch.device) -> float | None:
    """Bytes the process may still use on ``device``: free device memory plus what torch's allocator holds unused
    (CUDA), the system's available RAM (CPU); ``None`` where unknown."""
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return float(free + torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device))
    try:
        import psutil
    except ImportError:
        return None
    return float(psutil.virtual_memory().available)


class MicroBatchBudget:
    """``tokens()``: the budget for the coming update (``None``: none), from ``setting`` (an int, ``"auto"`` or
    ``None``) for ``model`` at ``precision`` with or without activation checkpointing on ``device``."""

    def __init__(
        self, setting: int | Literal["auto"] | None, model: nn.Module, precision: str, checkpointing: bool,
        device: torch.device,
    ) -> None:
        self.setting = setting
        self.device = device
        self.per_token = 0.0
        if setting == "auto":
            try:
                dims = ModelDims.from_config(model.config.to_dict(), sum(p.numel() for p in model.parameters()))
            except (AttributeError, KeyError):  # not a transformers decoder's config: no budget can be derived
                dims = None
            if dims is not None:
                self.per_token = activation_bytes_per_token(dims, 2 if precision == "bf16" else 4, checkpointing)
        self._warned = False

    def tokens(self) -> int | None:
        if self.setting is None or isinstance(self.setting, int):
            return self.setting
        available = available_memory(self.device)
        if available is None or self.per_token <= 0:
            return None
        return max(1, int(AUTO_SHARE * available / self.per_token))

    def __call__(self, batch: RolloutBatch, micro_batch_size: int) -> int | None:
        """The budget of the update about to run on ``batch`` (:class:`grove.pipeline.update_seam.MicroBatchTokens`),
        said once when it cuts micro-batches smaller than ``micro_batch_size`` samples."""
        budget = self.tokens()
        self._note_split(batch, micro_batch_size, budget)
        return budget

    def _note_split(self, batch: RolloutBatch, size: int, budget: int | None) -> None:
        if budget is None or self._warned:
            return
        tokens = (batch.prompt_mask.sum(1) + batch.response_lengths).sort(descending=True).values
        largest = int(tokens[:size].sum())
        if largest <= budget:
            return
        self._warned = True
        log.warning(
            "%d samples (train.micro_batch_size) hold up to %d tokens, more than the %d a micro-batch may hold "
            "(train.micro_batch_tokens%s): the update runs more, smaller micro-batches (the same gradients)",
            size, largest, budget, ": auto, from the memory available" if self.setting == "auto" else "",
        )
