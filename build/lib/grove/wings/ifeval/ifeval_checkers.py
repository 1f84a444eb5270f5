"""Adapter over the IFEval instruction checkers shipped in ``llm-eval-framework`` (Google's reference code).

The checkers themselves are the package's (``eval_framework.tasks.ifeval``: ``INSTRUCTION_DICT`` and the
classes of ``instructions.py``); nothing of them is copied here. This module only

* runs them the way the package's ``evaluation.py`` does (instantiate, ``build_description(**kwargs)``,
  ``build_description(prompt=...)`` for a checker whose arguments name ``prompt``, then
  ``check_following(response)``; an empty or whitespace-only response fails every instruction), caching one
  built checker per (instruction id, kwargs);
* makes the two checkers that need nltk's trained ``punkt`` data work offline (the data is not installed and
  is not downloaded): :class:`OfflineNumberOfSentences` and :class:`OfflineCapitalWordFrequencyChecker`
  subclass the package's classes and override only ``check_following``, counting with an *untrained*
  :class:`nltk.tokenize.punkt.PunktSentenceTokenizer` that knows a short list of abbreviations
  (:data:`ABBREVIATIONS`) instead of the pickled English model. The package's module functions are not
  patched. See ``docs/ifeval-task.md`` for how the counts can differ from upstream's;
* makes results reproducible: a checker whose ``build_description`` falls back to the global ``random``
  module (two prompts of the shipped data give a non-letter ``letter`` to ``keywords:letter_frequency``,
  which upstream replaces by a random letter at every evaluation) is built under a fixed seed derived from
  its id and kwargs (the global random state is saved and restored); and ``langdetect``'s detector is seeded
  (``DetectorFactory.seed = 0``, its documented switch for deterministic results) unless the process already
  set a seed;
* counts a checker that raises on a response as *not followed* (nothing is logged per sample). The
  package's language checkers still log through ``logging.error`` themselves when ``langdetect`` cannot
  detect a language (and then count the instruction as followed, as upstream does).

Importing this module imports ``eval_framework.tasks`` (≈0.7 s, pandas included); the reward imports it
lazily, on its first call.
"""

from __future__ import annotations

import functools
import inspect
import json
import random
import threading
from collections.abc import Mapping, Sequence
from typing import Any

import langdetect
import nltk
from eval_framework.tasks.ifeval import instructions
from eval_framework.tasks.ifeval.instructions_registry import INSTRUCTION_DICT
from nltk.tokenize.punkt import PunktParameters, PunktSentenceTokenizer

__all__ = [
    "ABBREVIATIONS",
    "CHECKER_CLASSES",
    "OfflineCapitalWordFrequencyChecker",
    "OfflineNumberOfSentences",
    "build_checker",
    "check_instructions",
    "count_sentences",
    "response_variants",
    "word_tokenize",
]

# Lower-case, without the final period, as punkt stores them. Titles and Latin abbreviations that are
# (almost) never sentence-final; "etc" is left out on purpose (it often ends a sentence).
ABBREVIATIONS = frozenset(
    {
        "mr",
        "mrs",
        "ms",
        "dr",
        "prof",
        "st",
        "jr",
        "sr",
        "vs",
        "e.g",
        "i.e",
        "u.s",
        "u.k",
        "a.m",
        "p.m",
        "inc",
        "ltd",
    }
)

if langdetect.DetectorFactory.seed is None:  # langdetect is random per call unless seeded
    langdetect.DetectorFactory.seed = 0


@functools.cache
def _sentence_tokenizer() -> PunktSentenceTokenizer:
    params = PunktParameters()
    params.abbrev_types = set(ABBREVIATIONS)
    return PunktSentenceTokenizer(params)


def count_sentences(text: str) -> int:
    """Number of sentences (untrained punkt plus :data:`ABBREVIATIONS`; no nltk data needed)."""
    return len(_sentence_tokenizer().tokenize(text))


def word_tokenize(text: str) -> list[str]:
    """``nltk.word_tokenize`` with the offline sentence splitter in place of the trained punkt model.

    Same structure as nltk's function: split into sentences, then the Treebank-style word tokenizer on each
    sentence (``preserve_line=True`` skips nltk's own punkt-based sentence split).
    """
    return [
        tok
        for sent in _sentence_tokenizer().tokenize(text)
        for tok in nltk.word_tokenize(sent, preserve_line=True)
    ]


def _compare(count: int, relation: str, threshold: int) -> bool:
    """The package's two comparison relations: ``less than`` is ``<``, ``at least`` is ``>=``."""
    return count < threshold if relation == "less than" else count >= threshold


class OfflineNumberOfSentences(instructions.NumberOfSentences):
    """``length_constraints:number_sentences`` counting sentences with :func:`count_sentences`."""

    def check_following(self, value: str) -> bool:
        args = self.get_instruction_args()
        return _compare(count_sentences(value), args["relation"], args["num_sentences"])


class OfflineCapitalWordFrequencyChecker(instructions.CapitalWordFrequencyChecker):
    """``change_case:capital_word_frequency`` tokenising words with :func:`word_tokenize`."""

    def check_following(self, value: str) -> bool:
        args = self.get_instruction_args()
        capital_words = sum(1 for word in word_tokenize(value) if word.isupper())
        return _compare(capital_words, args["capital_relation"], args["capital_frequency"])


_OFFLINE = {
    instructions.NumberOfSentences: OfflineNumberOfSentences,
    instructions.CapitalWordFrequencyChecker: OfflineCapitalWordFrequencyChecker,
}

CHECKER_CLASSES: dict[str, type[instructions.Instruction]] = {
    iid: _OFFLINE.get(cls, cls) for iid, cls in INSTRUCTION_DICT.items()
}
"""Instruction id -> checker class: the package's ``INSTRUCTION_DICT`` with the two offline subclasses."""

_BUILD_LOCK = threading.Lock()


def _kwargs_key(kwargs: Mapping[str, Any] | None) -> str:
    """Canonical JSON of the kwargs, ``None`` values dropped (the cache key, and the build seed)."""
    return json.dumps({k: v for k, v in (kwargs or {}).items() if v is not None}, sort_keys=True)


@functools.cache
def _takes_prompt(cls: type[instructions.Instruction]) -> bool:
    return "prompt" in inspect.signature(cls.build_description).parameters


@functools.lru_cache(maxsize=16384)
def _build(instruction_id: str, kwargs_key: str, prompt: str | None) -> instructions.Instruction:
    cls = CHECKER_CLASSES[instruction_id]
    kwargs = json.loads(kwargs_key)
    with _BUILD_LOCK:
        state = random.getstate()
        random.seed(f"grove-ifeval:{instruction_id}:{kwargs_key}")
        try:
            checker = cls(instruction_id)
            checker.build_description(**kwargs)
            args = checker.get_instruction_args()
            if args and "prompt" in args:
                checker.build_description(prompt=prompt)
        except Exception as e:
            raise ValueError(
                f"IFEval instruction {instruction_id!r}: cannot build its checker from kwargs "
                f"{kwargs}: {type(e).__name__}: {e}"
            ) from e
        finally:
            random.setstate(state)
    return checker


def build_checker(
    instruction_id: str, kwargs: Mapping[str, Any] | None = None, prompt: str | None = None
) -> instructions.Instruction:
    """The built checker of one instruction (cached; ``None`` kwargs values are dropped, as upstream's loaders do).

    ``prompt`` is only used (and only part of the cache key) for a checker whose ``build_description``
    takes a ``prompt`` argument. Raises ``ValueError`` for an unknown id or kwargs the checker rejects.
    """
    if instruction_id not in CHECKER_CLASSES:
        raise ValueError(
            f"unknown IFEval instruction id {instruction_id!r}; known: {', '.join(CHECKER_CLASSES)}"
        )
    cls = CHECKER_CLASSES[instruction_id]
    return _build(instruction_id, _kwargs_key(kwargs), prompt if _takes_prompt(cls) else None)


def response_variants(response: str, *, loose: bool) -> list[str]:
    """The responses a checker is tried on: the response itself (strict), or upstream's eight loose variants.

    Loose, in the order of the package's ``evaluation.test_instruction_following_loose``: the response;
    without ``*``; without its first line; without its last line; without both; and the last three with
    ``*`` removed (the line-stripped ones also ``.strip()``-ed).
    """
    if not loose:
        return [response]
    lines = response.split("\n")
    first = "\n".join(lines[1:]).strip()
    last = "\n".join(lines[:-1]).strip()
    both = "\n".join(lines[1:-1]).strip()
    return [
        response,
        response.replace("*", ""),
        first,
        last,
        both,
        first.replace("*", ""),
        last.replace("*", ""),
        both.replace("*", ""),
    ]


def _follows(checker: instructions.Instruction, response: str) -> bool:
    try:
        return bool(checker.check_following(response))
    except Exception:  # a checker crashing on a response counts as not followed
        return False


def check_instructions(
    instruction_ids: Sequence[str],
    kwargs: Sequence[Mapping[str, Any] | None],
    prompt: str | None,
    response: str,
    *,
    loose: bool = False,
) -> list[bool]:
    """Whether ``response`` follows each instruction (IFEval strict, or loose with ``loose=True``).

    A variant that is empty after ``strip()`` fails (so an empty response fails every instruction).
    """
    if len(kwargs) != len(instruction_ids):
        raise ValueError(f"{len(instruction_ids)} instruction ids but {len(kwargs)} kwargs entries")
    variants = [r for r in response_variants(response, loose=loose) if r.strip()]
    checkers = [build_checker(iid, kw, prompt) for iid, kw in zip(instruction_ids, kwargs, strict=True)]
    return [any(_follows(checker, r) for r in variants) for checker in checkers]
