"""Built-in reward functions, registered in :data:`grove.registry.REWARD_FUNCTIONS`.

Registry convention
-------------------
A registered reward is a function ``fn(prompts, completions, *, params, **columns)`` where

* ``prompts`` / ``completions`` are aligned lists (one entry per sample; a prompt may be a string
  or a list of chat messages, completions are strings),
* ``params`` is the validated instance of the pydantic model given to ``register(..., params=...)``,
* ``columns`` are dataset columns as lists aligned with ``completions`` (e.g. ``answer=[...]``);
  unknown columns are ignored,

and it returns one ``float`` per sample, or ``None`` where the reward does not apply to that sample.
:func:`grove.rewards.scoring.bind_reward` fixes ``params`` and returns a plain TRL-style callable
``f(prompts, completions, **columns)``.
"""

from __future__ import annotations

import functools
import re
import threading
from collections.abc import Sequence
from decimal import Decimal, InvalidOperation
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from grove.registry import REWARD_FUNCTIONS
from grove.rewards.extract import AnswerTagParams, ExtractMode, extract_answer
from grove.rewards.values import dataset_column

# --------------------------------------------------------------------------------------------
# answer_match
# --------------------------------------------------------------------------------------------


class AnswerMatchParams(AnswerTagParams):
    """Parameters of the ``answer_match`` reward."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    extract: ExtractMode = Field(
        "answer_tag",
        description="How to extract the answer from the completion: 'answer_tag' (last <tag>...</tag>), "
        "'last_number', 'boxed' (last \\boxed{...}) or 'full' (the whole completion).",
    )
    use_math_verify: bool = Field(
        True,
        description="Compare with math_verify.parse/verify (symbolic equivalence) when the fast exact "
        "comparison does not decide; if false, only exact (numeric or string) equality counts.",
    )


_PLAIN_NUMBER_RE = re.compile(r"[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d*)?|[-+]?\.\d+")


def _as_decimal(text: str) -> Decimal | None:
    """``Decimal`` value of a plain number (``"81"``, ``"-1,234.50"``, ``"$81$"``), else ``None``."""
    s = text.strip().strip("$").strip()
    if not _PLAIN_NUMBER_RE.fullmatch(s):
        return None
    try:
        return Decimal(s.replace(",", ""))
    except InvalidOperation:  # pragma: no cover - the regex only admits valid decimals
        return None


def _normalize(text: str) -> str:
    return " ".join(text.split())


def _mv_parse(text: str, in_main_thread: bool) -> list[Any]:
    """``math_verify.parse``; retried inside ``$...$`` so bare LaTeX (``\\frac12``) is understood."""
    from math_verify import parse

    timeout: dict[str, Any] = {} if in_main_thread else {"parsing_timeout": None}
    parsed = parse(text, **timeout)
    if not parsed and "$" not in text:
        parsed = parse(f"${text}$", **timeout)
    return parsed


def answers_equal(
    gold: str, predicted: str, *, use_math_verify: bool = True, gold_cache: dict[str, Any] | None = None
) -> bool:
    """Whether ``predicted`` is the same answer as ``gold``.

    1. If both are plain numbers (``81``, ``81.0``, ``-1,234.5``) they are compared exactly as decimals
       and the result is final (fast path; no sympy).
    2. Otherwise whitespace-normalised string equality counts as a match.
    3. Otherwise, if ``use_math_verify``, ``math_verify.verify(parse(gold), parse(predicted))``.

    math-verify enforces timeouts with ``signal.alarm``, which only works in the main thread; outside
    the main thread its timeouts are disabled (``parsing_timeout=None``, ``timeout_seconds=None``),
    so a pathological expression could then take long. ``gold_cache`` (gold string -> parsed gold)
    avoids re-parsing the same gold answer for every completion of a group.
    """
    g_num, p_num = _as_decimal(gold), _as_decimal(predicted)
    if g_num is not None and p_num is not None:
        return g_num == p_num
    if _normalize(gold) == _normalize(predicted):
        return True
    if not use_math_verify:
        return False
    from math_verify import verify

    in_main = threading.current_thread() is threading.main_thread()
    if gold_cache is not None and gold in gold_cache:
        gold_parsed = gold_cache[gold]
    else:
        gold_parsed = _mv_parse(gold, in_main)
        if gold_cache is not None:
            gold_cache[gold] = gold_parsed
    if not gold_parsed:
        return False
    pred_parsed = _mv_parse(predicted, in_main)
    if not pred_parsed:
        return False
    return bool(verify(gold_parsed, pred_parsed, **({} if in_main else {"timeout_seconds": None})))


@REWARD_FUNCTIONS.register(
    "answer_match",
    params=AnswerMatchParams,
    summary="1.0 if the extracted answer equals the gold 'answer' column (math-verify), else 0.0",
)
def answer_match(
    prompts: Sequence[Any], completions: Sequence[str], *, params: AnswerMatchParams, **columns: Any
) -> list[float | None]:
    """1.0 if the answer extracted from the completion equals the gold ``answer`` column, else 0.0.

    No extractable answer gives 0.0; a gold answer of ``None`` gives ``None`` (reward does not apply).
    """
    golds = dataset_column(columns, "answer", len(completions), reward="answer_match")
    cache: dict[str, list[Any]] = {}
    out: list[float | None] = []
    for completion, gold in zip(completions, golds, strict=True):
        if gold is None:
            out.append(None)
            continue
        predicted = extract_answer(completion, params.extract, params.tag)
        if predicted is None:
            out.append(0.0)
            continue
        ok = answers_equal(str(gold), predicted, use_math_verify=params.use_math_verify, gold_cache=cache)
        out.append(1.0 if ok else 0.0)
    return out


# --------------------------------------------------------------------------------------------
# answer_format
# --------------------------------------------------------------------------------------------

DEFAULT_FORMAT_PATTERN = r"(?:(?!</?answer>).)*<answer>(?:(?!</?answer>).)+</answer>(?:(?!</?answer>).)*"


class AnswerFormatParams(BaseModel):
    """Parameters of the ``answer_format`` reward."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    pattern: str = Field(
        DEFAULT_FORMAT_PATTERN,
        description="Python regex (compiled with re.DOTALL). Default: exactly one non-empty "
        "<answer>...</answer> block anywhere in the completion.",
    )
    full_match: bool = Field(
        True,
        description="Require the pattern to match the whole completion (re.fullmatch) instead of re.search.",
    )

    @field_validator("pattern")
    @classmethod
    def _check_pattern(cls, v: str) -> str:
        try:
            re.compile(v, re.DOTALL)
        except re.error as e:
            raise ValueError(f"invalid regex {v!r}: {e}") from None
        return v


@functools.lru_cache(maxsize=64)
def _compiled(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern, re.DOTALL)


@REWARD_FUNCTIONS.register(
    "answer_format",
    params=AnswerFormatParams,
    summary="1.0 if the completion matches a format regex (default: one <answer>...</answer> block)",
)
def answer_format(
    prompts: Sequence[Any], completions: Sequence[str], *, params: AnswerFormatParams, **columns: Any
) -> list[float | None]:
    """1.0 if the completion matches ``params.pattern`` (full match or search), else 0.0."""
    rx = _compiled(params.pattern)
    match = rx.fullmatch if params.full_match else rx.search
    return [1.0 if match(c) else 0.0 for c in completions]


# --------------------------------------------------------------------------------------------
# length_penalty
# --------------------------------------------------------------------------------------------


class LengthPenaltyParams(BaseModel):
    """Parameters of the ``length_penalty`` reward (character based, tokenizer free)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    target_length: int = Field(
        1000, ge=0, description="Completions up to this many characters get no penalty."
    )
    penalty_per_char: float = Field(
        0.001, ge=0, description="Penalty per character beyond target_length (linear ramp)."
    )
    max_penalty: float | None = Field(1.0, gt=0, description="Cap on the penalty magnitude; null for no cap.")


@REWARD_FUNCTIONS.register(
    "length_penalty",
    params=LengthPenaltyParams,
    paper="DAPO (arXiv:2503.14476), overlong reward shaping",
    summary="-min(max_penalty, penalty_per_char * max(0, len(completion) - target_length)); always <= 0",
)
def length_penalty(
    prompts: Sequence[Any], completions: Sequence[str], *, params: LengthPenaltyParams, **columns: Any
) -> list[float | None]:
    """Linear penalty for completions longer than ``target_length`` characters (≤ 0).

    ``-min(max_penalty, penalty_per_char * max(0, len(c) - target_length))``. DAPO's soft overlong
    punishment (in characters) is ``target_length = L_max - L_cache``, ``penalty_per_char = 1 / L_cache``,
    ``max_penalty = 1``.
    """
    out: list[float | None] = []
    for c in completions:
        excess = max(0, len(c) - params.target_length)
        penalty = params.penalty_per_char * excess
        if params.max_penalty is not None:
            penalty = min(penalty, params.max_penalty)
        out.append(-penalty if penalty > 0 else 0.0)
    return out


# --------------------------------------------------------------------------------------------
# length_limit
# --------------------------------------------------------------------------------------------


class LengthLimitParams(BaseModel):
    """Parameters of the ``length_limit`` reward (a constraint in the policy's tokens)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_tokens: int = Field(..., ge=1, description="A completion of at most this many tokens (EOS included) scores 1.")


@REWARD_FUNCTIONS.register(
    "length_limit",
    params=LengthLimitParams,
    paper="GDPO (length constraint reward)",
    summary="1.0 if the completion has at most max_tokens tokens of the policy's tokenizer, else 0.0",
)
def length_limit(
    prompts: Sequence[Any], completions: Sequence[str], *, params: LengthLimitParams,
    completion_ids: Sequence[Sequence[int]] | None = None, **columns: Any,
) -> list[float | None]:
    """A binary length constraint counted in the policy's tokens: the ``completion_ids`` column grove passes every
    reward (the generated token ids, EOS included when generated)."""
    if completion_ids is None:
        raise ValueError(
            "length_limit counts the policy's tokens and needs the completion_ids column (grove passes it with every "
            "completion; pass completion_ids=[[token ids], ...] when calling it yourself)"
        )
    return [1.0 if len(ids) <= params.max_tokens else 0.0 for ids in completion_ids]
