"""Answer extraction: pull the final answer out of a model completion.

:func:`extract_answer` supports four modes:

``answer_tag``
    The content of the **last** complete ``<tag>...</tag>`` block (default tag ``answer``), stripped.
``last_number``
    The last number in the text: optional minus sign, thousands separators (``1,234``) and a decimal
    part (``-0.5``). Commas are removed from the result (``"1,234.5"`` -> ``"1234.5"``). A minus sign
    counts only when it is not preceded by a letter or digit, so ``"3-5"`` gives ``"5"``.
``boxed``
    The content of the last ``\\boxed{...}`` (or ``\\fbox{...}``), with nested braces balanced.
``full``
    The whole completion, stripped.

Every mode returns ``None`` when nothing (or only whitespace) can be extracted.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

ExtractMode = Literal["answer_tag", "last_number", "boxed", "full"]
EXTRACT_MODES: tuple[str, ...] = ("answer_tag", "last_number", "boxed", "full")

# A number: optional sign (not glued to a preceding word/digit), digits with optional thousands
# separators, optional decimal part. Also matches ".5".
_NUMBER_RE = re.compile(r"(?<![\w.])-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?!\d)|(?<![\w.])-?\.\d+")
_BOXED_RE = re.compile(r"\\(?:boxed|fbox)\s*\{")


class AnswerTagParams(BaseModel):
    """The ``tag`` of ``extract: answer_tag``, shared by the rewards that extract a tagged answer."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tag: str = Field("answer", description="Tag name for extract='answer_tag' (<answer>...</answer>).")

    @field_validator("tag")
    @classmethod
    def _check_tag(cls, v: str) -> str:
        if not re.fullmatch(r"[A-Za-z_][\w.:-]*", v):
            raise ValueError(f"tag {v!r} must be a tag name such as 'answer' (no angle brackets)")
        return v


def extract_answer(text: str, mode: ExtractMode = "answer_tag", tag: str = "answer") -> str | None:
    """Extract the final answer from ``text`` according to ``mode`` (see module docstring).

    Args:
        text: the completion.
        mode: one of ``"answer_tag"``, ``"last_number"``, ``"boxed"``, ``"full"``.
        tag: tag name used by ``"answer_tag"`` mode (``"answer"`` matches ``<answer>...</answer>``).

    Returns:
        The extracted answer string, or ``None`` if there is none.
    """
    if mode == "answer_tag":
        return _last_tag(text, tag)
    if mode == "last_number":
        return _last_number(text)
    if mode == "boxed":
        return _last_boxed(text)
    if mode == "full":
        return text.strip() or None
    raise ValueError(f"unknown extraction mode {mode!r}; expected one of {', '.join(EXTRACT_MODES)}")


def _last_tag(text: str, tag: str) -> str | None:
    t = re.escape(tag)
    matches = re.findall(rf"<{t}\s*>(.*?)</{t}\s*>", text, flags=re.DOTALL)
    if not matches:
        return None
    return matches[-1].strip() or None


def _last_number(text: str) -> str | None:
    matches = _NUMBER_RE.findall(text)
    if not matches:
        return None
    number = matches[-1].replace(",", "")
    if number.startswith("-."):
        number = "-0" + number[1:]
    elif number.startswith("."):
        number = "0" + number
    return number


def _last_boxed(text: str) -> str | None:
    starts = [m.end() for m in _BOXED_RE.finditer(text)]
    for start in reversed(starts):  # the last *complete* box wins
        depth = 1
        for i in range(start, len(text)):
            ch = text[i]
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
                if depth == 0:
                    return text[start:i].strip() or None
    return None
