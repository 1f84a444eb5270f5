"""The retriever interface every knowledge base implements, and :func:`build_knowledge_base`.

A knowledge base (KB) is anything with a registry ``name``, a one-line ``description`` (shown to the model so
it can choose where to look) and a deterministic ``search(query, k)`` returning up to ``k``
:class:`Passage` objects, best first, and ``[]`` for an empty query. KBs register in
:data:`grove.registry.KNOWLEDGE_BASES` with a pydantic parameter model; :func:`build_knowledge_base` validates
the parameters and memoises the result per process, so an environment that makes many copies of itself
shares one index (building the same KB with equal parameters returns the *same* object). Builds are cheap
after the first one anyway, because every KB caches its rendered passages and index on disk
(:mod:`grove.knowledge.knowledge_cache`).
"""

from __future__ import annotations

import difflib
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from pydantic import ValidationError

from grove.knowledge.knowledge_cache import knowledge_cache_root
from grove.registry import KNOWLEDGE_BASES

__all__ = ["KnowledgeBase", "Passage", "build_knowledge_base", "clear_knowledge_base_memo"]


@dataclass(frozen=True)
class Passage:
    """One retrieved passage.

    ``kb`` is the registry id of the KB that produced it, ``doc_id`` a stable id within that KB (e.g.
    ``"country:FR"``, ``"ORPHA:558"``, a Wikipedia title), ``text`` the rendered passage (self-contained: a
    table row names its own key, a Wikipedia passage starts with its title) and ``score`` the retriever's
    score (comparable only within one KB and one query)."""

    kb: str
    doc_id: str
    title: str
    text: str
    score: float = 0.0


@runtime_checkable
class KnowledgeBase(Protocol):
    """What the environment codes against (see the module docstring)."""

    name: str
    description: str

    def search(self, query: str, k: int) -> list[Passage]: ...


_MEMO: dict[tuple[str, str, str], KnowledgeBase] = {}
_MEMO_LOCK = threading.Lock()


def _format_validation_error(kb_id: str, error: ValidationError) -> str:
    parts = []
    for e in error.errors():
        field = ".".join(str(x) for x in e["loc"]) or "(params)"
        parts.append(f"field {field!r}: {e['msg']}")
    return f"knowledge base {kb_id!r}: invalid params: " + "; ".join(parts)


def build_knowledge_base(kb_id: str, params: Mapping[str, Any] | None = None) -> KnowledgeBase:
    """Build (or return the memoised) knowledge base ``kb_id`` with ``params``.

    Raises ``ValueError`` for an unknown id (naming the closest known id) or invalid params (naming each
    offending field). The memo key is the id, the validated params and the resolved cache root."""
    import grove.knowledge  # noqa: F401  (registers the built-in KBs)

    if kb_id not in KNOWLEDGE_BASES:
        known = KNOWLEDGE_BASES.ids()
        close = difflib.get_close_matches(str(kb_id), known, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise ValueError(f"unknown knowledge base {kb_id!r}{hint} (known: {', '.join(known)})")
    entry = KNOWLEDGE_BASES.entry(kb_id)
    try:
        validated = entry.params.model_validate(dict(params or {}))
    except ValidationError as e:
        raise ValueError(_format_validation_error(kb_id, e)) from None
    root = str(knowledge_cache_root(getattr(validated, "cache_dir", None)))
    key = (kb_id, validated.model_dump_json(), root)
    with _MEMO_LOCK:
        kb = _MEMO.get(key)
        if kb is None:
            kb = entry.fn(validated)
            if not isinstance(kb, KnowledgeBase):
                raise TypeError(
                    f"knowledge base {kb_id!r} builder returned {type(kb).__name__}, not a KnowledgeBase"
                )
            _MEMO[key] = kb
    return kb


def clear_knowledge_base_memo() -> None:
    """Forget the in-process memo (the on-disk cache stays); the next build reads the disk cache."""
    with _MEMO_LOCK:
        _MEMO.clear()
