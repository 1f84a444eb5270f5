"""Epoch-based sampler of training prompts (or environment tasks) whose position is part of the checkpoint.

Each epoch visits every training example once in an order drawn from ``(seed, epoch)``, so the
order never depends on how many steps ran in this process: a resumed run, restored to the same
``(epoch, position)``, draws exactly the prompts the uninterrupted run would have drawn, including
when a step's prompts straddle an epoch boundary.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch


@dataclass
class SamplerState:
    epoch: int = 0
    position: int = 0


class TaskSampler:
    def __init__(self, num_examples: int, seed: int, state: SamplerState | None = None) -> None:
        if num_examples < 1:
            raise ValueError("the training split is empty")
        self.num_examples = num_examples
        self.seed = seed
        self.state = state or SamplerState()
        self._order = self._permutation(self.state.epoch)

    def _permutation(self, epoch: int) -> list[int]:
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
        return torch.randperm(self.num_examples, generator=g).tolist()

    def next(self, count: int) -> list[int]:
        """The next ``count`` example indices, crossing into the next epoch when one runs out."""
        out: list[int] = []
        while len(out) < count:
            if self.state.position == self.num_examples:
                self.state = SamplerState(self.state.epoch + 1, 0)
                self._order = self._permutation(self.state.epoch)
            take = min(count - len(out), self.num_examples - self.state.position)
            out.extend(self._order[self.state.position : self.state.position + take])
            self.state.position += take
        return out

    def state_dict(self) -> dict[str, int]:
        return asdict(self.state)

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.state = SamplerState(**state)
        self._order = self._permutation(self.state.epoch)
