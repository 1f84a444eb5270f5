"""A rollout engine for GPUs: a static key/value cache and a decode step captured once as a CUDA graph.

transformers' decode loop on a GPU is bound by kernel launches, not by the GPU: each step launches about a thousand
small kernels from Python, and a small model's step takes far longer to launch than to compute. This engine runs the
decoder's arithmetic itself (:mod:`grove.rollout.decoder_forward`) on its own fused copy of the weights
(:mod:`grove.rollout.decode_weights`) over tensors allocated before the loop, so the one-token step is one fixed
sequence of kernels that is captured as a CUDA graph per batch size and replayed (:mod:`grove.rollout.decode_step`):

* **static cache** (:class:`~grove.rollout.static_kv_cache.StaticKVCache`): one slot per completion, one column per
  prompt-block position and decode step, reused by every call that fits;
* **rows** (:class:`~grove.rollout.decode_rows.DecodeRows`): the slots' tokens, log-probs, lengths and finish state on
  the device; slots are padded up to a batch bucket; finished slots keep stepping until enough have finished for a
  smaller bucket, then the running ones move to the front (compaction) and the smaller bucket's graph runs;
* **sampling on the device** from a uniform table drawn up front from the caller's generator
  (:func:`grove.rollout.sampling.draw_uniforms`: token ``t`` of row ``r`` uses ``u[r, t]``), so the samples equal the
  transformers engine's for the same seed (up to the logits' rounding) and the graph's equal the eager step's;
* the host reads the rows back every ``sync_every`` steps: to stop when every row has ended, to compact, and to check
  stop strings (a row whose text contains one is cut after the token that completed it, as the transformers engine
  cuts it);
* **prefill and prefix reuse** as the transformers engine does them (:mod:`grove.rollout.prefix_cache`): identical
  prompts once, the prefix a batch shares once, and inside ``reusing_prefixes()`` (the turns of a batch of episodes)
  the previous call's rows (the static cache itself, read in place) give each next prompt its longest cached prefix;
* **weights**: the copy is refreshed from the model in place at each call (once per ``reusing_prefixes()`` block,
  whose calls share weights), so the captured graphs stay valid across optimizer steps; a LoRA adapter is merged
  into the copy; an FSDP2 run generates from its full replica.

More rows than the memory budget holds (``rollout.cache_memory_fraction`` of the free device memory) are decoded in
several passes; prefix reuse then keeps nothing for the next call. Between a step's rollouts and its update the
cache and its graphs are kept when the cache takes at most an eighth of the device's memory, else freed
(:meth:`StaticCacheEngine.release_memory`) and made again at the next rollout. On a CPU the same engine runs every step eagerly (the
transformers engine is faster there); it is the reference the GPU path is tested against.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch
from torch import Tensor, nn

from grove.rollout.decode_rows import DecodeRows
from grove.rollout.decode_step import DecodeStep, StepRunner, bucket_for
from grove.rollout.decode_weights import DecodeWeights
from grove.rollout.decoder_spec import DecoderSpec
from grove.rollout.engine import RolloutEngine, RolloutOutput, SamplingParams
from grove.rollout.exact_logits import DEFAULT_CANDIDATES
from grove.rollout.generated_rows import EOS, LENGTH, STOP, GeneratedRows
from grove.rollout.prefix_cache import KVBank, PrefixStore, compact_rows
from grove.rollout.prompt_rows import DistinctPrompts, left_pad
from grove.rollout.rotary_table import RotaryTable
from grove.rollout.sampling import draw_uniforms
from grove.rollout.special_tokens import end_token_ids, padding_token_id
from grove.rollout.static_kv_cache import StaticKVCache
from grove.rollout.static_prefill import Prefill, empty_cache, prefill_prompts, run_prompt_tokens
from grove.rollout.stop_strings import stop_string_hits
from grove.vision.image_table import ImageTable

__all__ = ["StaticCacheEngine"]

SYNC_EVERY = 8  # decode steps between host read-backs
KEPT_CACHE_SHARE = 1 / 8  # a cache taking more of the device's memory is freed during the update


class StaticCacheEngine(RolloutEngine):
    """See the module docstring.

    ``dtype``: the generation copy's dtype (default: the model's). ``exact_top_logits`` > 0 computes the logits of a
    low-precision copy in float32 (:mod:`grove.rollout.decode_weights`). ``cuda_graphs``: capture the decode step on
    CUDA (false: eager steps, for debugging). Raises :class:`grove.rollout.decoder_spec.UnsupportedDecoder` for a
    model it cannot run."""

    def __init__(
        self,
        model: nn.Module,
        tokenizer: Any,
        eos_token_ids: Sequence[int] | int | None = None,
        *,
        reuse_prefixes: bool = True,
        exact_top_logits: int = DEFAULT_CANDIDATES,
        dtype: torch.dtype | None = None,
        cuda_graphs: bool = True,
        sync_every: int = SYNC_EVERY,
        cache_memory_fraction: float = 0.5,
    ) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.spec = DecoderSpec.of(model)
        first = next(model.parameters())
        self.device = first.device
        self.dtype = dtype or first.dtype
        self.exact_top_logits = exact_top_logits
        self.weights: DecodeWeights | None = None  # made at the first call, when the model holds its weights
        self.rotary = RotaryTable(model, self.dtype, self.device)
        self.prefixes = PrefixStore(reuse_prefixes)
        self.eos_token_ids = end_token_ids(model, tokenizer, eos_token_ids)
        self.pad_token_id = padding_token_id(tokenizer, self.eos_token_ids)
        self.eos = torch.tensor(self.eos_token_ids, dtype=torch.long, device=self.device)
        self.graphs = cuda_graphs and self.device.type == "cuda"
        self.sync_every = max(1, sync_every)
        self.cache_memory_fraction = cache_memory_fraction
        self.cache: StaticKVCache | None = None
        self.rows: DecodeRows | None = None
        self.uniforms: Tensor | None = None  # [R + 1, S]: the pass's uniform numbers (row R: the padding slots')
        self.base_column = torch.zeros(1, dtype=torch.long, device=self.device)
        self._runners: dict[tuple[float, int, float], StepRunner] = {}
        self._weights_current = False  # refreshed inside the open reusing_prefixes() block
        self.passes = 0  # decode passes of the last call (more than one: more rows than the memory budget)

    @property
    def reuse_prefixes(self) -> bool:
        return self.prefixes.enabled

    @property
    def captures(self) -> int:
        """CUDA graphs captured since the tensors were last allocated."""
        return sum(r.captures for r in self._runners.values())

    @contextmanager
    def reusing_prefixes(self) -> Iterator[None]:
        """Keep each call's rows for the next call (the turns of a batch of episodes, same weights): the weights are
        copied from the model once, at the block's first call."""
        self._weights_current = False
        with self.prefixes.keeping():
            try:
                yield
            finally:
                self._weights_current = False

    # ------------------------------------------------------------------ main loop
    def generate(
        self,
        prompt_token_ids: list[list[int]],
        n: int,
        sampling: SamplingParams,
        generator: torch.Generator,
        images: ImageTable | None = None,
    ) -> RolloutOutput:
        """Sample ``n`` completions per prompt; rows are prompt-major (``i * n + j``). Returned tensors are
        ordinary CPU tensors. Prompts with images are refused (the engine runs a text decoder only)."""
        if images is not None:
            raise NotImplementedError(
                "rollout.engine static_cache runs text decoders only and cannot take prompts with images; set "
                "rollout.engine: transformers (or auto) for a vision-language policy"
            )
        start = time.perf_counter()
        if n < 1 or not prompt_token_ids or any(len(p) == 0 for p in prompt_token_ids):
            raise ValueError("need n >= 1 and at least one non-empty prompt")
        prompt_ids, prompt_mask = left_pad(prompt_token_ids, self.pad_token_id)
        with torch.inference_mode():
            if self.weights is None:  # a generation copy may be released between phases: copied when generating
                with torch.no_grad(), torch.inference_mode(False):
                    self.weights = DecodeWeights(
                        self.model, self.spec, self.dtype, self.device, exact_head=self.exact_top_logits > 0
                    )
                self._weights_current = self.prefixes.open
            elif not (self.prefixes.open and self._weights_current):
                self.weights.refresh(self.model)
                self._weights_current = self.prefixes.open
            rows = self._decode(prompt_ids, prompt_mask, n, sampling, generator)
        return rows.output(prompt_ids, prompt_mask, n, self.tokenizer, self.pad_token_id, start)

    def _decode(
        self, prompt_ids: Tensor, prompt_mask: Tensor, n: int, sampling: SamplingParams, generator: torch.Generator
    ) -> GeneratedRows:
        device, steps = self.device, sampling.max_new_tokens
        total = prompt_ids.shape[0] * n
        uniforms = draw_uniforms(total, steps, generator, device)
        if self.rotary.ensure(int(prompt_mask.sum(1).max()) + steps):  # new table tensors: graphs captured again
            self._runners.clear()
        prompts = DistinctPrompts.of(prompt_ids.to(device), prompt_mask.to(device), n)
        prefill = self._prefill(prompts.ids, prompts.mask)
        width = prefill.width + steps  # the prompt block, then one column per fed token
        out = GeneratedRows(
            tokens=torch.full((total, steps), self.pad_token_id, dtype=torch.long, device=device),
            logprobs=torch.zeros((total, steps), dtype=torch.float32, device=device),
            lengths=torch.zeros(total, dtype=torch.long, device=device),
            reasons=torch.full((total,), LENGTH, dtype=torch.long, device=device),
            prompt_tokens_reused=int(prompt_mask.sum()) - prefill.tokens_run,
        )
        per_pass = self._rows_per_pass(total, width, steps)
        self.passes = -(-total // per_pass)
        for first in range(0, total, per_pass):
            last = min(total, first + per_pass)
            self._decode_pass(prefill, prompts.fan_out[first:last], uniforms[first:last], sampling, out, first)
        keep = self.prefixes.open and self.passes == 1
        self.prefixes.keep(self._cached_rows(prefill, prompts.fan_out, total) if keep else None)
        return out

    def _decode_pass(
        self, prefill: Prefill, fan_out: Tensor, uniforms: Tensor, sampling: SamplingParams, out: GeneratedRows,
        first: int,
    ) -> None:
        """Decode rows ``first …`` (``fan_out``: the prompt each continues) into ``out``."""
        count, steps = len(fan_out), sampling.max_new_tokens
        slots = bucket_for(count)
        self._allocate(slots, prefill.width + steps, steps)
        cache, rows = self.cache, self.rows
        padded = torch.cat([fan_out, fan_out[:1].expand(slots - count)])  # padding slots copy a real prompt
        cache.load_prompts(prefill.keys, prefill.values, prefill.valid, padded, slots)
        self.uniforms[:count, :steps].copy_(uniforms)
        self.base_column.fill_(prefill.width)
        rows.start(torch.arange(count, device=self.device), cache.rows, prefill.next_positions[fan_out], slots)
        runner = self._runner(sampling)
        runner.step.record(prefill.logits.index_select(0, fan_out), count)  # token 0, from the prefill's logits
        checked = 0  # stop strings are checked for tokens before this step
        for step in range(1, steps + 1):
            if step % self.sync_every == 0 or step == steps:
                slots, ended, checked = self._synchronise(slots, count, step, checked, sampling)
                if ended or step == steps:
                    break
            runner.run(slots)
        self._collect(out, first, count, steps)

    def _synchronise(
        self, slots: int, count: int, drawn: int, checked: int, sampling: SamplingParams
    ) -> tuple[int, bool, int]:
        """Read the rows back after ``drawn`` tokens: cut completions at stop strings, shrink the batch when enough
        rows have ended; ``(slots, whether every row has ended, tokens checked for stop strings)``."""
        rows = self.rows
        if sampling.stop:
            self._cut_at_stop_strings(slots, count, checked, drawn, sampling.stop)
        done = rows.done[:slots].cpu()
        running = int((~done).sum())
        if running == 0:
            return slots, True, drawn
        smaller = bucket_for(running)
        if smaller < slots:
            order = torch.cat([(~done).nonzero().flatten(), done.nonzero().flatten()]).to(self.device)
            self.cache.reorder_front(order)
            rows.reorder_front(order)
            slots = smaller
        return slots, False, drawn

    def _cut_at_stop_strings(self, slots: int, count: int, checked: int, drawn: int, stop: tuple[str, ...]) -> None:
        """For tokens ``checked … drawn-1``: a row whose text contains a stop string once token ``s`` is added ends
        there (length ``s + 1``, reason stop); a row that drew an end token at ``s`` is not checked at ``s``, as
        the transformers engine checks only rows still running after their end tokens."""
        rows = self.rows
        lengths, reasons = rows.length[:slots].cpu(), rows.reason[:slots].cpu()
        real = rows.global_row[:slots].cpu() < count
        tokens = rows.tokens[:slots, :drawn].cpu()
        changed = False
        for s in range(checked, drawn):
            candidates = (real & (lengths > s) & ~((reasons == EOS) & (lengths == s + 1))).nonzero().flatten()
            if len(candidates) == 0:
                continue
            hits = candidates[stop_string_hits(self.tokenizer, tokens[candidates, : s + 1], stop)]
            if len(hits):
                lengths[hits], reasons[hits] = s + 1, STOP
                changed = True
        if changed:
            stopped = reasons == STOP
            rows.length[:slots].copy_(lengths)
            rows.reason[:slots].copy_(reasons)
            rows.done[:slots] |= stopped.to(self.device)

    def _collect(self, out: GeneratedRows, first: int, count: int, steps: int) -> None:
        """Copy the pass's rows (in whatever slots they ended up) to rows ``first …`` of ``out``."""
        rows = self.rows
        slot_rows = rows.global_row[: self.cache.rows]
        slots = (slot_rows < count).nonzero().flatten()
        target = slot_rows[slots] + first
        out.tokens.index_copy_(0, target, rows.tokens[slots, :steps])
        out.logprobs.index_copy_(0, target, rows.logprobs[slots, :steps])
        out.lengths.index_copy_(0, target, rows.length[slots])
        out.reasons.index_copy_(0, target, rows.reason[slots])

    # ------------------------------------------------------------------ tensors and steps
    def _allocate(self, slots: int, width: int, steps: int) -> None:
        """Make the cache, rows and uniform table hold ``slots`` rows of ``width`` columns and ``steps`` tokens,
        allocating larger ones (and dropping the captured graphs) when they do not."""
        fits = self.cache is not None and self.cache.fits(slots, width) and self.rows.fits(slots, steps)
        if fits:
            return
        rows = max(slots, self.cache.rows if self.cache is not None else 0)
        width = max(width, self.cache.width if self.cache is not None else 0)
        steps = max(steps, self.rows.max_steps if self.rows is not None else 0)
        self._release()
        self.cache = StaticKVCache(self.spec, rows, width, self.dtype, self.device)
        self.rows = DecodeRows.allocate(rows, steps, self.device)
        self.uniforms = torch.zeros((rows + 1, steps), dtype=torch.float64, device=self.device)

    def release_memory(self) -> None:
        """Before the update: free the cache and its graphs when the cache takes more than
        :data:`KEPT_CACHE_SHARE` of the device's memory (they are allocated and captured again at the next call);
        a smaller cache is kept, with its graphs."""
        if self.cache is None or self.device.type != "cuda":
            return
        held = self.cache.rows * StaticKVCache.bytes_per_row(self.spec, self.cache.width, self.dtype)
        if held > KEPT_CACHE_SHARE * torch.cuda.get_device_properties(self.device).total_memory:
            self._release()

    def _release(self) -> None:
        self._runners.clear()
        self.cache = self.rows = self.uniforms = None
        if self.device.type == "cuda":
            torch.cuda.empty_cache()

    def _runner(self, sampling: SamplingParams) -> StepRunner:
        """The step runner of these sampling settings over the current tensors (its graphs captured as needed)."""
        key = (sampling.temperature, sampling.top_k, sampling.top_p)
        runner = self._runners.get(key)
        if runner is None:
            step = DecodeStep(
                self.weights, self.rotary, self.cache, self.rows, self.uniforms, self.base_column, self.eos, *key
            )
            runner = self._runners[key] = StepRunner(step, self.graphs)
        return runner

    def _rows_per_pass(self, total: int, width: int, steps: int) -> int:
        """How many rows one pass decodes: all of them when the tensors already hold them or the memory budget
        does; else as many as ``cache_memory_fraction`` of the free memory holds."""
        if self.cache is not None and self.cache.fits(bucket_for(total), width) and self.rows.fits(total, steps):
            return total
        per_row = self.bytes_per_row(width, steps)
        budget = self._free_memory() * self.cache_memory_fraction
        if self.cache is not None:
            budget += self.cache.rows * StaticKVCache.bytes_per_row(self.spec, self.cache.width, self.dtype)
        rows = int(budget // per_row)
        if rows < 1:
            raise MemoryError(
                f"the static-cache engine needs {per_row / 2**20:.0f} MiB for one row of {width} columns, more than "
                f"rollout.cache_memory_fraction ({self.cache_memory_fraction}) of the free memory; lower "
                "rollout.max_new_tokens or the prompt length, raise the fraction, or set rollout.engine: transformers"
            )
        return min(total, rows)

    def bytes_per_row(self, width: int, steps: int) -> int:
        """The memory one row of a pass takes: its cache slot, its drawn tokens and log-probs, and the step's
        per-row activations (the logits and the sampler's float32 weights)."""
        return StaticKVCache.bytes_per_row(self.spec, width, self.dtype) + steps * 20 + 16 * self.spec.vocab

    def _free_memory(self) -> float:
        if self.device.type == "cuda":
            return float(torch.cuda.mem_get_info(self.device)[0])
        try:
            import psutil

            return float(psutil.virtual_memory().available)
        except ImportError:  # no way to ask: one pass
            return float("inf")

    # ------------------------------------------------------------------ prefill and prefix reuse
    def _run(
        self, ids: Tensor, positions: Tensor, keys: list[Tensor], values: list[Tensor], first_column: int,
        valid: Tensor,
    ) -> Tensor:
        """One prefill forward (:func:`grove.rollout.static_prefill.run_prompt_tokens`)."""
        return run_prompt_tokens(self.weights, self.rotary, ids, positions, keys, values, first_column, valid)

    def _prefill(self, ids: Tensor, attn: Tensor) -> Prefill:
        """Run the distinct left-padded prompts, reusing cached prefixes where :attr:`prefixes` has them."""
        return prefill_prompts(ids, attn, self.prefixes, self._run, self._empty_cache, self.pad_token_id)

    def _empty_cache(self, rows: int, width: int) -> tuple[list[Tensor], list[Tensor]]:
        return empty_cache(self.spec, rows, width, self.dtype, self.device)

    def _cached_rows(self, prefill: Prefill, fan_out: Tensor, total: int) -> KVBank:
        """The call's rows as the next call's prefixes: each slot's prompt block and the tokens it fed (all but its
        last), read in place from the static cache."""
        rows, cache = self.rows, self.cache
        slot_rows = rows.global_row[: cache.rows]
        real = slot_rows < total
        prompt_of = fan_out[slot_rows.clamp(max=total - 1)]
        fed = (torch.arange(cache.width - prefill.width, device=self.device)[None, :]
               < (rows.length[: cache.rows] - 1)[:, None])
        valid = torch.cat([prefill.valid[prompt_of], fed], dim=1) & real[:, None]
        generated = rows.tokens[: cache.rows, : cache.width - prefill.width]
        if generated.shape[1] < cache.width - prefill.width:  # fewer drawn steps allocated than decode columns
            extra = cache.width - prefill.width - generated.shape[1]
            generated = torch.cat([generated, generated.new_zeros(len(generated), extra)], dim=1)
        tokens = torch.cat([prefill.layout[prompt_of], generated], dim=1)
        return compact_rows(cache.keys, cache.values, valid, tokens)
