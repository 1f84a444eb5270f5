"""A batched sampling loop on a plain transformers causal LM with a :class:`DynamicCache` (no ``generate``).

The ``B`` unique prompts are prefilled once (left-padded, ``position_ids = cumsum(mask) - 1``, the same
positions :func:`grove.training.forward.policy_forward` uses), the cache is fanned out to ``n`` samples per
prompt, and tokens are decoded step by step with one forward for all still-running rows. Finished rows are
dropped from the cache and the batch, so they cost no further work.

Log-probs: the value recorded for each sampled token is ``log_softmax(logits / T)[token]`` with ``T`` the
sampling temperature (``T = 1`` for greedy), i.e. the *tempered policy before top-k / top-p truncation*.
That is the distribution the trainer optimises (it recomputes log-probs at the same temperature), so these
are the ``old_logprobs`` of an on-policy batch. Truncation only changes which tokens can be drawn.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor
from transformers import PreTrainedModel
from transformers.cache_utils import DynamicCache

from grove.rollout.base import RolloutEngine, RolloutOutput, SamplingParams

__all__ = ["TransformersEngine", "filter_logits"]


def filter_logits(logits: Tensor, top_k: int, top_p: float) -> Tensor:
    """Set logits outside the top-k / nucleus (top-p) set to ``-inf``; ``top_k=0`` and ``top_p=1`` disable."""
    if top_k > 0 and top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
        probs = sorted_logits.softmax(dim=-1)
        # drop a token when the mass of the strictly more likely tokens already reaches top_p
        drop_sorted = (probs.cumsum(dim=-1) - probs) >= top_p
        drop_sorted[..., 0] = False
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return logits


class TransformersEngine(RolloutEngine):
    """Rollout engine over a transformers ``PreTrainedModel`` (see the module docstring)."""

    def __init__(
        self,
        model: PreTrainedModel,
        tokenizer: Any,
        eos_token_ids: Sequence[int] | int | None = None,
    ) -> None:
        self.model = model
        self.tokenizer = tokenizer
        if eos_token_ids is None:
            eos_token_ids = tokenizer.eos_token_id
        if isinstance(eos_token_ids, int):
            eos_token_ids = [eos_token_ids]
        self.eos_token_ids = sorted({int(t) for t in eos_token_ids or []})
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
        """Draw one token per row; return ``(tokens, log-probs under the tempered, untruncated policy)``."""
        logits = logits.float()
        if sampling.greedy:
            logp = torch.log_softmax(logits, dim=-1)
            tokens = logits.argmax(dim=-1)
        else:
            scaled = logits / sampling.temperature
            logp = torch.log_softmax(scaled, dim=-1)
            probs = filter_logits(scaled, sampling.top_k, sampling.top_p).softmax(dim=-1)
            tokens = torch.multinomial(probs.to(generator.device), 1, generator=generator).squeeze(1)
            tokens = tokens.to(logits.device)
        return tokens, logp.gather(-1, tokens[:, None]).squeeze(1)

    def _stop_hits(self, rows: list[int], tokens: list[list[int]], stop: tuple[str, ...]) -> list[bool]:
        """Whether the decoded completion of each row now contains a stop string.

        Only a tail window is decoded: a string of ``c`` characters spans at most ``4c`` byte-level tokens, and
        it can only newly appear in tokens generated since the last check (which is every step).
        """
        window = 4 * max(len(s) for s in stop) + 4
        texts = self.tokenizer.batch_decode([tokens[r][-window:] for r in rows], skip_special_tokens=True)
        return [any(s in t for s in stop) for t in texts]

    # ------------------------------------------------------------------ main loop
    @torch.inference_mode()
    def generate(
        self,
        prompt_token_ids: list[list[int]],
        n: int,
        sampling: SamplingParams,
        generator: torch.Generator,
    ) -> RolloutOutput:
        """Sample ``n`` completions per prompt; rows are prompt-major (``i * n + j``)."""
        start = time.perf_counter()
        if n < 1 or not prompt_token_ids or any(len(p) == 0 for p in prompt_token_ids):
            raise ValueError("need n >= 1 and at least one non-empty prompt")
        device = self.device
        num_prompts, total = len(prompt_token_ids), len(prompt_token_ids) * n
        prompt_ids, prompt_mask = self._left_pad(prompt_token_ids)
        eos = torch.tensor(self.eos_token_ids, dtype=torch.long, device=device)

        # prefill the unique prompts once, then fan the cache out to n samples per prompt
        ids, attn = prompt_ids.to(device), prompt_mask.to(device)
        positions = (attn.cumsum(-1) - 1).clamp(min=0)
        cache = DynamicCache(config=self.model.config)
        out = self.model(
            input_ids=ids, attention_mask=attn, position_ids=positions,
            past_key_values=cache, use_cache=True, logits_to_keep=1,
        )
        logits = out.logits[:, -1, :].repeat_interleave(n, dim=0)
        cache.batch_repeat_interleave(n)
        attn = attn.repeat_interleave(n, dim=0)
        next_pos = positions[:, -1].repeat_interleave(n, dim=0) + 1

        active = torch.arange(total, device=device)  # global row of each running row
        tokens: list[list[int]] = [[] for _ in range(total)]
        logprobs: list[list[float]] = [[] for _ in range(total)]
        reasons = ["length"] * total
        for step in range(sampling.max_new_tokens):
            tok, lp = self._sample(logits, sampling, generator)
            rows = active.tolist()
            for r, t, v in zip(rows, tok.tolist(), lp.tolist(), strict=True):
                tokens[r].append(t)
                logprobs[r].append(v)
            done = torch.isin(tok, eos) if len(eos) else torch.zeros_like(tok, dtype=torch.bool)
            for k in done.nonzero().flatten().tolist():
                reasons[rows[k]] = "eos"
            if sampling.stop:
                running = [k for k, d in enumerate(done.tolist()) if not d]
                hits = self._stop_hits([rows[k] for k in running], tokens, sampling.stop)
                for k, hit in zip(running, hits, strict=True):
                    if hit:
                        done[k] = True
                        reasons[rows[k]] = "stop"
            if step == sampling.max_new_tokens - 1:
                break
            if done.any():
                keep = (~done).nonzero().flatten()
                if len(keep) == 0:
                    break
                cache.batch_select_indices(keep)
                active, tok, attn, next_pos = active[keep], tok[keep], attn[keep], next_pos[keep]
            attn = torch.cat([attn, attn.new_ones(len(active), 1)], dim=1)
            out = self.model(
                input_ids=tok[:, None], attention_mask=attn, position_ids=next_pos[:, None],
                past_key_values=cache, use_cache=True,
            )
            logits = out.logits[:, -1, :]
            next_pos = next_pos + 1
        del cache
        return self._pack(prompt_ids, prompt_mask, n, num_prompts, tokens, logprobs, reasons, start)

    def _pack(
        self,
        prompt_ids: Tensor,
        prompt_mask: Tensor,
        n: int,
        num_prompts: int,
        tokens: list[list[int]],
        logprobs: list[list[float]],
        reasons: list[str],
        start: float,
    ) -> RolloutOutput:
        total = len(tokens)
        width = max(len(t) for t in tokens)
        response_ids = torch.full((total, width), self.pad_token_id, dtype=torch.long)
        response_mask = torch.zeros((total, width), dtype=torch.long)
        response_lp = torch.zeros((total, width), dtype=torch.float32)
        for r, (t, v) in enumerate(zip(tokens, logprobs, strict=True)):
            response_ids[r, : len(t)] = torch.tensor(t, dtype=torch.long)
            response_mask[r, : len(t)] = 1
            response_lp[r, : len(v)] = torch.tensor(v, dtype=torch.float32)
        return RolloutOutput(
            prompt_ids=prompt_ids.repeat_interleave(n, dim=0),
            prompt_mask=prompt_mask.repeat_interleave(n, dim=0),
            response_ids=response_ids,
            response_mask=response_mask,
            logprobs=response_lp,
            finish_reasons=reasons,
            texts=self.tokenizer.batch_decode(tokens, skip_special_tokens=True),
            prompt_index=torch.arange(num_prompts).repeat_interleave(n),
            num_generated_tokens=sum(len(t) for t in tokens),
            seconds=time.perf_counter() - start,
        )
