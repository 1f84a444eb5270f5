"""The rollout-engine contract: sampling parameters, the output layout and prompt encoding.

A :class:`RolloutEngine` turns ``B`` tokenised prompts into ``B * n`` completions laid out exactly like a
:class:`grove.batch.RolloutBatch` (prompts left-padded, responses right-padded), in *prompt-major* order:
completion ``j`` of prompt ``i`` is row ``i * n + j``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

import torch
from torch import Tensor

from grove.vision.image_table import ImageTable

__all__ = [
    "FINISH_REASONS",
    "PromptTooLongError",
    "check_prompts_fit",
    "RolloutEngine",
    "RolloutOutput",
    "SamplingParams",
    "context_length",
    "encode_prompts",
    "fit_prompts",
    "prompt_preview",
    "release_memory",
    "reusing_prefixes",
    "rollout_sampling",
]

FINISH_REASONS = ("eos", "stop", "length")


@dataclass(frozen=True)
class SamplingParams:
    """How to sample. ``temperature == 0`` is greedy; ``top_k == 0`` and ``top_p == 1`` disable truncation.

    ``stop`` strings end a completion as soon as its decoded text contains one of them (the token that
    completed the string is kept).
    """

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    max_new_tokens: int = 64
    stop: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0, got {self.top_k}")
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if any(not s for s in self.stop):
            raise ValueError("stop strings must be non-empty")
        object.__setattr__(self, "stop", tuple(self.stop))

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


def rollout_sampling(rollout: Any) -> SamplingParams:
    """How a run samples its rollouts: the ``temperature``, ``top_p``, ``top_k``, ``max_new_tokens`` and ``stop``
    strings of a config's ``rollout`` section (:class:`grove.config.sections.RolloutConfig`)."""
    return SamplingParams(
        temperature=rollout.temperature,
        top_p=rollout.top_p,
        top_k=rollout.top_k,
        max_new_tokens=rollout.max_new_tokens,
        stop=tuple(rollout.stop),
    )


@dataclass
class RolloutOutput:
    """``M = B * n`` completions in batch layout, prompt-major (row ``i * n + j`` = sample ``j`` of prompt ``i``).

    * ``prompt_ids`` / ``prompt_mask``     ``[M, P]`` left-padded;
    * ``response_ids`` / ``response_mask`` ``[M, R]`` right-padded, ``R`` = longest completion; the EOS
      token, when generated, is part of the response (mask 1);
    * ``logprobs`` ``[M, R]`` sampling-time log-probs of the response tokens, 0 at pads;
    * ``finish_reasons`` one of ``"eos"``, ``"stop"``, ``"length"`` per row;
    * ``texts`` the decoded completions (special tokens skipped);
    * ``prompt_index`` ``[M]`` which input prompt each row answers;
    * ``prompt_tokens_reused``: how many of the ``B`` prompts' tokens the engine did not run through the model
      (identical prompts prefilled once, prefixes taken from its cache; 0 for engines without either);
    * ``images``: the pixels of each row's prompt (:class:`grove.vision.image_table.ImageTable`, one owner per row) when the
      prompts held images.
    """

    prompt_ids: Tensor
    prompt_mask: Tensor
    response_ids: Tensor
    response_mask: Tensor
    logprobs: Tensor
    finish_reasons: list[str]
    texts: list[str]
    prompt_index: Tensor
    num_generated_tokens: int
    seconds: float
    prompt_tokens_reused: int = 0
    images: ImageTable | None = None  # the prompts' pixels, one owner per row (vision-language policies)

    @property
    def num_samples(self) -> int:
        return self.response_ids.shape[0]

    @property
    def completion_ids(self) -> list[list[int]]:
        """Each completion's token ids (its response tokens without padding, the EOS included when generated): the
        ``completion_ids`` column every reward receives, as TRL passes it."""
        lengths = self.response_mask.sum(dim=1).tolist()
        return [row[:n] for row, n in zip(self.response_ids.tolist(), lengths, strict=True)]

    @property
    def truncated(self) -> Tensor:
        """``[M]`` bool: the completion hit ``max_new_tokens``."""
        return torch.tensor([r == "length" for r in self.finish_reasons], dtype=torch.bool)


@runtime_checkable
class RolloutEngine(Protocol):
    """Anything that samples ``n`` completions for each tokenised prompt. ``images`` (one owner per prompt) holds
    the pixels of prompts with images (a vision-language policy; their image tokens are in the ids already); an
    engine that cannot take images raises ``NotImplementedError`` naming one that can."""

    def generate(
        self,
        prompt_token_ids: list[list[int]],
        n: int,
        sampling: SamplingParams,
        generator: torch.Generator,
        images: ImageTable | None = None,
    ) -> RolloutOutput: ...


def reusing_prefixes(engine: RolloutEngine) -> AbstractContextManager[None]:
    """``engine.reusing_prefixes()`` where the engine can keep one call's keys and values for the next (e.g.
    :class:`grove.rollout.hf_engine.TransformersEngine`), a no-op context otherwise. Open it only over calls
    made with the same weights."""
    method = getattr(engine, "reusing_prefixes", None)
    return method() if callable(method) else nullcontext()


def release_memory(engine: RolloutEngine) -> None:
    """``engine.release_memory()`` where the engine holds memory between calls that it can give back before the
    update (:class:`grove.rollout.static_engine.StaticCacheEngine`'s large caches), nothing otherwise."""
    method = getattr(engine, "release_memory", None)
    if callable(method):
        method()


def encode_prompts(
    tokenizer: Any,
    prompts: list[str | list[dict[str, str]]],
    *,
    system_prompt: str | None = None,
    use_chat_template: bool = True,
) -> list[list[int]]:
    """Token ids of each prompt, ready for generation.

    With ``use_chat_template`` a ``str`` prompt becomes a single user message, ``system_prompt`` (when not
    ``None``, and the conversation has no system message of its own) is prepended as a system message, and
    the template is rendered with ``add_generation_prompt=True``; ``None`` keeps the template's default
    system prompt. Without the chat template, prompts must be strings and are encoded as plain text (with the
    tokenizer's usual special tokens), ``system_prompt`` prefixed on its own line.
    """
    out: list[list[int]] = []
    for prompt in prompts:
        if use_chat_template:
            if not getattr(tokenizer, "chat_template", None):
                raise ValueError("use_chat_template=True but the tokenizer has no chat template")
            messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else list(prompt)
            if system_prompt is not None and (not messages or messages[0].get("role") != "system"):
                messages = [{"role": "system", "content": system_prompt}, *messages]
            text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
            ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        else:
            if not isinstance(prompt, str):
                raise ValueError("chat-message prompts need use_chat_template=True")
            text = prompt if system_prompt is None else f"{system_prompt}\n{prompt}"
            ids = tokenizer(text, add_special_tokens=True)["input_ids"]
        if not ids:
            raise ValueError(f"prompt {prompt!r} encodes to no tokens")
        out.append(list(ids))
    return out


class PromptTooLongError(ValueError):
    """A prompt plus the completion budget does not fit in the model's context (``rollout.prompt_overflow: error``)."""


# transformers sets ``model_max_length`` to a huge sentinel (int(1e30)) when the tokenizer does not know it
_SANE_MAX_LENGTH = 10_000_000


def context_length(model: Any, tokenizer: Any) -> int | None:
    """The most tokens (prompt + completion) the model takes: ``model.config.max_position_embeddings``, or the
    tokenizer's ``model_max_length`` when that is smaller and sane; ``None`` when neither is known."""
    config = getattr(model, "config", None) or getattr(getattr(model, "module", None), "config", None)
    limits = []
    positions = getattr(config, "max_position_embeddings", None)
    if isinstance(positions, int) and positions > 0:
        limits.append(positions)
    tokenizer_max = getattr(tokenizer, "model_max_length", None)
    if isinstance(tokenizer_max, int) and 0 < tokenizer_max < _SANE_MAX_LENGTH:
        limits.append(tokenizer_max)
    return min(limits) if limits else None


def prompt_preview(prompt: str | list[dict[str, Any]], chars: int = 60) -> str:
    """The first ``chars`` characters of a prompt (of its last user message for a chat), quoted, for messages."""
    if not isinstance(prompt, str):
        users = [m.get("content") for m in prompt if isinstance(m, dict) and m.get("role") == "user"]
        prompt = str(users[-1]) if users else str(prompt)
    return repr(prompt[:chars] + ("…" if len(prompt) > chars else ""))


def fit_prompts(
    prompt_ids: list[list[int]],
    *,
    context_length: int | None,
    max_new_tokens: int,
    overflow: Literal["error", "truncate_left"] = "error",
    describe: Callable[[int], str] = lambda i: f"prompt {i}",
    max_new_tokens_key: str = "rollout.max_new_tokens",
) -> tuple[list[list[int]], int]:
    """Make every prompt fit the context with room for ``max_new_tokens``: ``(prompt ids, how many were cut)``.

    A prompt longer than ``context_length - max_new_tokens`` tokens raises :class:`PromptTooLongError` naming it
    (``describe(i)``), its length, the limit and the fixes (``overflow="error"``), or keeps its last tokens
    (``"truncate_left"``: the chat template's tail, with the generation prompt, survives). ``context_length=None``
    (unknown) checks nothing.
    """
    if context_length is None:
        return prompt_ids, 0
    room = context_length - max_new_tokens
    if room < 1:
        raise PromptTooLongError(
            f"{max_new_tokens_key} ({max_new_tokens}) leaves no room for a prompt in the model's context of "
            f"{context_length} tokens; lower it below {context_length}"
        )
    out: list[list[int]] = []
    truncated = 0
    for i, ids in enumerate(prompt_ids):
        if len(ids) <= room:
            out.append(ids)
        elif overflow == "truncate_left":
            out.append(ids[len(ids) - room :])
            truncated += 1
        else:
            raise PromptTooLongError(
                f"{describe(i)} is {len(ids)} tokens long; with {max_new_tokens_key} {max_new_tokens} it needs "
                f"{len(ids) + max_new_tokens} tokens, more than the model's context of {context_length}. Shorten "
                f"the prompts or lower {max_new_tokens_key} (prompts may have at most {room} tokens now), or set "
                f"rollout.prompt_overflow: truncate_left to keep each long prompt's last {room} tokens"
            )
    return out, truncated


def check_prompts_fit(
    tokenizer: Any,
    prompts: Sequence[str | list[dict[str, str]]],
    *,
    context_length: int | None,
    max_new_tokens: int,
    system_prompt: str | None = None,
    use_chat_template: bool = True,
    describe: Callable[[int], str] = lambda i: f"prompt {i}",
    max_new_tokens_key: str = "rollout.max_new_tokens",
) -> None:
    """Raise :class:`PromptTooLongError` for the first of ``prompts`` that will not fit the context (what
    :func:`fit_prompts` with ``overflow="error"`` would raise when the prompt is drawn), checking a whole split when
    it loads rather than when the prompt's turn comes.

    A text prompt is encoded only when it could be too long: a token covers at least one byte of text (byte-level
    BPE; SentencePiece's word-start marker adds at most one token), so a prompt of ``b`` UTF-8 bytes takes at most
    ``b + 1`` tokens beyond the template's own."""
    if context_length is None or not prompts:
        return
    room = context_length - max_new_tokens
    encode = lambda items: encode_prompts(  # noqa: E731
        tokenizer, items, system_prompt=system_prompt, use_chat_template=use_chat_template
    )
    overhead = len(encode([""])[0]) if use_chat_template else len(encode(["x"])[0])
    suspects = [
        i for i, p in enumerate(prompts) if not isinstance(p, str) or overhead + len(p.encode("utf-8")) + 1 > room
    ]
    for start in range(0, len(suspects), 256):
        chunk = suspects[start : start + 256]
        fit_prompts(
            encode([prompts[i] for i in chunk]), context_length=context_length, max_new_tokens=max_new_tokens,
            describe=lambda k, chunk=chunk: describe(chunk[k]), max_new_tokens_key=max_new_tokens_key,
        )
