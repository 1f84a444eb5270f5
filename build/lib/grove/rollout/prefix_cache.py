"""Keys and values of token prefixes the engine has already computed, reused instead of prefilled again.

A causal decoder's keys and values at positions ``0..p-1`` depend only on tokens ``0..p-1``, so a prompt that
starts with ``p`` tokens the engine has already run through the model can take their cached keys and values
and prefill only its remaining tokens. Two sources of such prefixes (docs/benchmarks.md):

* **within one call**: the longest prefix shared by the distinct prompts of a batch (the system instructions
  every environment's prompt starts with) is prefilled once, as one row, and copied to every row;
* **across calls** (while an engine's ``reusing_prefixes()`` is open, e.g. over the turns of one batch of
  episodes): the rows of the previous call (prompt plus the generated tokens
  whose keys were computed) are kept as a :class:`KVBank`; a prompt of the next call reuses its longest
  common prefix with any of them. With ``env.prompt: conversation`` the next turn's context *is* the previous
  context, the sampled tokens and the environment's reply, so only the reply is prefilled.

Rows are laid out for the model as ``[pad … | reused prefix | pad … | new tokens]``: the reused prefix is
right-aligned in a block as wide as the longest one, the new tokens right-aligned after it, the attention
mask zero on both pads, and ``position_ids`` count real tokens only, so every token sees exactly the keys,
at exactly the positions, a full prefill would have given it (same numbers up to floating-point order).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import Tensor

__all__ = [
    "KVBank",
    "PrefixStore",
    "ReuseLayout",
    "ReusePlan",
    "assemble_prefixes",
    "compact_rows",
    "left_aligned",
    "longest_common_prefix",
    "shared_batch_prefix",
]

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


@dataclass
class ReuseLayout:
    """The prefill of prompts that reuse cached prefixes, laid out ``[pad … | reused prefix | pad … | new tokens]``
    (see the module docstring), ``N`` prompts:

    * ``prefix_layers`` per layer ``(keys, values)`` ``[N, KV, P, D]`` and ``prefix_mask`` ``[N, P]``: the reused
      keys and values, right-aligned in ``P`` columns;
    * ``new_ids`` / ``new_mask`` / ``new_positions`` ``[N, L]``: the tokens still to run, right-aligned, with their
      positions (pads hold the pad id, mask 0);
    * ``layout`` ``[N, P + L]``: the token id at every column (pads hold the pad id); ``next_positions`` ``[N]``:
      the position of each prompt's first generated token; ``tokens_run``: prompt tokens run through the model
      (the new tokens and a shared prefix run once)."""

    prefix_layers: list[tuple[Tensor, Tensor]]
    prefix_mask: Tensor
    new_ids: Tensor
    new_mask: Tensor
    new_positions: Tensor
    layout: Tensor
    next_positions: Tensor
    tokens_run: int

    @property
    def mask(self) -> Tensor:
        """``[N, P + L]``: 1 at every column holding a real token."""
        return torch.cat([self.prefix_mask, self.new_mask], dim=1)


@dataclass
class ReusePlan:
    """Which cached prefix each of ``N`` prompts reuses: ``bank`` row ``rows[i]``'s first ``reused[i]`` tokens
    (``reused`` 0: none); ``prompts`` ``[N, W]`` left-aligned (``-2`` past each length), ``prompt_lengths`` ``[N]``;
    ``shared_run``: tokens run to make the batch's shared prefix (0 when none was made)."""

    bank: KVBank
    rows: Tensor
    reused: Tensor
    prompts: Tensor
    prompt_lengths: Tensor
    shared_run: int

    def layout(self, pad_token_id: int) -> ReuseLayout:
        """The prefill layout of the plan (one gather of the reused keys and values per tensor)."""
        layers, prefix_mask = assemble_prefixes(self.bank, self.rows, self.reused)
        prompts = self.prompts
        prefix_tokens = prompts.gather(1, (prefix_mask.cumsum(1) - 1).clamp(min=0))
        new = self.prompt_lengths - self.reused  # tokens still to run, >= 1 each
        width = int(new.max())
        column = torch.arange(width, device=prompts.device)[None, :]
        offset = width - new[:, None]
        new_mask = (column >= offset).long()
        new_positions = self.reused[:, None] + (column - offset).clamp(min=0)
        new_ids = prompts.gather(1, new_positions.clamp(max=prompts.shape[1] - 1))
        new_ids = new_ids.masked_fill(new_mask == 0, pad_token_id)
        layout = torch.cat([prefix_tokens.masked_fill(prefix_mask == 0, pad_token_id), new_ids], dim=1)
        return ReuseLayout(
            layers, prefix_mask, new_ids, new_mask, new_positions, layout, self.prompt_lengths,
            int(new.sum()) + self.shared_run,
        )


def left_aligned(ids: Tensor, attn: Tensor) -> tuple[Tensor, Tensor]:
    """Left-padded prompts ``ids``/``attn`` ``[N, W]`` as ``(prompts left-aligned, -2 past each length; lengths)``."""
    prompt_lengths = attn.sum(1)
    width = ids.shape[1]
    column = torch.arange(width, device=ids.device)[None, :]
    start = width - prompt_lengths[:, None]
    prompts = ids.gather(1, (column + start).clamp(max=width - 1))
    return prompts.masked_fill(column >= prompt_lengths[:, None], -2), prompt_lengths


class PrefixStore:
    """What an engine keeps of its calls for prefix reuse: the previous call's rows as a :class:`KVBank` while
    :meth:`keeping` is open (over calls made with the same weights), and the reuse plan of each call.

    ``enabled`` False (``rollout.prefix_reuse: false``): nothing is kept and no prefix is reused."""

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled
        self.open = False  # inside keeping(): each call's rows are kept for the next
        self.bank: KVBank | None = None

    @contextmanager
    def keeping(self) -> Iterator[None]:
        """Keep each call's rows for the next call (nothing when reuse is off); everything is dropped on exit."""
        if not self.enabled:
            yield
            return
        self.open, self.bank = True, None
        try:
            yield
        finally:
            self.open, self.bank = False, None

    def keep(self, bank: KVBank | None) -> None:
        """The rows of the call that just ended, for the next call (ignored outside :meth:`keeping`)."""
        self.bank = bank if self.open else None

    def plan(self, ids: Tensor, attn: Tensor, run_shared_prefix: Callable[[Tensor], KVBank]) -> ReusePlan | None:
        """The reuse plan of left-padded prompts ``ids``/``attn`` ``[N, W]``, or ``None`` when no prompt would reuse
        at least :data:`MIN_REUSED_TOKENS` tokens (or reuse is off). The kept bank is handed to the plan (and
        dropped here): the call's own rows replace it once it has decoded.

        Prompts with no cached prefix that share one of at least :data:`MIN_REUSED_TOKENS` tokens get it made once:
        ``run_shared_prefix(prefix [1, S])`` runs it through the model and returns its one-row :class:`KVBank`."""
        bank, self.bank = self.bank, None
        if not self.enabled:
            return None
        prompts, prompt_lengths = left_aligned(ids, attn)
        reused = torch.zeros_like(prompt_lengths)
        rows = torch.zeros_like(prompt_lengths)
        if bank is not None:
            reused, rows = longest_common_prefix(prompts, prompt_lengths, bank)
            reused = reused.masked_fill(reused < MIN_REUSED_TOKENS, 0)
        fresh = (reused == 0).nonzero().flatten()
        shared_run = 0
        if len(fresh) > 1:
            shared = shared_batch_prefix(prompts[fresh], prompt_lengths[fresh])
            if shared >= MIN_REUSED_TOKENS:
                made = run_shared_prefix(prompts[fresh[0], :shared][None])
                rows[fresh] = 0 if bank is None else bank.rows
                bank = made if bank is None else KVBank.concat([bank, made])
                reused[fresh] = shared
                shared_run = shared
        if bank is None or not bool((reused > 0).any()):
            return None
        return ReusePlan(bank, rows, reused, prompts, prompt_lengths, shared_run)
