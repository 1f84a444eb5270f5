"""Action parsers: from the model's text to one environment command, registered in ``ACTION_PARSERS``.

A parser is ``fn(text, observation, params) -> ParsedAction``. The agent rollout steps the environment with
``parsed.action`` only when ``parsed.valid``; an invalid answer leaves the state unchanged and is charged the
rollout's invalid-action penalty (verl-agent's ``apply_invalid_action_penalty``, GiGPO: "Group-in-Group
Policy Optimization for LLM Agent Training").

* ``tag``: the content of the last ``<action>...</action>`` (verl-agent's ``projection_f`` for ALFWorld asks
  for ``<think>`` then ``<action>``), checked against the admissible actions when the environment lists them;
* ``admissible``: the admissible action closest to the answer (number, exact, or ``difflib`` fuzzy match);
* ``raw``: the first non-empty line of the text, as is;
* ``first_mention``: the admissible action named first anywhere in the text;
* ``full_text``: the whole text, for environments that parse replies themselves (``kb_routing``).

Matching against admissible actions is done on a normalised form: lower case, whitespace collapsed, and
surrounding quotes, backticks, brackets and a trailing period removed (so ``"[Go North]."`` matches
``go north``). A bare number ``k`` (``3``, ``3.``, ``(3)``, ``[3]``) picks the ``k``-th listed action, counting
from 1, which is how the rollout numbers them in the prompt; ``"3. go north"`` (a copied list line) is read
as its text.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field, field_validator

from grove.envs.base import Observation, Transition
from grove.registry import ACTION_PARSERS, NoParams

__all__ = [
    "AdmissibleParams",
    "ParsedAction",
    "TagParams",
    "admissible_action",
    "normalize_action",
    "raw_action",
    "tag_action",
    "unknown_action_step",
]


@dataclass(frozen=True)
class ParsedAction:
    """A parser's verdict: the command to send (``None`` when invalid), whether it is valid, and why not."""

    action: str | None
    valid: bool
    reason: str = ""


def _check_tag_name(v: str) -> str:
    if not re.fullmatch(r"[A-Za-z_][\w.:-]*", v):
        raise ValueError(f"tag {v!r} must be a tag name such as 'action' (no angle brackets)")
    return v


class TagParams(BaseModel):
    """Parameters of the ``tag`` action parser."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tag: str = Field("action", description="Tag holding the action: the last <tag>...</tag> of the answer.")
    require_think: bool = Field(
        False,
        description="Require a <think>...</think> block before the action tag (verl-agent's ALFWorld format).",
    )
    must_be_admissible: bool = Field(
        True,
        description="When the observation lists admissible actions, the tag content must be one of them "
        "(compared case- and whitespace-insensitively; the admissible spelling is returned).",
    )
    allow_number: bool = Field(
        True, description="A bare number k in the tag selects the k-th admissible action (1-based)."
    )

    @field_validator("tag")
    @classmethod
    def _check_tag(cls, v: str) -> str:
        return _check_tag_name(v)


class AdmissibleParams(BaseModel):
    """Parameters of the ``admissible`` action parser."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tag: str = Field(
        "action", description="Tag read when present (last <tag>...</tag>); else the first non-empty line."
    )
    cutoff: float = Field(
        0.8, ge=0.0, le=1.0, description="Minimum difflib similarity ratio for a fuzzy match (0..1)."
    )
    allow_number: bool = Field(
        True, description="A bare number k selects the k-th admissible action (1-based)."
    )

    @field_validator("tag")
    @classmethod
    def _check_tag(cls, v: str) -> str:
        return _check_tag_name(v)


_NUMBER_RE = re.compile(r"[\[(]?\s*(\d+)\s*[\]).:]?")
_NUMBERED_LINE_RE = re.compile(r"\d+\s*[.):]\s+(.+)", re.DOTALL)
_STRIP_CHARS = " \t\n\"'`[]()."


def unknown_action_step(
    action: str, actions: Sequence[str], truncated: bool, observe: Callable[[str], Observation], **info: bool
) -> Transition:
    """The step of a command the environment does not know: a no-op with reward 0 (it counts towards the step
    limit, so it ends the episode when ``truncated``), the observation led by the list of actions, and
    ``info["invalid_action"] = True`` (plus ``info``'s other entries). The action parsers normally prevent it."""
    note = f"Unknown action {action!r}; the actions are: {', '.join(actions)}."
    details = {"won": False, **info, "truncated": truncated, "invalid_action": True}
    return Transition(observe(note), 0.0, truncated, details)


def normalize_action(text: str) -> str:
    """Lower case, whitespace collapsed, surrounding quotes/backticks/brackets and periods removed."""
    return " ".join(text.lower().split()).strip(_STRIP_CHARS)


def _last_tag(text: str, tag: str) -> tuple[str, int] | None:
    """Content and start offset of the last ``<tag>...</tag>``, or of a last unclosed ``<tag>`` running to the
    end of the text (generation stopped at the closing tag); ``None`` when there is no opening tag."""
    t = re.escape(tag)
    closed = list(re.finditer(rf"<{t}>((?:(?!<{t}>).)*?)</{t}>", text, re.DOTALL | re.IGNORECASE))
    opens = list(re.finditer(rf"<{t}>", text, re.IGNORECASE))
    if not opens:
        return None
    last_open = opens[-1]
    if closed and closed[-1].start() == last_open.start():
        return closed[-1].group(1).strip(), last_open.start()
    return text[last_open.end() :].strip(), last_open.start()


def _first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def _number(content: str) -> int | None:
    m = _NUMBER_RE.fullmatch(content.strip())
    return int(m.group(1)) if m else None


def _match_admissible(content: str, admissible: tuple[str, ...], allow_number: bool) -> ParsedAction | None:
    """Number or exact normalised match of ``content`` among ``admissible``; ``None`` when neither applies."""
    if allow_number and (k := _number(content)) is not None:
        if 1 <= k <= len(admissible):
            return ParsedAction(admissible[k - 1], True)
        return ParsedAction(None, False, f"action number {k} is not in 1..{len(admissible)}")
    by_norm = {normalize_action(a): a for a in admissible}
    key = normalize_action(content)
    if key in by_norm:
        return ParsedAction(by_norm[key], True)
    m = _NUMBERED_LINE_RE.fullmatch(content.strip())
    if m and normalize_action(m.group(1)) in by_norm:
        return ParsedAction(by_norm[normalize_action(m.group(1))], True)
    return None


def _preview(text: str, limit: int = 60) -> str:
    return repr(text if len(text) <= limit else text[:limit] + "…")


@ACTION_PARSERS.register(
    "tag", params=TagParams, summary="The last <action>...</action>, checked against the admissible actions"
)
def tag_action(text: str, observation: Observation, params: TagParams) -> ParsedAction:
    """The content of the last ``<action>...</action>`` (optionally after a ``<think>`` block).

    When the observation lists admissible actions and ``must_be_admissible``, the content must be one of them
    (normalised comparison) or, with ``allow_number``, a number ``k`` picking the ``k``-th; the admissible
    spelling is returned. Without a list any non-empty content is valid.
    """
    found = _last_tag(text, params.tag)
    if found is None:
        return ParsedAction(None, False, f"no <{params.tag}>...</{params.tag}> in the answer")
    content, start = found
    if params.require_think and not re.search(r"<think>.*?</think>", text[:start], re.DOTALL | re.IGNORECASE):
        return ParsedAction(None, False, f"no <think>...</think> before <{params.tag}>")
    if not content:
        return ParsedAction(None, False, f"empty <{params.tag}>")
    admissible = observation.admissible_actions
    if not admissible or not params.must_be_admissible:
        return ParsedAction(content, True)
    matched = _match_admissible(content, admissible, params.allow_number)
    return matched or ParsedAction(None, False, f"{_preview(content)} is not an admissible action")


@ACTION_PARSERS.register(
    "admissible",
    params=AdmissibleParams,
    summary="The closest admissible action: number, exact or difflib fuzzy match (tag content or first line)",
)
def admissible_action(text: str, observation: Observation, params: AdmissibleParams) -> ParsedAction:
    """The admissible action closest to the answer.

    Reads the last ``<tag>...</tag>`` when present, else the first non-empty line; accepts a number ``k``
    (``allow_number``), an exact normalised match, or ``difflib.get_close_matches``'s best match with a
    similarity ratio of at least ``cutoff``. Invalid when nothing matches or the observation has no list.
    """
    admissible = observation.admissible_actions
    if not admissible:
        return ParsedAction(None, False, "the observation lists no admissible actions")
    found = _last_tag(text, params.tag)
    content = found[0] if found is not None else _first_line(text)
    if not content:
        return ParsedAction(None, False, "empty answer")
    matched = _match_admissible(content, admissible, params.allow_number)
    if matched is not None:
        return matched
    by_norm = {normalize_action(a): a for a in admissible}
    close = difflib.get_close_matches(normalize_action(content), list(by_norm), n=1, cutoff=params.cutoff)
    if close:
        return ParsedAction(by_norm[close[0]], True)
    return ParsedAction(
        None, False, f"{_preview(content)} matches no admissible action (cutoff {params.cutoff})"
    )


@ACTION_PARSERS.register("raw", params=NoParams, summary="The first non-empty line of the answer, as is")
def raw_action(text: str, observation: Observation, params: BaseModel) -> ParsedAction:
    """The first non-empty line of the answer, stripped; valid when non-empty (the environment judges it)."""
    line = _first_line(text)
    return ParsedAction(line, True) if line else ParsedAction(None, False, "empty answer")


class MentionParams(BaseModel):
    """Parameters of the ``first_mention`` action parser."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    allow_number: bool = Field(True, description="A standalone number k counts as a mention of the k-th listed action.")


def _mentions(text: str, admissible: tuple[str, ...], allow_number: bool) -> list[tuple[int, str]]:
    """``(position, action)`` of every admissible action (whole words, case-insensitive) and listed number."""
    found = []
    for action in admissible:
        for m in re.finditer(rf"(?<![\w-]){re.escape(action)}(?![\w-])", text, flags=re.IGNORECASE):
            found.append((m.start(), action))
    if allow_number:
        for m in re.finditer(r"(?<![\w.])(\d{1,3})(?![\w])", text):
            k = int(m.group(1))
            if 1 <= k <= len(admissible):
                found.append((m.start(), admissible[k - 1]))
    return sorted(found)


@ACTION_PARSERS.register(
    "first_mention",
    params=MentionParams,
    summary="The admissible action (or its listed number) mentioned first anywhere in the answer",
)
def first_mention_action(text: str, observation: Observation, params: MentionParams) -> ParsedAction:
    """The earliest admissible action named in the text (whole words) or picked by its listed number.

    The most lenient parser, for small models that answer in prose ("I would go right"); invalid when the
    text names no admissible action or there are none. Inside an ``<action>`` tag the tag wins.
    """
    admissible = observation.admissible_actions or ()
    if not admissible:
        return ParsedAction(None, False, "the environment lists no admissible actions")
    tagged = _last_tag(text, "action")
    scope = tagged[0] if tagged is not None else text
    found = _mentions(scope, admissible, params.allow_number)
    if not found:
        return ParsedAction(None, False, f"no admissible action named in {_preview(text)!r}")
    return ParsedAction(found[0][1], True)


@ACTION_PARSERS.register(
    "full_text", params=NoParams, summary="The whole answer, stripped: the environment reads and judges it"
)
def full_text_action(text: str, observation: Observation, params: BaseModel) -> ParsedAction:
    """The whole answer (stripped), for environments that parse the reply themselves (``kb_routing`` reads its
    ``<query kb=…>`` / ``<answer>`` tags, scores the format and rejects malformed replies with feedback,
    marking them ``info["invalid_action"]``). Only an empty answer is invalid here."""
    stripped = text.strip()
    return ParsedAction(stripped, True) if stripped else ParsedAction(None, False, "empty answer")
