"""Reward-model examples → the :class:`grove.batch.RolloutBatch` the trainer's loop carries to the update.

Each sequence is one row: its first token as the "prompt" (``prompt_ids [N, 1]``), the rest as the "response",
right-padded with the pad token, so ``batch.input_ids`` and ``batch.attention_mask`` are the classifier's inputs
and the pooled last non-pad token is the sequence's last token. An example's rows share a group (``group_index``:
the example; a preference pair's chosen row comes first) and ``rewards`` holds its targets (``reward_names``: the
heads of a regression model, or ``("margin",)`` for a pair). No token carries a log-likelihood loss
(``loss_mask`` 0, ``advantages`` 0). :func:`pair_rows` and :func:`example_rows` read the layout back.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor
from torch.nn.utils.rnn import pad_sequence

from grove.batch import RolloutBatch
from grove.rm.examples import RmExample

__all__ = ["MARGIN", "example_rows", "pair_rows", "rm_batch"]

#: the reward column of a preference pair's margin
MARGIN = "margin"


def rm_batch(examples: Sequence[RmExample], pad_token_id: int, target_names: Sequence[str]) -> RolloutBatch:
    """The rows of ``examples`` (see the module docstring)."""
    if not examples:
        raise ValueError("rm_batch needs at least one example")
    sequences = [seq for ex in examples for seq in ex.sequences]
    group = torch.tensor([k for k, ex in enumerate(examples) for _ in ex.sequences], dtype=torch.long)
    n = len(sequences)
    first = torch.tensor([seq[0] for seq in sequences], dtype=torch.long)
    rest = [torch.tensor(seq[1:], dtype=torch.long) for seq in sequences]
    response_ids = pad_sequence(rest, batch_first=True, padding_value=pad_token_id)
    response_mask = pad_sequence([torch.ones(len(r), dtype=torch.bool) for r in rest], batch_first=True)
    targets = torch.tensor([ex.targets for ex in examples for _ in ex.sequences], dtype=torch.float32)
    zeros = torch.zeros(response_ids.shape, dtype=torch.float32)
    return RolloutBatch(
        prompt_ids=first[:, None],
        prompt_mask=torch.ones((n, 1), dtype=torch.bool),
        response_ids=response_ids,
        response_mask=response_mask,
        loss_mask=torch.zeros(response_ids.shape, dtype=torch.bool),
        old_logprobs=zeros,
        advantages=zeros,
        rewards=targets.reshape(n, len(target_names)),
        reward_names=tuple(target_names),
        group_index=group,
        trajectory_index=torch.arange(n),
        step_index=torch.zeros(n, dtype=torch.long),
        truncated=torch.zeros(n, dtype=torch.bool),
        metadata=tuple({"origin": ex.origin, "prompt": ex.prompt} for ex in examples for _ in ex.sequences),
    )


def pair_rows(group_index: Tensor) -> tuple[Tensor, Tensor]:
    """The row indices of each pair's chosen and rejected sequence (a pair's rows are adjacent, chosen first)."""
    starts = torch.ones(len(group_index), dtype=torch.bool)
    starts[1:] = group_index[1:] != group_index[:-1]
    chosen = starts.nonzero().flatten()
    return chosen, chosen + 1


def example_rows(group_index: Tensor) -> list[Tensor]:
    """The rows of each example, in order (its group)."""
    _, counts = torch.unique_consecutive(group_index, return_counts=True)
    return list(torch.arange(len(group_index)).split(counts.tolist()))
