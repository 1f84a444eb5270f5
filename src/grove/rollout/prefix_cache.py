"""Keys and values of token prefixes the engine has already computed, reused instead of prefilled again.

A causal decoder's keys and values at positions ``0..p-1`` depend only on tokens ``0..p-1``, so a prompt that
starts with ``p`` tokens the engine has already run through the model can take their cached keys and values
and prefill only its remaining tokens. Two sources of such prefixes (docs/benchmarks.md):

* **within one call**: the longest prefix shared by the distinct prompts of a batch (the system instructions
  every environment's prompt starts with) is prefilled once, as one row, and copied to every row;
* **across calls** (while :meth:`grove.rollout.hf_engine.TransformersEngine.reusing_prefixes` is open, e.g.
  over the turns of one batch of episodes): the rows of the previous call (prompt plus the generated tokens
  whose keys were computed) are kept as a :class:`KVBank`; a prompt of the next call reuses its longest
  common prefix with any of them. With ``env.prompt: conversation`` the next turn's context *is* the previous
  context, the sampled tokens and the environment's reply, so only the reply is prefilled.

Rows are laid out for the model as ``[pad … | reused prefix | pad … | new tokens]``: the reused prefix is
right-aligned in a block as wide as the longest one, the new tokens right-aligned after it, the attention
mask zero on both pads, and ``position_ids`` count real tokens only, so every token sees exactly the keys,
at exactly the positions, a full prefill would have given it (same numbers up to floating-point order).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

__all__ = ["KVBank", "assemble_prefixes", "compact_rows", "longest_common_prefix", "shared_batch_prefix"]

# shorter reusable prefixes are prefilled with the rest of the prompt (copying their keys costs about as much)
MIN_REUSED_TOKENS = 16


@dataclass
class KVBank:
    """Cached rows: row ``r`` holds the keys/values of ``tokens[r, :lengths[r]]``.

    ``keys[l]`` / ``values[l]``: layer ``l``'s ``[rows, kv_heads, cached width, head_dim]`` as the model cached them
    (pads anywhere); ``columns`` ``[rows, width]``: the cached column of each of a row's tokens, in order, so the
    cache is read in place instead of being compacted first; ``tokens`` ``[rows, width]`` (``-1`` past a row's
    length, so no prompt token matches there).
    """

    tokens: Tensor
    lengths: Tensor
    keys: list[Tensor]
    values: list[Tensor]
    columns: Tensor

    @property
    def rows(self) -> int:
        return self.tokens.shape[0]

    @staticmethod
    def concat(banks: list[KVBank]) -> KVBank:
        """One bank holding every row of ``banks`` (widths padded to the widest)."""
        if len(banks) == 1:
            return banks[0]
        width = max(b.tokens.shape[1] for b in banks)
        cached = max(b.keys[0].shape[2] for b in banks)

        def pad(t: Tensor, dim: int, value: float, to: int) -> Tensor:
            extra = to - t.shape[dim]
            if extra == 0:
                return t
            shape = list(t.shape)
            shape[dim] = extra
            return torch.cat([t, t.new_full(shape, value)], dim=dim)

        return KVBank(
            tokens=torch.cat([pad(b.tokens, 1, -1, width) for b in banks]),
            lengths=torch.cat([b.lengths for b in banks]),
            keys=[torch.cat([pad(b.keys[i], 2, 0, cached) for b in banks]) for i in range(len(banks[0].keys))],
            values=[torch.cat([pad(b.values[i], 2, 0, cached) for b in banks]) for i in range(len(banks[0].values))],
            columns=torch.cat([pad(b.columns, 1, 0, width) for b in banks]),
        )


def compact_rows(keys: list[Tensor], values: list[Tensor], mask: Tensor, tokens: Tensor) -> KVBank:
    """A :class:`KVBank` of the given cache rows: ``keys[l]``/``values[l]`` ``[rows, KV, T, D]`` as the model
    cached them (pads anywhere, kept as they are), ``mask`` ``[rows, T]`` 1 at the real positions, ``tokens``
    ``[rows, T]`` the ids at those positions. Only the token ids and the columns of the real positions are
    compacted (real positions first, in order); the keys and values are read in place when reused."""
    real = mask.bool()
    lengths = real.sum(1)
    width = int(lengths.max())
    order = torch.sort((~real).to(torch.int8), dim=1, stable=True).indices[:, :width]  # real positions first
    kept = torch.arange(width, device=mask.device)[None, :] < lengths[:, None]
    return KVBank(
        tokens=tokens.gather(1, order).masked_fill(~kept, -1),
        lengths=lengths,
        keys=list(keys),
        values=list(values),
        columns=order,
    )


def longest_common_prefix(prompts: Tensor, prompt_lengths: Tensor, bank: KVBank) -> tuple[Tensor, Tensor]:
    """For each prompt (``prompts`` ``[N, W]`` left-aligned, ``-2`` past its length), the length of its longest
    common prefix with a row of ``bank`` and which row: ``(lengths [N], rows [N])``. A prefix never covers a
    whole prompt (its last token must be run to get the next token's logits)."""
    width = min(prompts.shape[1], bank.tokens.shape[1])
    same = prompts[:, None, :width] == bank.tokens[None, :, :width]  # [N, rows, width]
    common = same.to(torch.int8).cumprod(dim=2).sum(dim=2)  # [N, rows]
    lengths, rows = common.max(dim=1)
    return torch.minimum(lengths, prompt_lengths - 1), rows


def shared_batch_prefix(prompts: Tensor, prompt_lengths: Tensor) -> int:
    """How many leading tokens all prompts (``[N, W]`` left-aligned, ``-2`` past each length) share, at most the
    shortest prompt's length minus one."""
    same = (prompts == prompts[:1]).all(dim=0).to(torch.int8).cumprod(dim=0)
    return min(int(same.sum()), int(prompt_lengths.min()) - 1)


def assemble_prefixes(
    bank: KVBank, rows: Tensor, lengths: Tensor
) -> tuple[list[tuple[Tensor, Tensor]], Tensor]:
    """Per layer ``(keys, values)`` ``[N, KV, P, D]`` holding row ``rows[i]``'s first ``lengths[i]`` positions of
    ``bank`` right-aligned in ``P = max(lengths)`` columns, and the ``[N, P]`` attention mask (1 on them): one
    gather from the cached rows per tensor."""
    width = int(lengths.max())
    column = torch.arange(width, device=lengths.device)[None, :]
    offset = width - lengths[:, None]
    mask = (column >= offset).long()
    source = (column - offset).clamp(min=0)  # [N, P]: which of the row's tokens lands in each column
    index = (rows[:, None], bank.columns[rows[:, None], source])  # ... and where the bank cached it

    def pick(t: Tensor) -> Tensor:  # t [rows, KV, W, D] -> [N, KV, P, D]
        return t.permute(0, 2, 1, 3)[index].permute(0, 2, 1, 3).contiguous()

    return [(pick(k), pick(v)) for k, v in zip(bank.keys, bank.values, strict=True)], mask
