"""SFT examples → the :class:`grove.batch.RolloutBatch` the policy update trains on, optionally packed.

An example's first token is its "prompt" (``prompt_ids [N, 1]``) and the rest its "response"; the loss mask is the
example's, shifted by that one token, and the advantages are 1, so the policy update's per-token log-likelihood
terms are those of supervised fine-tuning. Every chat-templated example starts with the same token (ChatML's
``<|im_start|>``), so examples can share their prompt: with ``pack_length`` the examples with the same first token
are put into bins (first-fit decreasing) and each bin becomes one group (``group_index``). The ``packed`` training
forward (``train.forward: packed``, :func:`grove.models.packed_forward.policy_forward_packed`) lays out each group as one
padding-free row, the shared first token once and then each member's tokens, with a block attention mask (a member
sees the shared token and its own tokens only) and positions that restart after the shared token: the packing of
short examples without cross-example attention (TRL's ``padding_free`` packing with per-example position ids), with
log-probs equal to the unpacked forward's.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch.nn.utils.rnn import pad_sequence

from grove.batch import RolloutBatch
from grove.sft.data import SftExample
from grove.vision.image_table import ImageTable

__all__ = ["pack_groups", "sft_batch"]


def pack_groups(lengths: Sequence[int], pack_length: int | None) -> list[int]:
    """The bin of each item: first-fit decreasing, no bin's lengths summing past ``pack_length``.

    Items longest first (ties in their order) go into the first bin they fit in, else a new one; an item longer
    than ``pack_length`` gets a bin of its own. Bins are numbered in the order of their first item, so the result
    does not depend on anything but ``lengths``. ``pack_length=None``: every item its own bin (``0 .. n-1``).
    """
    if pack_length is None:
        return list(range(len(lengths)))
    if pack_length < 1:
        raise ValueError(f"pack_length must be positive, got {pack_length}")
    loads: list[int] = []
    bin_of = [0] * len(lengths)
    for i in sorted(range(len(lengths)), key=lambda k: -lengths[k]):
        b = next((b for b, load in enumerate(loads) if load + lengths[i] <= pack_length), len(loads))
        if b == len(loads):
            loads.append(0)
        loads[b] += lengths[i]
        bin_of[i] = b
    number: dict[int, int] = {}
    return [number.setdefault(b, len(number)) for b in bin_of]


def sft_batch(examples: Sequence[SftExample], pad_token_id: int, *, pack_length: int | None = None) -> RolloutBatch:
    """The batch of ``examples`` (see the module docstring): ``prompt_ids [N, 1]`` the first tokens, responses
    right-padded with ``pad_token_id``, ``advantages`` 1 on real tokens, ``old_logprobs`` 0, no rewards.

    ``pack_length``: the most tokens a packed row may hold (the shared first token plus its members' remaining
    tokens); ``None`` gives each example its own group. ``metadata`` holds each example's ``origin``.
    """
    if not examples:
        raise ValueError("sft_batch needs at least one example")
    for ex in examples:
        if len(ex.input_ids) < 2 or ex.loss_mask[0]:
            raise ValueError(f"{ex.origin}: an example needs an untrained first token and at least one more token")
    n = len(examples)
    first = torch.tensor([ex.input_ids[0] for ex in examples], dtype=torch.long)
    rest = [torch.tensor(ex.input_ids[1:], dtype=torch.long) for ex in examples]
    response_ids = pad_sequence(rest, batch_first=True, padding_value=pad_token_id)
    response_mask = pad_sequence([torch.ones(len(r), dtype=torch.bool) for r in rest], batch_first=True)
    loss_mask = pad_sequence([torch.tensor(ex.loss_mask[1:], dtype=torch.bool) for ex in examples], batch_first=True)
    return RolloutBatch(
        prompt_ids=first[:, None],
        prompt_mask=torch.ones((n, 1), dtype=torch.bool),
        response_ids=response_ids,
        response_mask=response_mask,
        loss_mask=loss_mask,
        old_logprobs=torch.zeros(response_ids.shape, dtype=torch.float32),
        advantages=response_mask.float(),
        rewards=torch.zeros((n, 0), dtype=torch.float32),
        reward_names=(),
        group_index=_groups(first, [len(r) for r in rest], pack_length),
        trajectory_index=torch.arange(n),
        step_index=torch.zeros(n, dtype=torch.long),
        truncated=torch.zeros(n, dtype=torch.bool),
        metadata=tuple({"origin": ex.origin} for ex in examples),
        images=ImageTable.of_owners([ex.images for ex in examples]) if any(ex.images is not None for ex in examples) else None,
    )


def _groups(first: torch.Tensor, response_lengths: list[int], pack_length: int | None) -> torch.Tensor:
    """``group_index``: bins (:func:`pack_groups`) of examples with the same first token, a packed row holding the
    shared token once (capacity ``pack_length - 1`` for the members' other tokens); ``arange`` without packing."""
    n = len(response_lengths)
    if pack_length is None:
        return torch.arange(n)
    if pack_length < 2:
        raise ValueError(f"pack_length must be at least 2 (the shared first token and one more), got {pack_length}")
    group = torch.empty(n, dtype=torch.long)
    offset = 0
    _, first_class = torch.unique(first, return_inverse=True)
    for token_class in torch.unique(first_class, sorted=True).tolist():
        members = (first_class == token_class).nonzero().flatten()
        bins = pack_groups([response_lengths[i] for i in members.tolist()], pack_length - 1)
        group[members] = torch.tensor(bins, dtype=torch.long) + offset
        offset += max(bins) + 1
    return group
