"""The rollout-engine contract: sampling parameters, the output layout and prompt encoding.

A :class:`RolloutEngine` turns ``B`` tokenised prompts into ``B * n`` completions laid out exactly like a
:class:`grove.batch.RolloutBatch` (prompts left-padded, responses right-padded), in *prompt-major* order:
completion ``j`` of prompt ``i`` is row ``i * n + j``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import torch
from torch import Tensor

__all__ = ["FINISH_REASONS", "RolloutEngine", "RolloutOutput", "SamplingParams", "encode_prompts"]

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


@dataclass
class RolloutOutput:
    """``M = B * n`` completions in batch layout, prompt-major (row ``i * n + j`` = sample ``j`` of prompt ``i``).

    * ``prompt_ids`` / ``prompt_mask``     ``[M, P]`` left-padded;
    * ``response_ids`` / ``response_mask`` ``[M, R]`` right-padded, ``R`` = longest completion; the EOS
      token, when generated, is part of the response (mask 1);
    * ``logprobs`` ``[M, R]`` sampling-time log-probs of the response tokens, 0 at pads;
    * ``finish_reasons`` one of ``"eos"``, ``"stop"``, ``"length"`` per row;
    * ``texts`` the decoded completions (special tokens skipped);
    * ``prompt_index`` ``[M]`` which input prompt each row answers.
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

    @property
    def num_samples(self) -> int:
        return self.response_ids.shape[0]

    @property
    def truncated(self) -> Tensor:
        """``[M]`` bool: the completion hit ``max_new_tokens``."""
        return torch.tensor([r == "length" for r in self.finish_reasons], dtype=torch.bool)


@runtime_checkable
class RolloutEngine(Protocol):
    """Anything that samples ``n`` completions for each tokenised prompt."""

    def generate(
        self,
        prompt_token_ids: list[list[int]],
        n: int,
        sampling: SamplingParams,
        generator: torch.Generator,
    ) -> RolloutOutput: ...


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
