"""BM25 over passage texts with ``bm25s`` (Lù, 2024, "BM25S: Orders of magnitude faster lexical search via
eager sparse scoring"), English stopwords and the PyStemmer (Snowball) English stemmer.

Tokenisation (documents and queries alike): fold diacritics, lower-case, take the word tokens of two or more
characters (bm25s's default splitter ``(?u)\\b\\w\\w+\\b``), drop bm25s's English stopword list (33 function
words: *a, an, and, are, as, at, be, ...*), stem with Snowball English. Scoring is bm25s's defaults:
Lucene's BM25 variant with ``k1 = 1.5``, ``b = 0.75``.

Ranking is computed here from the full score vector (``BM25.get_scores_from_ids``) rather than bm25s's
top-k selection, so that ties are broken the same way every time: by score descending, then by document
position. Only documents with a positive score are returned, so a query with no indexed term (empty,
stopwords only, unknown words) returns nothing.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path

import numpy as np

from grove.knowledge.text_match import fold_diacritics

__all__ = ["Bm25Index", "bm25_tokens"]

_WORD_RE = re.compile(r"(?u)\b\w\w+\b")


@lru_cache(maxsize=1)
def _stemmer_and_stopwords() -> tuple[object, frozenset[str]]:
    import Stemmer
    from bm25s.stopwords import STOPWORDS_EN

    return Stemmer.Stemmer("english"), frozenset(STOPWORDS_EN)


def bm25_tokens(text: str) -> list[str]:
    """The stemmed index terms of ``text`` (see the module docstring)."""
    stemmer, stopwords = _stemmer_and_stopwords()
    words = [w for w in _WORD_RE.findall(fold_diacritics(text).lower()) if w not in stopwords]
    return list(stemmer.stemWords(words)) if words else []


class Bm25Index:
    """A bm25s index over ``n`` documents, searched with deterministic tie-breaking."""

    def __init__(self, retriever: object) -> None:
        self._retriever = retriever
        self.num_docs = int(retriever.scores["num_docs"])  # type: ignore[attr-defined]

    @classmethod
    def build(cls, texts: Sequence[str]) -> Bm25Index:
        import bm25s

        retriever = bm25s.BM25()
        # an empty document would give bm25s an empty token list; a placeholder term that no query can
        # produce (queries are lower-cased) keeps the document positions aligned
        corpus = [bm25_tokens(t) or ["\x00EMPTY"] for t in texts]
        retriever.index(corpus, show_progress=False)
        return cls(retriever)

    def save(self, directory: Path) -> None:
        self._retriever.save(str(directory), show_progress=False)  # type: ignore[attr-defined]

    @classmethod
    def load(cls, directory: Path) -> Bm25Index:
        import bm25s

        return cls(bm25s.BM25.load(str(directory), show_progress=False, verbosity=0))

    def scores(self, query: str) -> np.ndarray:
        """BM25 score of every document for ``query`` (zeros when no query term is indexed)."""
        vocab = self._retriever.vocab_dict  # type: ignore[attr-defined]
        ids = [vocab[t] for t in bm25_tokens(query) if t in vocab]
        if not ids:
            return np.zeros(self.num_docs, dtype=np.float32)
        return np.asarray(self._retriever.get_scores_from_ids(ids), dtype=np.float32)  # type: ignore[attr-defined]

    def top(
        self,
        query: str,
        k: int,
        exclude: set[int] | frozenset[int] = frozenset(),
        scores: np.ndarray | None = None,
    ) -> list[tuple[int, float]]:
        """Up to ``k`` ``(document position, score)`` pairs with a positive score, best first, ties by
        position, skipping the positions in ``exclude``; ``scores`` may pass ``self.scores(query)`` already
        computed."""
        if k <= 0:
            return []
        if scores is None:
            scores = self.scores(query)
        positive = np.flatnonzero(scores > 0)
        if positive.size == 0:
            return []
        order = positive[np.lexsort((positive, -scores[positive]))]
        out: list[tuple[int, float]] = []
        for i in order:
            if int(i) in exclude:
                continue
            out.append((int(i), float(scores[i])))
            if len(out) == k:
                break
        return out
