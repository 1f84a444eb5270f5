"""A batched sampling loop on a plain transformers causal LM with a :class:`DynamicCache` (no ``generate``).

The ``B`` prompts are prefilled once each, identical ones once together (left-padded, ``position_ids =
cumsum(mask) - 1``, the same positions :func:`grove.models.padded_forward.policy_forward` uses; cached prefixes are
reused, :mod:`grove.rollout.prefix_cache`), the cache is fanned out to ``n`` samples per prompt, and tokens
are decoded step by step with one forward for all still-running rows. Finished rows are dropped from the
cache and the batch, so they cost no further work. Randomness comes only from the
caller's ``torch.Generator`` (one uniform number per row and step, drawn up front:
:func:`grove.rollout.sampling.draw_uniforms`; inverse-CDF sampling), so a seeded generator reproduces a rollout
exactly (for a fixed device / thread count).

Log-probs: the value recorded for each sampled token is ``log_softmax(logits / T)[token]`` with ``T`` the
sampling temperature (``T = 1`` for greedy), i.e. the *tempered policy before top-k / top-p truncation*.
That is the distribution the trainer optimises (it recomputes log-probs at the same temperature), so these
are the ``old_logprobs`` of an on-policy batch. Truncation only changes which tokens can be drawn.
"""

from __future__ import annotations

import logging
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
from grove.rollout.generated_rows import EOS, LENGTH, STOP, GeneratedRows
from grove.rollout.prefix_cache import KVBank, PrefixStore, compact_rows
from grove.rollout.prompt_rows import DistinctPrompts, left_pad
from grove.rollout.sampling import draw_uniforms, filter_logits, sample_tokens
from grove.rollout.special_tokens import end_token_ids, padding_token_id
from grove.rollout.stop_strings import stop_string_hits
from grove.vision.families import pixel_inputs, placeholder_token_ids
from grove.vision.image_table import ImageTable

__all__ = ["TransformersEngine", "filter_logits"]

log = logging.getLogger(__name__)


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
        self.exact_top_logits = exact_top_logits  # float32 top logits of a bf16 head (grove.rollout.exact_logits)
        self.prefixes = PrefixStore(reuse_prefixes)
        self.tokenizer = tokenizer
        use_decode_attention(model)  # one-token decode steps as two matmuls (grove.rollout.decode_attention)
        self.eos_token_ids = end_token_ids(model, tokenizer, eos_token_ids)
        self.pad_token_id = padding_token_id(tokenizer, self.eos_token_ids)
        self._told_images = False
        placeholders = placeholder_token_ids(model)  # a vision-language model's image tokens: never generated
        self.never_sampled = torch.tensor(placeholders, dtype=torch.long) if placeholders else None

    @property
    def reuse_prefixes(self) -> bool:
        return self.prefixes.enabled

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    # ------------------------------------------------------------------ main loop
    def generate(
        self,
        prompt_token_ids: list[list[int]],
        n: int,
        sampling: SamplingParams,
        generator: torch.Generator,
        images: ImageTable | None = None,
    ) -> RolloutOutput:
        """Sample ``n`` completions per prompt; rows are prompt-major (``i * n + j``). ``images`` (one owner per
        prompt): the pixels of a vision-language policy's image prompts, passed to their prefill; such a call
        neither reuses cached prefixes nor keeps its rows for the next call (an image token's key and value depend
        on the image, which the cached token ids do not show).

        The decode loop runs in eval mode under ``torch.inference_mode()`` (the model's training mode is
        restored afterwards); the returned tensors are ordinary CPU tensors, usable in autograd later. Layers
        compiled for training (``train.compile``, when generation runs on the policy itself) run eager here: the
        decode step's shapes and cache objects would only make the compiler recompile.
        """
        start = time.perf_counter()
        if n < 1 or not prompt_token_ids or any(len(p) == 0 for p in prompt_token_ids):
            raise ValueError("need n >= 1 and at least one non-empty prompt")
        prompt_ids, prompt_mask = left_pad(prompt_token_ids, self.pad_token_id)
        was_training = self.model.training
        self.model.eval()  # no dropout, and gradient checkpointing would otherwise disable the KV cache
        try:
            with (
                torch.inference_mode(),
                torch.compiler.set_stance("force_eager"),
                exact_top_logits(self.model, self.exact_top_logits),
            ):
                rows = self._decode(prompt_ids, prompt_mask, n, sampling, generator, images)
        finally:
            self.model.train(was_training)
        out = rows.output(prompt_ids, prompt_mask, n, self.tokenizer, self.pad_token_id, start)
        if images is not None:
            out.images = images.select(out.prompt_index)
            if self.prefixes.enabled and not self._told_images:
                self._told_images = True
                log.info("rollout: prompts with images are prefilled whole (no prefix reuse: a cached image token's "
                         "keys and values depend on pixels the token ids do not show)")
        return out

    def _decode(
        self,
        prompt_ids: Tensor,
        prompt_mask: Tensor,
        n: int,
        sampling: SamplingParams,
        generator: torch.Generator,
        images: ImageTable | None = None,
    ) -> GeneratedRows:
        """The prefill + decode loop, rows in global (prompt-major) order."""
        device = self.device
        total = prompt_ids.shape[0] * n
        eos = torch.tensor(self.eos_token_ids, dtype=torch.long, device=device)
        uniforms = draw_uniforms(total, sampling.max_new_tokens, generator, device)

        # prefill each distinct prompt once (identical prompts, e.g. the G copies of an environment at turn 0,
        # share one row), then fan the cache out to n samples per prompt
        prompts = DistinctPrompts.of(prompt_ids.to(device), prompt_mask.to(device), n, images)
        fan_out = prompts.fan_out
        pixels = pixel_inputs(self.model, prompts.images_of(images))
        cache, logits, layout, attn, next_pos, tokens_run = self._prefill(prompts.ids, prompts.mask, pixels)
        keeping = self.prefixes.open and not pixels  # rows with image tokens are never reused
        reused_tokens = int(prompt_mask.sum()) - tokens_run
        logits = logits[fan_out]
        if n > 1 or prompts.merged:
            select_cache_rows(cache, fan_out)
        prompt_layout, attn, next_pos = layout[fan_out], attn[fan_out], next_pos[fan_out]  # by global row
        kept: list[KVBank] = []  # rows kept for the next call (inside reusing_prefixes)

        active = torch.arange(total, device=device)  # global row of each running row
        # preallocated outputs, written by row index each step (no per-row Python work)
        tokens = torch.full((total, sampling.max_new_tokens), self.pad_token_id, dtype=torch.long, device=device)
        logprobs = torch.zeros((total, sampling.max_new_tokens), dtype=torch.float32, device=device)
        lengths = torch.zeros(total, dtype=torch.long, device=device)
        reasons = torch.full((total,), LENGTH, dtype=torch.long, device=device)
        for step in range(sampling.max_new_tokens):
            tok, lp = sample_tokens(
                logits, sampling.temperature, sampling.top_k, sampling.top_p, uniforms[active, step],
                self.never_sampled,
            )
            tokens[active, step] = tok
            logprobs[active, step] = lp.float()
            lengths[active] += 1
            done = torch.isin(tok, eos) if len(eos) else torch.zeros_like(tok, dtype=torch.bool)
            reasons[active[done]] = EOS
            if sampling.stop:
                running = (~done).nonzero().flatten()
                # every running row has generated exactly step + 1 tokens
                hits = stop_string_hits(self.tokenizer, tokens[active[running], : step + 1], sampling.stop)
                stopped = running[hits]
                done[stopped] = True
                reasons[active[stopped]] = STOP
            last = step == sampling.max_new_tokens - 1
            if keeping and (last or done.any()):  # the rows leaving the cache, for the next call
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
        self.prefixes.keep(KVBank.concat(kept) if kept else None)
        return GeneratedRows(tokens, logprobs, lengths, reasons, reused_tokens)

    # ------------------------------------------------------------------ prefill and prefix reuse
    def _run(
        self, ids: Tensor, attn: Tensor, positions: Tensor, cache: DynamicCache, pixels: dict[str, Tensor] | None = None
    ) -> Tensor:
        """One prefill forward over ``cache``; the last position's logits ``[rows, V]``.

        The last position is picked with an index tensor, not ``logits_to_keep=1``: the slice ``[:, -1:]`` of
        ``[rows, T, H]`` hidden states is not contiguous, and a linear layer on it runs as a batched matmul over
        ``rows`` expanded copies of the output projection's weight (a much slower prefill: docs/benchmarks.md);
        the index gives a contiguous ``[rows, 1, H]`` and one matrix product."""
        last = torch.tensor([ids.shape[1] - 1], device=ids.device)
        out = self.model(
            input_ids=ids, attention_mask=attn, position_ids=positions,
            **cache_argument(self.model, cache), use_cache=True, logits_to_keep=last, **(pixels or {}),
        )
        return out.logits[:, -1, :]

    def _prefill(
        self, ids: Tensor, attn: Tensor, pixels: dict[str, Tensor] | None = None
    ) -> tuple[DynamicCache, Tensor, Tensor, Tensor, Tensor, int]:
        """Run the (distinct, left-padded) prompts through the model: ``(cache, last logits [N, V], the token
        id at each cached position [N, T], attention mask [N, T], next position [N], prompt tokens run)``.

        With :attr:`reuse_prefixes`, a prompt whose first tokens are cached (a row of the previous call inside
        :meth:`reusing_prefixes`, or the prefix every prompt of this call shares) takes their keys and values
        and only its remaining tokens are run (:mod:`grove.rollout.prefix_cache`). Prompts with images (``pixels``,
        the model's pixel inputs) are prefilled whole."""
        plan = None if pixels else self.prefixes.plan(ids, attn, self._shared_prefix_bank)
        if plan is None:
            positions = (attn.cumsum(-1) - 1).clamp(min=0)
            cache = DynamicCache(config=self.model.config)
            logits = self._run(ids, attn, positions, cache, pixels)
            return cache, logits, ids, attn, positions[:, -1] + 1, int(attn.sum())
        reuse = plan.layout(self.pad_token_id)
        del plan
        cache = DynamicCache(ddp_cache_data=reuse.prefix_layers, config=self.model.config)
        mask = reuse.mask
        logits = self._run(reuse.new_ids, mask, reuse.new_positions, cache)
        return cache, logits, reuse.layout, mask, reuse.next_positions, reuse.tokens_run

    def _shared_prefix_bank(self, prefix: Tensor) -> KVBank:
        """The one-row :class:`KVBank` of ``prefix [1, S]`` (a prefix every prompt of the call shares)."""
        shared = prefix.shape[1]
        positions = torch.arange(shared, device=prefix.device)[None]
        one = DynamicCache(config=self.model.config)
        self._run(prefix, torch.ones_like(prefix), positions, one)
        return KVBank(prefix, torch.tensor([shared], device=prefix.device), [lay.keys for lay in one.layers],
                      [lay.values for lay in one.layers], positions)

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
        with self.prefixes.keeping():
            yield
