"""The static-cache engine's prefill: the distinct prompts of a call run through the decoder into a prompt block of
keys and values, which the engine then copies into its static cache's slots (one per completion).

The prefill is not captured (it runs once per call, as one batched forward, in row chunks of at most
:data:`PREFILL_TOKENS` columns) and reuses cached prefixes exactly as the transformers engine does
(:mod:`grove.rollout.prefix_cache`): a prefix all prompts share is run once as one row, and inside
``reusing_prefixes()`` each prompt takes its longest cached prefix from the previous call's rows, read in place from
the static cache; only the remaining tokens run.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from grove.rollout.decode_weights import DecodeWeights
from grove.rollout.decoder_forward import attention_mask, decoder_forward
from grove.rollout.decoder_spec import DecoderSpec
from grove.rollout.prefix_cache import KVBank, PrefixStore
from grove.rollout.rotary_table import RotaryTable

__all__ = ["PREFILL_TOKENS", "Prefill", "empty_cache", "prefill_prompts", "run_prompt_tokens"]

PREFILL_TOKENS = 16_384  # prompt tokens (pads included) per prefill forward; more rows are prefilled in chunks

RunTokens = Callable[[Tensor, Tensor, list[Tensor], list[Tensor], int, Tensor], Tensor]
EmptyCache = Callable[[int, int], tuple[list[Tensor], list[Tensor]]]


@dataclass
class Prefill:
    """The distinct prompts run through the decoder: per layer ``keys``/``values`` ``[D, KV, P, Dh]`` of the prompt
    block, ``valid [D, P]`` (columns holding a real token), ``layout [D, P]`` (the token at each column),
    ``next_positions [D]``, the last token's ``logits [D, V]`` and how many prompt tokens were run."""

    keys: list[Tensor]
    values: list[Tensor]
    valid: Tensor
    layout: Tensor
    next_positions: Tensor
    logits: Tensor
    tokens_run: int

    @property
    def width(self) -> int:
        return self.valid.shape[1]


def empty_cache(
    spec: DecoderSpec, rows: int, width: int, dtype: torch.dtype, device: torch.device
) -> tuple[list[Tensor], list[Tensor]]:
    """Zeroed keys and values ``[rows, KV, width, D]`` for every layer."""
    shape = (rows, spec.kv_heads, width, spec.head_dim)
    return ([torch.zeros(shape, dtype=dtype, device=device) for _ in range(spec.layers)],
            [torch.zeros(shape, dtype=dtype, device=device) for _ in range(spec.layers)])


def run_prompt_tokens(
    weights: DecodeWeights, rotary: RotaryTable, ids: Tensor, positions: Tensor, keys: list[Tensor],
    values: list[Tensor], first_column: int, valid: Tensor,
) -> Tensor:
    """Run ``ids [N, L]`` into columns ``first_column …`` of ``keys``/``values`` (``[N, KV, W, Dh]``, ``valid
    [N, W]``), in row chunks of at most :data:`PREFILL_TOKENS` columns; the last tokens' logits ``[N, V]``."""
    width = keys[0].shape[2]
    columns = torch.arange(width, device=ids.device)
    write = torch.arange(first_column, first_column + ids.shape[1], device=ids.device)
    chunk = max(1, PREFILL_TOKENS // width)
    logits = []
    for start in range(0, len(ids), chunk):
        part = slice(start, start + chunk)
        mask = attention_mask(valid[part], columns, write)
        logits.append(decoder_forward(
            weights, rotary, ids[part], positions[part], [k[part] for k in keys], [v[part] for v in values], write,
            mask,
        ))
    return torch.cat(logits)


def prefill_prompts(
    ids: Tensor, attn: Tensor, prefixes: PrefixStore, run: RunTokens, new_cache: EmptyCache, pad_token_id: int
) -> Prefill:
    """The :class:`Prefill` of the distinct left-padded prompts ``ids``/``attn`` ``[D, P]``: with no reusable
    prefix the whole prompts run; else the reused keys and values are copied in front and only the new tokens run
    (``run``: :func:`run_prompt_tokens` over the engine's weights; ``new_cache(rows, width)``: zeroed layers)."""

    def shared_prefix_bank(prefix: Tensor) -> KVBank:
        """The one-row bank of ``prefix [1, S]`` (a prefix every prompt of the call shares)."""
        length = prefix.shape[1]
        positions = torch.arange(length, device=prefix.device)[None]
        keys, values = new_cache(1, length)
        run(prefix, positions, keys, values, 0, torch.ones_like(prefix, dtype=torch.bool))
        return KVBank(prefix, torch.tensor([length], device=prefix.device), keys, values, positions)

    plan = prefixes.plan(ids, attn, shared_prefix_bank)
    if plan is None:
        positions = (attn.cumsum(-1) - 1).clamp(min=0)
        keys, values = new_cache(len(ids), ids.shape[1])
        logits = run(ids, positions, keys, values, 0, attn.bool())
        return Prefill(keys, values, attn.bool(), ids, positions[:, -1] + 1, logits, int(attn.sum()))
    reuse = plan.layout(pad_token_id)
    del plan
    reused = reuse.prefix_mask.shape[1]
    keys, values = new_cache(len(ids), reused + reuse.new_ids.shape[1])
    for key, value, (prefix_key, prefix_value) in zip(keys, values, reuse.prefix_layers, strict=True):
        key[:, :, :reused].copy_(prefix_key)
        value[:, :, :reused].copy_(prefix_value)
    valid = reuse.mask.bool()
    logits = run(reuse.new_ids, reuse.new_positions, keys, values, reused, valid)
    return Prefill(keys, values, valid, reuse.layout, reuse.next_positions, logits, reuse.tokens_run)
