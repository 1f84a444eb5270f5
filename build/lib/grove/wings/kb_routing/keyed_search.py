"""Key-first search over rendered rows: the shared engine of the ``tables`` and ``medical_hpo`` KBs.

``search(query, k)``:

1. documents whose *key* (entity name, element symbol) occurs in the query as whole words
   (:class:`grove.wings.kb_routing.key_match.KeyMatcher`), ordered by key length (tokens, then characters,
   longest first), then BM25 score of the query, then document position;
2. then, up to ``k``, the BM25 ranking of the query over the rendered row texts
   (:class:`grove.wings.kb_routing.bm25_index.Bm25Index`), skipping documents already listed.

Key-matched passages carry ``score = KEY_MATCH_SCORE + BM25 score`` so that scores decrease down the list.

On disk (one directory per KB build, see :mod:`grove.knowledge.knowledge_cache`): ``passages.json`` (the
rows: ``[doc_id, title, text]``, plus the name and symbol keys as ``[key, row position]``) and ``bm25/``
(bm25s's saved index). A cached build reads both without importing the source library.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from grove.atomic_files import write_dir_atomic, write_json_atomic
from grove.knowledge.knowledge_cache import read_json
from grove.knowledge.passages import Passage
from grove.wings.kb_routing.bm25_index import Bm25Index
from grove.wings.kb_routing.key_match import KeyMatcher

__all__ = ["KEY_MATCH_SCORE", "KeyedBm25KnowledgeBase", "load_or_build_rows"]

KEY_MATCH_SCORE = 1000.0
"""Added to the BM25 score of key-matched passages (BM25 scores of short queries stay far below it)."""


class KeyedBm25KnowledgeBase:
    """Rows searched key-first, then by BM25 (see the module docstring)."""

    def __init__(
        self,
        name: str,
        description: str,
        rows: Sequence[Sequence[str]],
        index: Bm25Index,
        names: Sequence[Sequence[Any]] = (),
        symbols: Sequence[Sequence[Any]] = (),
        ambiguous_symbols: Sequence[str] = (),
        fields: Sequence[dict[str, Any]] | None = None,
    ) -> None:
        self.name = name
        self.description = description
        self.rows: list[tuple[str, str, str]] = [(str(d), str(t), str(x)) for d, t, x in rows]
        if index.num_docs != len(self.rows):
            raise ValueError(f"{name}: index has {index.num_docs} documents for {len(self.rows)} rows")
        self.index = index
        self.keys = KeyMatcher(
            ((str(k), int(i)) for k, i in names),
            ((str(s), int(i)) for s, i in symbols),
            ambiguous_symbols,
        )
        self.position = {doc_id: i for i, (doc_id, _, _) in enumerate(self.rows)}
        #: structured values of each row (what the text renders), for building questions from the KB itself
        self.fields: list[dict[str, Any]] = list(fields) if fields is not None else [{} for _ in self.rows]

    def __len__(self) -> int:
        return len(self.rows)

    def passage(self, position: int, score: float = 0.0) -> Passage:
        doc_id, title, text = self.rows[position]
        return Passage(kb=self.name, doc_id=doc_id, title=title, text=text, score=score)

    def get(self, doc_id: str) -> Passage | None:
        """The passage with ``doc_id`` (score 0), or ``None``."""
        i = self.position.get(doc_id)
        return None if i is None else self.passage(i)

    def search(self, query: str, k: int) -> list[Passage]:
        """Key matches first, then BM25 (see the module docstring); ``[]`` for an empty query or
        ``k <= 0``."""
        if k <= 0 or not query or not query.strip():
            return []
        hits = self.keys.find(query)
        scores = self.index.scores(query)
        hits = sorted(hits, key=lambda h: (-h.tokens, -h.chars, -float(scores[h.doc]), h.doc))
        out = [self.passage(h.doc, KEY_MATCH_SCORE + float(scores[h.doc])) for h in hits[:k]]
        if len(out) < k:
            exclude = {h.doc for h in hits}
            out += [self.passage(i, s) for i, s in self.index.top(query, k - len(out), exclude, scores)]
        return out


def load_or_build_rows(
    name: str,
    description: str,
    directory: Path,
    build: Callable[[], dict[str, Any]],
) -> KeyedBm25KnowledgeBase:
    """The KB cached in ``directory`` (``passages.json`` + ``bm25/``), building what is missing.

    ``build()`` returns ``{"rows": [[doc_id, title, text], ...], "names": [[key, pos], ...], "symbols": [...],
    "ambiguous_symbols": [...], "fields": [{...}, ...]}`` (all but ``rows`` optional) and is only called when
    ``passages.json`` is absent."""
    rows_file, index_dir = directory / "passages.json", directory / "bm25"
    if rows_file.is_file():
        data = read_json(rows_file)
    else:
        data = build()
        write_json_atomic(rows_file, data)
    if index_dir.is_dir():
        index = Bm25Index.load(index_dir)
    else:
        index = Bm25Index.build([text for _, _, text in data["rows"]])
        write_dir_atomic(index_dir, index.save)
    return KeyedBm25KnowledgeBase(
        name,
        description,
        data["rows"],
        index,
        data.get("names", ()),
        data.get("symbols", ()),
        data.get("ambiguous_symbols", ()),
        data.get("fields"),
    )
