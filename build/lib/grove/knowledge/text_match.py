"""Answer normalisation and matching: exact match, token F1 / recall and passage containment.

The conventions follow the SQuAD v1.1 evaluation script (Rajpurkar et al., 2016, "SQuAD: 100,000+ Questions
for Machine Comprehension of Text", ``normalize_answer`` / ``f1_score``): lower-case, drop punctuation and the
articles *a*, *an*, *the*, collapse whitespace, and compare bags of whitespace tokens. grove departs from it
in four documented ways, all aimed at short factual answers (capitals, populations, symbols):

* diacritics are folded (Unicode NFKD, combining marks dropped), so ``"Bogotá"`` matches ``"Bogota"``;
* thousands separators inside numbers are dropped (``"66,987,244"`` -> ``"66987244"``: a comma or a
  no-break/thin space between a digit and exactly three digits; an apostrophe separator vanishes with the
  apostrophes) and a decimal point between digits is kept (``"55.845"`` stays ``"55.845"``, where SQuAD would
  turn it into ``"55845"``);
* apostrophes are deleted (``"St. John's"`` -> ``"st johns"``, as in SQuAD) but every other punctuation
  character becomes a space, so ``"Guinea-Bissau"`` and ``"Guinea Bissau"`` normalise alike (SQuAD would glue
  the hyphenated form into one token);
* every function takes several gold answers and returns the best score over them (as SQuAD does with its
  several human answers); an empty gold list scores 0.
"""

from __future__ import annotations

import re
import string
import unicodedata
from collections import Counter
from collections.abc import Iterable, Sequence

__all__ = [
    "contains_answer",
    "exact_match",
    "normalize_answer",
    "normalize_tokens",
    "token_f1",
    "token_recall",
]

_THOUSANDS_RE = re.compile(r"(?<=\d)[,\u00a0\u202f\u2009](?=\d{3}(?!\d))")
_DECIMAL_RE = re.compile(r"(?<=\d)\.(?=\d)")
_DECIMAL_MARK = "\x00"
_APOSTROPHES = "'\u2018\u2019\u02bc`"
_ARTICLES_RE = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = set(string.punctuation) | {
    "\u2013",
    "\u2014",
    "\u00b7",
    "\u2026",
    "\u00ab",
    "\u00bb",
    "\u201c",
    "\u201d",
}
_TRANSLATE = str.maketrans({**{ch: " " for ch in _PUNCTUATION}, **{ch: None for ch in _APOSTROPHES}})


def fold_diacritics(text: str) -> str:
    """``text`` with accents removed: NFKD decomposition, combining marks dropped (``"Ångström"`` ->
    ``"Angstrom"``)."""
    if text.isascii():
        return text
    decomposed = unicodedata.normalize("NFKD", text)
    return "".join(ch for ch in decomposed if not unicodedata.combining(ch))


def normalize_answer(s: str) -> str:
    """SQuAD-style normalisation (see the module docstring): fold diacritics, drop thousands separators,
    lower-case, delete apostrophes, turn other punctuation into spaces (keeping a decimal point between
    digits), drop the articles a/an/the and collapse whitespace. ``"The capital is Paris."`` -> ``"capital is
    paris"``."""
    text = fold_diacritics(str(s))
    text = _THOUSANDS_RE.sub("", text)
    text = _DECIMAL_RE.sub(_DECIMAL_MARK, text).lower()
    text = text.translate(_TRANSLATE)
    text = text.replace(_DECIMAL_MARK, ".")
    text = _ARTICLES_RE.sub(" ", text)
    return " ".join(text.split())


def normalize_tokens(s: str) -> list[str]:
    """The whitespace tokens of :func:`normalize_answer`."""
    return normalize_answer(s).split()


def _golds(golds: str | Iterable[str]) -> list[str]:
    return [golds] if isinstance(golds, str) else list(golds)


def exact_match(pred: str, golds: str | Sequence[str]) -> float:
    """1.0 when the normalised prediction equals some normalised gold answer, else 0.0."""
    p = normalize_answer(pred)
    return float(any(p == normalize_answer(g) for g in _golds(golds)))


def _f1(pred: list[str], gold: list[str]) -> float:
    if not pred or not gold:  # SQuAD: both empty counts as a match, one empty as a miss
        return float(pred == gold)
    common = sum((Counter(pred) & Counter(gold)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(pred), common / len(gold)
    return 2 * precision * recall / (precision + recall)


def token_f1(pred: str, golds: str | Sequence[str]) -> float:
    """Bag-of-tokens F1 between the normalised prediction and the best gold answer (SQuAD's ``f1_score``).
    ``token_f1("the capital is Paris", ["Paris"])`` = 0.5: tokens [capital, is, paris], precision 1/3, recall
    1."""
    p = normalize_tokens(pred)
    return max((_f1(p, normalize_tokens(g)) for g in _golds(golds)), default=0.0)


def token_recall(pred: str, golds: str | Sequence[str]) -> float:
    """Share of the gold answer's normalised tokens (as a multiset) present in the prediction, best gold
    answer. An empty normalised gold answer scores 1.0 only against an empty prediction."""
    p = Counter(normalize_tokens(pred))
    best = 0.0
    for g in _golds(golds):
        gold = normalize_tokens(g)
        if not gold:
            best = max(best, float(not p))
            continue
        best = max(best, sum((p & Counter(gold)).values()) / len(gold))
    return best


def contains_answer(passage_text: str, golds: str | Sequence[str]) -> bool:
    """True when some gold answer's normalised token sequence occurs contiguously in the normalised passage
    (whole tokens only: ``"Paris"`` is in ``"Capital: Paris."`` but not in ``"Parisian"``; gold answers that
    normalise to nothing never match)."""
    text = normalize_tokens(passage_text)
    if not text:
        return False
    for g in _golds(golds):
        gold = normalize_tokens(g)
        n = len(gold)
        if n == 0 or n > len(text):
            continue
        first = gold[0]
        for i in range(len(text) - n + 1):
            if text[i] == first and text[i : i + n] == gold:
                return True
    return False
