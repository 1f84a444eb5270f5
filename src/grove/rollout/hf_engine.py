"""A batched sampling loop on a plain transformers causal LM with a :class:`DynamicCache` (no ``generate``).

The ``B`` prompts are prefilled once each, identical ones once together (left-padded, ``position_ids =
cumsum(mask) - 1``, the same positions :func:`grove.models.padded_forward.policy_forward` uses; cached prefixes are
reused, :mod:`grove.rollout.prefix_cache`), the cache is fanned out to ``n`` samples per prompt, and tokens
are decoded step by step with one forward for all still-running rows. Finished rows are dropped from the
cache and the batch, so they cost no further work. Randomness comes only from the
caller's ``torch.Generator`` (one uniform draw per row and step, inverse-CDF sampling), so a seeded
generator reproduces a rollout exactly (for a fixed device / thread count).

Log-probs: the value recorded for each sampled token is ``log_softmax(logits / T)[token]`` with ``T`` the
sampling temperature (``T = 1`` for greedy), i.e. the *tempered policy before top-k / top-p truncation*.
That is the distribution the trainer optimises (it recomputes log-probs at the same temperature), so these
are the ``old_logprobs`` of an on-policy batch. Truncation only changes which tokens can be drawn.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch
from torch import Tensor
from transformers import PreTrainedModel
from transformers.cache_utils import DynamicCache

from grove.rollout.cache_keyword import cache_argument
from grove.rollout.decode_attention import use_decode_attention
from grove.rollout.decode_cache import select_cache_rows
from grove.rollout.engine import RolloutEngine, RolloutOutput, SamplingParams
from grove.rollout.exact_logits import DEFAULT_CANDIDATES, exact_top_logits
from grove.rollout.prefix_cache import (
    MIN_REUSED_TOKENS,
    KVBank,
    assemble_prefixes,
    compact_rows,
    longest_common_prefix,
    shared_batch_prefix,
)
from grove.rollout.sampling import filter_logits, sample_tokens

__all__ = ["TransformersEngine", "filter_logits"]


_LENGTH, _EOS, _STOP = 0, 1, 2
_REASONS = ("length", "eos", "stop")


class TransformersEngine(RolloutEngine):
    """Rollout engine over a transformers ``PreTrainedModel`` (see the module docstring).

    ``eos_token_ids`` end a completion (the token is kept in the response with its log-prob); by default the
    tokenizer's eos plus ``model.generation_config.eos_token_id``; ``[]`` disables eos stopping. Samples are
    drawn with the caller's ``torch.Generator``, so a seeded generator reproduces a rollout exactly.
    ``exact_top_logits``: how many of each row's largest logits a bfloat16 output projection recomputes in
    float32 (:mod:`grove.rollout.exact_logits`; 0: the rounded logits as they are).
    """

    def __init__(
        self,
        model: PreTrainedModel,
        tokenizer: Any,
        eos_token_ids: Sequence[int] | int | None = None,
        *,
        reuse_prefixes: bool = True,
        exact_top_logits: int = DEFAULT_CANDIDATES,
    ) -> None:
        self.model = model
        self.reuse_prefixes = reuse_prefixes
        self.exact_top_logits = exact_top_logits  # float32 top logits of a bf16 head (grove.rollout.exact_logits)
        self._keeping = False  # inside reusing_prefixes(): keep each call's rows for the next
        self._bank: KVBank | None = None
        self.tokenizer = tokenizer
        use_decode_attention(model)  # one-token decode steps as two matmuls (grove.rollout.decode_attention)
        if eos_token_ids is None:  # the tokenizer's eos plus the generation config's (e.g. several end tokens)
            gen_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
            eos_token_ids = [tokenizer.eos_token_id, *(gen_eos if isinstance(gen_eos, list) else [gen_eos])]
            eos_token_ids = [t for t in eos_token_ids if t is not None]
        if isinstance(eos_token_ids, int):
            eos_token_ids = [eos_token_ids]
        self.eos_token_ids = sorted({int(t) for t in eos_token_ids})
        pad = tokenizer.pad_token_id
        self.pad_token_id = int(pad if pad is not None else (self.eos_token_ids or [0])[0])

    # ------------------------------------------------------------------ helpers
    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def _left_pad(self, prompts: list[list[int]]) -> tuple[Tensor, Tensor]:
        width = max(len(p) for p in prompts)
        ids = torch.full((len(prompts), width), self.pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(prompts), width), dtype=torch.long)
        for i, p in enumerate(prompts):
            if p:
                ids[i, width - len(p) :] = torch.tensor(p, dtype=torch.long)
                mask[i, width - len(p) :] = 1
        return ids, mask

    def _sample(self, logits: Tensor, sampling: SamplingParams, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        """Draw one token per row; return ``(tokens, log-probs under the tempered, untruncated policy)``
        (:func:`grove.rollout.sampling.sample_tokens`: two-level inverse-CDF sampling from the caller's generator)."""
        return sample_tokens(logits, sampling.temperature, sampling.top_k, sampling.top_p, generator)

    def _stop_hits(self, tokens: Tensor, stop: tuple[str, ...]) -> Tensor:
        """``bool [rows]``: whether the decoded completion (``tokens [rows, L]``) now contains a stop string.

        Only a tail window is decoded: a string of ``c`` characters spans at most ``4c`` byte-level tokens, and
        it can only newly appear in tokens generated since the last check (which is every step).
        """
        window = 4 * max(len(s) for s in stop) + 4
        texts = self.tokenizer.batch_decode(tokens[:, -window:].tolist(), skip_special_tokens=True)
        return torch.tensor([any(s in t for s in stop) for t in texts], dtype=torch.bool, device=tokens.device)

    # ------------------------------------------------------------------ main loop
    def generate(
        self,
        prompt_token_ids: list[list[int]],
        n: int,
        sampling: SamplingParams,
        generator: torch.Generator,
    ) -> RolloutOutput:
        """Sample ``n`` completions per prompt; rows are prompt-major (``i * n + j``).

        The decode loop runs in eval mode under ``torch.inference_mode()`` (the model's training mode is
        restored afterwards); the returned tensors are ordinary CPU tensors, usable in autograd later. Layers
        compiled for training (``train.compile``, when generation runs on the policy itself) run eager here: the
        decode step's shapes and cache objects would only make the compiler recompile.
        """
        start = time.perf_counter()
        if n < 1 or not prompt_token_ids or any(len(p) == 0 for p in prompt_token_ids):
            raise ValueError("need n >= 1 and at least one non-empty prompt")
        prompt_ids, prompt_mask = self._left_pad(prompt_token_ids)
        was_training = self.model.training
        self.model.eval()  # no dropout, and gradient checkpointing would otherwise disable the KV cache
        try:
            with (
                torch.inference_mode(),
                torch.compiler.set_stance("force_eager"),
                exact_top_logits(self.model, self.exact_top_logits),
            ):
                decoded = self._decode(prompt_ids, prompt_mask, n, sampling, generator)
        finally:
            self.model.train(was_training)
        return self._pack(prompt_ids, prompt_mask, n, len(prompt_token_ids), *decoded, start)

    def _decode(
        self,
        prompt_ids: Tensor,
        prompt_mask: Tensor,
        n: int,
        sampling: SamplingParams,
        generator: torch.Generator,
    ) -> tuple[Tensor, Tensor, Tensor, Tensor, int]:
        """The prefill + decode loop: ``tokens``, ``logprobs [rows, max_new_tokens]``, ``lengths``,
        finish-reason codes ``[rows]`` (global row order) and how many prompt tokens were reused."""
        device = self.device
        total = prompt_ids.shape[0] * n
        eos = torch.tensor(self.eos_token_ids, dtype=torch.long, device=device)

        # prefill each distinct prompt once (identical prompts, e.g. the G copies of an environment at turn 0,
        # share one row), then fan the cache out to n samples per prompt
        ids, attn = prompt_ids.to(device), prompt_mask.to(device)
        distinct, row_of = torch.unique(torch.cat([ids, attn], dim=1), dim=0, return_inverse=True)
        if len(distinct) < len(ids):
            ids, attn = distinct[:, : ids.shape[1]], distinct[:, ids.shape[1] :]
            fan_out = row_of.repeat_interleave(n)  # the distinct prompt each of the B * n rows continues
        else:
            fan_out = torch.arange(len(ids), device=device).repeat_interleave(n)
        cache, logits, layout, attn, next_pos, tokens_run = self._prefill(ids, attn)
        reused_tokens = int(prompt_mask.sum()) - tokens_run
        logits = logits[fan_out]
        if n > 1 or len(distinct) < len(prompt_ids):
            select_cache_rows(cache, fan_out)
        prompt_layout, attn, next_pos = layout[fan_out], attn[fan_out], next_pos[fan_out]  # by global row
        kept: list[KVBank] = []  # rows kept for the next call (inside reusing_prefixes)

        active = torch.arange(total, device=device)  # global row of each running row
        # preallocated outputs, written by row index each step (no per-row Python work)
        tokens = torch.full((total, sampling.max_new_tokens), self.pad_token_id, dtype=torch.long, device=device)
        logprobs = torch.zeros((total, sampling.max_new_tokens), dtype=torch.float32, device=device)
        lengths = torch.zeros(total, dtype=torch.long, device=device)
        reasons = torch.full((total,), _LENGTH, dtype=torch.long, device=device)
        for step in range(sampling.max_new_tokens):
            tok, lp = self._sample(logits, sampling, generator)
            tokens[active, step] = tok
            logprobs[active, step] = lp.float()
            lengths[active] += 1
            done = torch.isin(tok, eos) if len(eos) else torch.zeros_like(tok, dtype=torch.bool)
            reasons[active[done]] = _EOS
            if sampling.stop:
                running = (~done).nonzero().flatten()
                # every running row has generated exactly step + 1 tokens
                hits = self._stop_hits(tokens[active[running], : step + 1], sampling.stop)
                stopped = running[hits]
                done[stopped] = True
                reasons[active[stopped]] = _STOP
            last = step == sampling.max_new_tokens - 1
            if self._keeping and (last or done.any()):  # the rows leaving the cache, for the next call
                leaving = torch.ones_like(done) if last else done
                # the cache holds each row's prompt layout, then the tokens fed so far (those of steps < step)
                rows = active[leaving]
                layout = torch.cat([prompt_layout[rows], tokens[rows, :step]], dim=1)
                kept.append(self._cached_rows(cache, leaving, attn[leaving], layout))
            if last:
                break
            if done.any():
                keep = (~done).nonzero().flatten()
                if len(keep) == 0:
                    break
                select_cache_rows(cache, keep)
                active, tok, attn, next_pos = active[keep], tok[keep], attn[keep], next_pos[keep]
            attn = torch.cat([attn, attn.new_ones(len(active), 1)], dim=1)
            out = self.model(
                input_ids=tok[:, None], attention_mask=attn, position_ids=next_pos[:, None],
                **cache_argument(self.model, cache), use_cache=True,
            )
            logits = out.logits[:, -1, :]
            next_pos = next_pos + 1
        if self._keeping:
            self._bank = KVBank.concat(kept)
        return tokens, logprobs, lengths, reasons, reused_tokens

    # ------------------------------------------------------------------ prefill and prefix reuse
    def _run(self, ids: Tensor, attn: Tensor, positions: Tensor, cache: DynamicCache) -> Tensor:
        """One prefill forward over ``cache``; the last position's logits ``[rows, V]``.

        The last position is picked with an index tensor, not ``logits_to_keep=1``: the slice ``[:, -1:]`` of
        ``[rows, T, H]`` hidden states is not contiguous, and a linear layer on it runs as a batched matmul over
        ``rows`` expanded copies of the output projection's weight (a much slower prefill: docs/benchmarks.md);
        the index gives a contiguous ``[rows, 1, H]`` and one matrix product."""
        last = torch.tensor([ids.shape[1] - 1], device=ids.device)
        out = self.model(
            input_ids=ids, attention_mask=attn, position_ids=positions,
            **cache_argument(self.model, cache), use_cache=True, logits_to_keep=last,
        )
        return out.logits[:, -1, :]

    def _prefill(self, ids: Tensor, attn: Tensor) -> tuple[DynamicCache, Tensor, Tensor, Tensor, Tensor, int]:
        """Run the (distinct, left-padded) prompts through the model: ``(cache, last logits [N, V], the token
        id at each cached position [N, T], attention mask [N, T], next position [N], prompt tokens run)``.

        With :attr:`reuse_prefixes`, a prompt whose first tokens are cached (a row of the previous call inside
        :meth:`reusing_prefixes`, or the prefix every prompt of this call shares) takes their keys and values
        and only its remaining tokens are run (:mod:`grove.rollout.prefix_cache`)."""
        plan = self._reuse_plan(ids, attn) if self.reuse_prefixes else None
        self._bank = None  # the plan holds what it reuses; this call's rows replace the rest after decoding
        if plan is None:
            positions = (attn.cumsum(-1) - 1).clamp(min=0)
            cache = DynamicCache(config=self.model.config)
            return cache, self._run(ids, attn, positions, cache), ids, attn, positions[:, -1] + 1, int(attn.sum())
        bank, rows, reused, prompts, prompt_lengths, shared_run = plan
        layers, prefix_mask = assemble_prefixes(bank, rows, reused)
        del bank, plan
        prefix_tokens = prompts.gather(1, (prefix_mask.cumsum(1) - 1).clamp(min=0))
        new = prompt_lengths - reused  # tokens still to run, >= 1 each
        width = int(new.max())
        column = torch.arange(width, device=ids.device)[None, :]
        offset = width - new[:, None]
        new_mask = (column >= offset).long()
        new_positions = reused[:, None] + (column - offset).clamp(min=0)
        new_ids = prompts.gather(1, new_positions.clamp(max=prompts.shape[1] - 1))
        new_ids = new_ids.masked_fill(new_mask == 0, self.pad_token_id)
        cache = DynamicCache(ddp_cache_data=layers, config=self.model.config)
        mask = torch.cat([prefix_mask, new_mask], dim=1)
        logits = self._run(new_ids, mask, new_positions, cache)
        layout = torch.cat([prefix_tokens.masked_fill(prefix_mask == 0, self.pad_token_id), new_ids], dim=1)
        return cache, logits, layout, mask, prompt_lengths, int(new.sum()) + shared_run

    def _reuse_plan(self, ids: Tensor, attn: Tensor) -> tuple[KVBank, Tensor, Tensor, Tensor, Tensor, int] | None:
        """Which cached prefix each prompt reuses: ``(bank, bank row [N], reused tokens [N], prompts
        left-aligned [N, W], prompt lengths [N], tokens run to make a shared prefix)``, or ``None`` when no
        prompt would reuse at least :data:`~grove.rollout.prefix_cache.MIN_REUSED_TOKENS` tokens."""
        prompt_lengths = attn.sum(1)
        width = ids.shape[1]
        column = torch.arange(width, device=ids.device)[None, :]
        start = width - prompt_lengths[:, None]
        prompts = ids.gather(1, (column + start).clamp(max=width - 1))
        prompts = prompts.masked_fill(column >= prompt_lengths[:, None], -2)
        reused = torch.zeros_like(prompt_lengths)
        rows = torch.zeros_like(prompt_lengths)
        bank = self._bank
        if bank is not None:
            reused, rows = longest_common_prefix(prompts, prompt_lengths, bank)
            reused = reused.masked_fill(reused < MIN_REUSED_TOKENS, 0)
        fresh = (reused == 0).nonzero().flatten()
        shared_run = 0
        if len(fresh) > 1:
            shared = shared_batch_prefix(prompts[fresh], prompt_lengths[fresh])
            if shared >= MIN_REUSED_TOKENS:
                prefix = prompts[fresh[0], :shared][None]
                one = DynamicCache(config=self.model.config)
                self._run(prefix, torch.ones_like(prefix), torch.arange(shared, device=ids.device)[None], one)
                made = KVBank(prefix, torch.tensor([shared], device=ids.device), [lay.keys for lay in one.layers],
                              [lay.values for lay in one.layers], torch.arange(shared, device=ids.device)[None])
                rows[fresh] = 0 if bank is None else bank.rows
                bank = made if bank is None else KVBank.concat([bank, made])
                reused[fresh] = shared
                shared_run = shared
        if bank is None or not bool((reused > 0).any()):
            return None
        return bank, rows, reused, prompts, prompt_lengths, shared_run

    def _cached_rows(self, cache: DynamicCache, rows: Tensor, attn: Tensor, layout: Tensor) -> KVBank:
        """The cache rows selected by ``rows`` (bool), kept for reuse by the next call (their real positions are
        indexed, not moved: :func:`grove.rollout.prefix_cache.compact_rows`); ``attn`` and
        ``layout`` (the token id at each cached position) are those rows' already. When every row leaves (the
        last decode step), the cache's own tensors are kept, uncopied: the decode loop is done with them."""
        every_row = bool(rows.all())

        def take(t: Tensor) -> Tensor:
            return t if every_row else t[rows]

        return compact_rows([take(lay.keys) for lay in cache.layers], [take(lay.values) for lay in cache.layers],
                            attn, layout)

    @contextmanager
    def reusing_prefixes(self) -> Iterator[None]:
        """Keep each call's rows (prompt and generated tokens) for the next call to reuse their keys and
        values: open it over calls made with the **same weights**, e.g. the turns of one batch of episodes.
        Does nothing when :attr:`reuse_prefixes` is off."""
        if not self.reuse_prefixes:
            yield
            return
        self._keeping, self._bank = True, None
        try:
            yield
        finally:
            self._keeping, self._bank = False, None

    def _pack(
        self,
        prompt_ids: Tensor,
        prompt_mask: Tensor,
        n: int,
        num_prompts: int,
        tokens: Tensor,
        logprobs: Tensor,
        lengths: Tensor,
        reasons: Tensor,
        reused_tokens: int,
        start: float,
    ) -> RolloutOutput:
        width = int(lengths.max())
        response_mask = (torch.arange(width, device=lengths.device)[None, :] < lengths[:, None]).long()
        response_ids = tokens[:, :width].masked_fill(response_mask == 0, self.pad_token_id)
        per_row = [row[:length] for row, length in zip(response_ids.tolist(), lengths.tolist(), strict=True)]
        return RolloutOutput(
            prompt_ids=prompt_ids.repeat_interleave(n, dim=0),
            prompt_mask=prompt_mask.repeat_interleave(n, dim=0),
            response_ids=response_ids.cpu(),
            response_mask=response_mask.cpu(),
            logprobs=(logprobs[:, :width] * response_mask).cpu(),
            finish_reasons=[_REASONS[r] for r in reasons.tolist()],
            texts=self.tokenizer.batch_decode(per_row, skip_special_tokens=True),
            prompt_index=torch.arange(num_prompts).repeat_interleave(n),
            num_generated_tokens=int(lengths.sum()),
            seconds=time.perf_counter() - start,
            prompt_tokens_reused=reused_tokens,
        )
