"""One growing conversation, token-in-token-out: an episode trained as one sequence.

The context of turn ``t+1`` is the context of turn ``t``, then **the tokens sampled at turn t exactly as
sampled**, then the environment's tokens (the turn separator and the next user message, as token ids,
masked out of the loss). Nothing the model generated is ever decoded and re-encoded for training.

Environment tokens come from the chat template: the whole conversation (with the model's turn decoded as
its message) is rendered with the generation prompt, and must start with the current context plus the
sampled tokens; what follows is the environment's part. This handles the turn separator: the model stops
at ``<|im_end|>`` but the template renders ``<|im_end|>\\n``, so the ``\\n`` is the first environment token
(and a turn cut by ``max_new_tokens`` gets the template's ``<|im_end|>`` as an environment token). When the
rendering does **not** extend the tokens exactly (a sampled tokenisation the tokenizer would not produce,
a template that rewrites past turns), the sample ends there and a new sample starts from the rendered
conversation as its prompt, instead of silently training on tokens that differ from the sampled ones
(prime-rl's and AReaL's exact-prefix rule). Each sample's response therefore holds, for every turn it
covers, the sampled ids and their sampling log-probs, with the environment ids in between.

The context may hold ``env.max_context_tokens`` or the model's context length, whichever is smaller, less
``max_new_tokens`` (:mod:`grove.experience.context_budget`). An observation that would take the conversation past
it is not appended (its tokens never reach a sample) and the trajectory ends there; with ``truncate_observation``
the observation keeps the end that fits instead, and the trajectory ends only when not even that does.

An observation's images (a vision-language policy) go before its text in its user message; the processor renders
the whole conversation with every image expanded into its image tokens, and a sample carries the pixels of all the
images among its tokens.
"""

from __future__ import annotations

from typing import Any

from grove.envs.base import Observation
from grove.experience.context_budget import ContextBudget, ContextOverflow, cut_to_fit
from grove.experience.episode_records import SampleTokens, Turn
from grove.experience.per_step_prompts import encode_messages, observation_content, render_observation
from grove.vision.image_table import ImageTable

__all__ = ["ConversationPrompter"]


class ConversationPrompter:
    def __init__(
        self,
        tokenizer: Any,
        instructions: str,
        *,
        show_admissible: bool,
        max_context_tokens: int,
        max_new_tokens: int,
        budget: ContextBudget | None = None,
    ) -> None:
        """``budget``: the context limit (:meth:`ContextBudget.of` with ``max_context_tokens``); by default
        ``max_context_tokens`` less ``max_new_tokens``, the model's context length unknown."""
        if not getattr(tokenizer, "chat_template", None):
            raise ValueError("env.prompt: conversation needs a tokenizer with a chat template")
        self.tokenizer = tokenizer
        self.show_admissible = show_admissible
        self.budget = budget or ContextBudget.of(None, max_new_tokens, max_context_tokens=max_context_tokens)
        self.messages: list[dict[str, Any]] = [{"role": "system", "content": instructions}]
        self.tokens: list[int] = []
        self.current: SampleTokens | None = None
        self._samples: list[SampleTokens] = []
        self.eos_ids = _eos_ids(tokenizer)
        self.prefix_breaks = 0  # samples started because the rendering did not extend the tokens
        self.overflow: ContextOverflow | None = None
        self.images: ImageTable | None = None  # the pixels of the images in the context (a VLM policy)
        self._rendered_images: ImageTable | None = None

    def _render(self, messages: list[dict[str, Any]] | None = None) -> list[int]:
        """The conversation (or ``messages``) rendered with the generation prompt; the pixels of its images kept for
        the sample it becomes."""
        ids, self._rendered_images = encode_messages(self.tokenizer, self.messages if messages is None else messages)
        return ids

    def _start_sample(self, prompt: list[int]) -> None:
        self.current = SampleTokens(prompt_ids=list(prompt), images=self._rendered_images)
        self.images = self._rendered_images
        self._samples.append(self.current)
        self.tokens = list(prompt)

    def _with_observation(self, observation: Observation) -> list[int] | None:
        """The conversation rendered with ``observation`` as the next user message (appended), or ``None`` (and
        :attr:`overflow` set, nothing appended) when it would not fit."""
        text = render_observation(observation, self.show_admissible)
        at_least = self.budget.surely_exceeded(self.tokenizer, observation.text)
        # an observation too long to be worth measuring is not rendered whole: cut, or the conversation ends
        message = {"role": "user", "content": observation_content(text, observation)}
        rendered = self._render([*self.messages, message]) if at_least is None else None
        if rendered is None or not self.budget.fits(len(rendered)):
            fitted = None
            if self.budget.overflow == "truncate_observation":
                fitted = cut_to_fit(
                    self.tokenizer, observation.text.strip(), self.budget.limit,
                    lambda shown: self._render([
                        *self.messages,
                        {"role": "user", "content": observation_content(
                            render_observation(observation, self.show_admissible, shown), observation)},
                    ]),
                )
            if fitted is None:
                hint = ("The conversation so far leaves no room even for the end of the next observation "
                        "(env.prompt_overflow: truncate_observation): a conversation ends when its context is full")
                self.overflow = (self.budget.overflow_of(len(rendered), hint) if rendered is not None
                                 else self.budget.surely_too_long(at_least, hint))
                return None
            rendered, shown = fitted
            text = render_observation(observation, self.show_admissible, shown)
        self.messages.append({"role": "user", "content": observation_content(text, observation)})
        return rendered

    def begin(self, observation: Observation) -> None:
        rendered = self._with_observation(observation)
        if rendered is not None:
            self._start_sample(rendered)

    def context(self) -> list[int] | None:
        if self.overflow is not None:
            return None
        if not self.budget.fits(len(self.tokens)):
            self.overflow = self.budget.overflow_of(len(self.tokens))
            return None
        return self.tokens

    def _message_text(self, ids: list[int]) -> str:
        if ids and ids[-1] in self.eos_ids:
            ids = ids[:-1]
        return self.tokenizer.decode(ids, skip_special_tokens=False)

    def record(self, turn: Turn, next_observation: Observation | None) -> None:
        turn_number = sum(1 for m in self.messages if m["role"] == "assistant")
        self.current.append(turn.action_ids, turn.logprobs, turn_number)
        self.tokens.extend(turn.action_ids)
        self.messages.append({"role": "assistant", "content": self._message_text(turn.action_ids)})
        if next_observation is None:
            return
        rendered = self._with_observation(next_observation)
        if rendered is None:
            return
        if rendered[: len(self.tokens)] == self.tokens:
            self.current.append(rendered[len(self.tokens) :], None, -1)
            self.tokens = rendered
            self.current.images = self.images = self._rendered_images  # the images of all its tokens so far
        else:
            self.prefix_breaks += 1
            self._start_sample(rendered)

    def samples(self) -> list[SampleTokens]:
        return [s for s in self._samples if any(t >= 0 for t in s.token_turns)]


def _eos_ids(tokenizer: Any) -> set[int]:
    ids = tokenizer.eos_token_id
    ids = ids if isinstance(ids, list | tuple) else [ids]
    return {int(i) for i in ids if i is not None}
