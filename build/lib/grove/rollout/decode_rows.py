"""The rows the static-cache engine decodes: one slot of the fixed-size batch per completion, on the device.

A slot holds a completion's global row (prompt-major index of the call; padding slots, which fill the batch up to its
bucket size, point at a spare row past the last), the token it feeds next, that token's position, whether it has
finished and why, how many tokens it has, and every token and log-prob it has drawn. The decode step updates them
in place (so a CUDA graph can replay it); the host reads them back only every few steps. A finished slot keeps
stepping until the batch shrinks (its later tokens lie past its length and are never read); shrinking moves the
running slots to the front (:meth:`DecodeRows.reorder_front`), where a smaller captured step runs on them.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import torch
from torch import Tensor

from grove.rollout.generated_rows import LENGTH

__all__ = ["DecodeRows"]


@dataclass
class DecodeRows:
    """Per-slot state (see the module docstring); ``step`` ``[1]``: the index of the token the next step draws."""

    global_row: Tensor  # [R] long
    next_token: Tensor  # [R] long
    position: Tensor  # [R] long
    done: Tensor  # [R] bool
    length: Tensor  # [R] long
    reason: Tensor  # [R] long (grove.rollout.generated_rows codes)
    tokens: Tensor  # [R, S] long
    logprobs: Tensor  # [R, S] float32
    step: Tensor  # [1] long

    @classmethod
    def allocate(cls, rows: int, steps: int, device: torch.device) -> DecodeRows:
        long = dict(dtype=torch.long, device=device)
        return cls(
            global_row=torch.zeros(rows, **long),
            next_token=torch.zeros(rows, **long),
            position=torch.zeros(rows, **long),
            done=torch.ones(rows, dtype=torch.bool, device=device),
            length=torch.zeros(rows, **long),
            reason=torch.full((rows,), LENGTH, **long),
            tokens=torch.zeros((rows, steps), **long),
            logprobs=torch.zeros((rows, steps), dtype=torch.float32, device=device),
            step=torch.zeros(1, **long),
        )

    @property
    def capacity(self) -> int:
        return self.global_row.shape[0]

    @property
    def max_steps(self) -> int:
        return self.tokens.shape[1]

    def fits(self, rows: int, steps: int) -> bool:
        return rows <= self.capacity and steps <= self.max_steps

    def start(self, global_rows: Tensor, spare_row: int, positions: Tensor, slots: int) -> None:
        """Begin a pass: slots ``0 … len(global_rows)-1`` decode those rows from ``positions``; every other slot is
        padding (finished from the start, pointing at ``spare_row``; those up to ``slots`` step with the batch)."""
        real = len(global_rows)
        self.global_row.fill_(spare_row)
        self.global_row[:real].copy_(global_rows)
        self.position[:slots].zero_()
        self.position[:real].copy_(positions)
        self.done.fill_(True)
        self.done[:real].fill_(False)
        self.length[:slots].zero_()
        self.reason[:slots].fill_(LENGTH)
        self.next_token[:slots].zero_()
        self.step.zero_()

    def reorder_front(self, order: Tensor) -> None:
        """Slots ``0 … len(order)-1`` take the state of slots ``order`` (a permutation of them)."""
        count = len(order)
        for field in fields(self):
            tensor = getattr(self, field.name)
            if field.name != "step":
                tensor[:count] = tensor[:count].index_select(0, order)
