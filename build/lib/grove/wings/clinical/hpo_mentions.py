"""Finding HPO term mentions in free text: normalisation, a phrase index over term names and synonyms, the
cached lexicon, negation and candidate-name masking (used by the ``clinical_objectives`` reward).

Matching is a longest-first dictionary lookup over word n-grams (no per-term regexes): the reasoning is
folded to lower-case ASCII words and clause boundaries, and each position looks up the longest phrase of the
index starting there. A mention is negated when a cue ("no", "without", "absence of", ...) precedes it within
``window`` words in the same clause. Rules and failure modes: ``docs/clinical-task.md``.
"""

from __future__ import annotations

import functools
import json
import os
import re
import unicodedata
from collections.abc import Iterable, Sequence

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


def mask_names(toks: list[str], names: Sequence[str]) -> list[str]:
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
