"""Exact whole-word lookup of entity keys (country, city, element, disease names) inside a free-text query.

Rule (used by the ``tables`` and ``medical_hpo`` knowledge bases before BM25):

* Names are compared as token sequences: diacritics folded, lower-cased, split into ``\\w+`` runs, so
  ``"capital of FRANCE?"`` contains the key ``France`` and ``"Côte d'Ivoire"`` is ``cote d ivoire``. A key
  matches only as whole tokens (``Niger`` is not found in ``Nigeria``).
* *Symbols* (chemical element symbols, one or two letters) are matched case-sensitively against the query's
  own tokens, so ``"Fe"`` finds iron but ``"fe"`` does not. Symbols whose lower-case form is an English
  stopword (``In``, ``As``, ``At``, ``Be``, ``He``, ``No``, ...) would fire on every capitalised sentence
  start, so they do not match as the first token of the query or of a sentence (after ``.``, ``?``, ``!``,
  ``:``); ``I`` (iodine) is never a symbol key because the pronoun is always capitalised.
* Longer keys win: matches are taken longest first (tokens, then characters, then leftmost) and a match that
  overlaps an already taken one is dropped, so ``"population of Mexico City"`` finds the city ``Mexico
  City`` and not the country ``Mexico``, and ``"Papua New Guinea"`` does not also find ``Guinea``. Every
  document carrying an accepted key is returned (two cities named ``Hyderabad`` are both found).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from grove.knowledge.text_match import fold_diacritics

__all__ = ["KeyHit", "KeyMatcher", "key_tokens"]

_TOKEN_RE = re.compile(r"\w+")
_SENTENCE_END = set(".?!:;")


def key_tokens(text: str) -> tuple[str, ...]:
    """``text`` as a tuple of folded, lower-cased ``\\w+`` tokens (the form keys are compared in)."""
    return tuple(_TOKEN_RE.findall(fold_diacritics(text).lower()))


@dataclass(frozen=True)
class KeyHit:
    """A document found by key: its position, the key's length in tokens and characters, where it matched."""

    doc: int
    tokens: int
    chars: int
    start: int


class KeyMatcher:
    """Finds the documents whose key names or symbols occur in a query (rule in the module docstring)."""

    def __init__(
        self,
        names: Iterable[tuple[str, int]],
        symbols: Iterable[tuple[str, int]] = (),
        ambiguous_symbols: Iterable[str] = (),
    ) -> None:
        """``names``: ``(key, document position)`` pairs matched case-insensitively; ``symbols``: pairs
        matched case-sensitively; ``ambiguous_symbols``: symbols (e.g. ``"In"``) not matched at a sentence
        start."""
        self._names: dict[tuple[str, ...], list[int]] = {}
        for key, doc in names:
            toks = key_tokens(key)
            if toks:
                docs = self._names.setdefault(toks, [])
                if doc not in docs:
                    docs.append(doc)
        self._symbols: dict[str, list[int]] = {}
        for sym, doc in symbols:
            if sym == "I":
                continue
            docs = self._symbols.setdefault(sym, [])
            if doc not in docs:
                docs.append(doc)
        self._ambiguous = frozenset(ambiguous_symbols)
        self._max_len = max((len(k) for k in self._names), default=0)

    def find(self, query: str) -> list[KeyHit]:
        """The documents with a key in ``query``: longest keys first, then leftmost; no overlapping keys."""
        folded = fold_diacritics(query)
        matches = [(m.group(), m.start(), m.end()) for m in _TOKEN_RE.finditer(folded)]
        if not matches:
            return []
        lowered = tuple(t.lower() for t, _, _ in matches)
        candidates: list[tuple[int, int, int, int, list[int]]] = []  # (-tokens, -chars, start, end, docs)
        for n in range(min(self._max_len, len(lowered)), 0, -1):
            for i in range(len(lowered) - n + 1):
                docs = self._names.get(lowered[i : i + n])
                if docs:
                    chars = matches[i + n - 1][2] - matches[i][1]
                    candidates.append((-n, -chars, i, i + n, docs))
        for i, (tok, start, _) in enumerate(matches):
            docs = self._symbols.get(tok)
            if not docs:
                continue
            if tok in self._ambiguous and _at_sentence_start(folded, start):
                continue
            candidates.append((-1, -len(tok), i, i + 1, docs))
        candidates.sort(key=lambda c: (c[0], c[1], c[2]))
        taken: list[tuple[int, int]] = []
        hits: list[KeyHit] = []
        seen: set[int] = set()
        for neg_n, neg_chars, start, end, docs in candidates:
            if any(start < e and s < end for s, e in taken if (s, e) != (start, end)):
                continue
            taken.append((start, end))
            for d in docs:
                if d not in seen:
                    seen.add(d)
                    hits.append(KeyHit(d, -neg_n, -neg_chars, start))
        return hits


def _at_sentence_start(text: str, start: int) -> bool:
    before = text[:start].rstrip()
    return not before or before[-1] in _SENTENCE_END
