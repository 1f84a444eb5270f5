"""How many tokens an agent's context may have, and what happens to one that would not fit.

An environment's observation can be any length. A context longer than the model's context length cannot be run
(the model's positions end; a megabyte of text would ask the generator for hundreds of GB), and one that leaves no
room for ``max_new_tokens`` cannot be answered. The limit is the model's context length (from the engine's model
config, passed in by the experience source) or, for conversations, ``env.max_context_tokens`` when smaller, less
the tokens generated per turn. ``env.prompt_overflow`` chooses what a prompter does with a context past it:

* ``end`` (the default): the trajectory ends as truncated at that turn, so nothing the model did not see whole is
  trained on; the rollout counts it (``context_overflow_trajectories``) and warns once per environment;
* ``truncate_observation``: the new observation keeps only its end (after a ``[…]`` mark), as much as fits
  besides the rest of the context; the end of an observation is what the environment said last (the result of
  the action, the current state, the admissible actions). When not even that fits, the trajectory ends as above.

Cutting reads only the observation's last characters (at most :data:`CHARS_PER_TOKEN` per token of room), and an
observation that cannot fit whatever its tokens are is never tokenized whole: no token of the tokenizer is longer
than its longest vocabulary entry, so a text of more than ``limit`` times that many characters (times
:data:`NORMALISATION_SLACK`, for normalisers that compose characters) has more than ``limit`` tokens
(:meth:`ContextBudget.surely_exceeded`). Work on an observation of any size is bounded by the context, not by the
observation: a 50 MB observation costs what a context-sized one does.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from grove.rollout.engine import PromptTooLongError

__all__ = [
    "CHARS_PER_TOKEN",
    "CUT_MARK",
    "NORMALISATION_SLACK",
    "ContextBudget",
    "ContextOverflow",
    "PromptOverflow",
    "cut_to_fit",
    "longest_token_chars",
]

PromptOverflow = Literal["end", "truncate_observation"]

#: shown before the kept end of an observation that was cut
CUT_MARK = "[…] "

#: characters read per token of room when cutting an observation (more than any common tokenizer averages)
CHARS_PER_TOKEN = 16

#: characters a tokenizer's normaliser may fold into one (composition): the sure-overflow bound allows for it
NORMALISATION_SLACK = 4

_longest_entries: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def longest_token_chars(tokenizer: Any) -> int:
    """The most characters one token can cover: its longest vocabulary entry (a byte-level entry's characters are
    its bytes, at least the characters it decodes to). Computed once per tokenizer."""
    try:
        return _longest_entries[tokenizer]
    except (KeyError, TypeError):
        pass
    longest = max((len(entry) for entry in tokenizer.get_vocab()), default=1)
    try:
        _longest_entries[tokenizer] = longest
    except TypeError:  # not weak-referenceable: measured again next time
        pass
    return longest


@dataclass(frozen=True)
class ContextOverflow:
    """A context that did not fit: ``tokens`` long, ``limit`` allowed (``budget`` says where the limit comes from),
    and what could be done about it (``hint``)."""

    tokens: int
    limit: int
    budget: str
    hint: str = ""
    at_least: bool = False  # ``tokens`` is a lower bound: the observation was too long to be worth measuring

    @property
    def described(self) -> str:
        """``"1234 tokens"``, or ``"at least 1234 tokens"`` for a lower bound."""
        return f"{'at least ' if self.at_least else ''}{self.tokens} tokens"


@dataclass(frozen=True)
class ContextBudget:
    """The most tokens a context may have (``limit``; ``None``: unknown, nothing is checked) and the overflow mode."""

    limit: int | None
    description: str = ""
    overflow: PromptOverflow = "end"

    @classmethod
    def of(
        cls,
        context_length: int | None,
        max_new_tokens: int,
        overflow: PromptOverflow = "end",
        max_context_tokens: int | None = None,
    ) -> ContextBudget:
        """The budget for contexts answered with ``max_new_tokens`` by a model of ``context_length`` positions
        (``None``: unknown), within ``max_context_tokens`` (``env.max_context_tokens``) when given."""
        limits = []
        if context_length is not None:
            limits.append((context_length, f"the model's context of {context_length} tokens"))
        if max_context_tokens is not None:
            limits.append((max_context_tokens, f"env.max_context_tokens ({max_context_tokens})"))
        if not limits:
            return cls(None, "", overflow)
        total, source = min(limits, key=lambda item: item[0])
        room = total - max_new_tokens
        if room < 1:
            raise PromptTooLongError(
                f"max_new_tokens ({max_new_tokens}) leaves no room for an environment's prompt in {source}; lower "
                f"rollout.max_new_tokens (eval.max_new_tokens in evaluation) below {total}"
            )
        return cls(room, f"{source} less {max_new_tokens} new tokens", overflow)

    def fits(self, tokens: int) -> bool:
        return self.limit is None or tokens <= self.limit

    def surely_exceeded(self, tokenizer: Any, text: str) -> int | None:
        """A lower bound of ``text``'s tokens when they surely exceed the limit (see the module docstring) without
        tokenizing it, else ``None`` (it may fit: measure it)."""
        if self.limit is None:
            return None
        widest = longest_token_chars(tokenizer) * NORMALISATION_SLACK
        if len(text) <= self.limit * widest:
            return None
        return len(text) // widest

    def surely_too_long(self, tokens: int, cut_hint: str = "") -> ContextOverflow:
        """The overflow of a context of at least ``tokens`` tokens (:meth:`surely_exceeded`)."""
        overflow = self.overflow_of(tokens, cut_hint)
        return ContextOverflow(overflow.tokens, overflow.limit, overflow.budget, overflow.hint, at_least=True)

    def overflow_of(self, tokens: int, cut_hint: str = "") -> ContextOverflow:
        """The overflow of a ``tokens``-long context; ``cut_hint`` says why not even a cut observation fitted
        (``truncate_observation``)."""
        if self.overflow == "end":
            hint = "env.prompt_overflow: truncate_observation keeps the end of a long observation instead"
        else:
            hint = cut_hint or "Not even the end of the observation fits (env.prompt_overflow: truncate_observation)"
        return ContextOverflow(tokens, self.limit or 0, self.description, hint)


def _tail(tokenizer: Any, text: str, tokens: int) -> str:
    """The end of ``text``: at most ``tokens`` tokens of it, read from its last ``tokens * CHARS_PER_TOKEN``
    characters only."""
    ids = tokenizer(text[-tokens * CHARS_PER_TOKEN :], add_special_tokens=False)["input_ids"]
    return tokenizer.decode(ids[-tokens:], skip_special_tokens=False)


def cut_to_fit(
    tokenizer: Any, text: str, limit: int, encode: Callable[[str], list[int]], *, whole: bool = True, attempts: int = 4
) -> tuple[list[int], str] | None:
    """``(ids, shown)``: the context ``encode(shown)`` within ``limit`` tokens, where ``shown`` is ``text`` when
    that fits (tried when ``whole``), else :data:`CUT_MARK` and the longest end of ``text`` found to fit; ``None``
    when even the mark alone does not fit. (Decoding a cut and encoding it inside the context can differ by a few
    tokens at the edges, so the cut is shortened by the excess and tried again, up to ``attempts`` times.)"""
    if whole and len(text) <= limit * CHARS_PER_TOKEN:  # may fit whole (with the rest of the context now shorter)
        ids = encode(text)
        if len(ids) <= limit:
            return ids, text
    room = limit - len(encode(CUT_MARK))
    for _ in range(attempts):
        if room < 1:
            return None
        shown = CUT_MARK + _tail(tokenizer, text, room)
        ids = encode(shown)
        if len(ids) <= limit:
            return ids, shown
        room -= len(ids) - limit
    return None
