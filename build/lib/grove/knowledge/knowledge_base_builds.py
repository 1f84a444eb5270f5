"""Building a registered knowledge base by id: :func:`build_knowledge_base`.

It validates the parameters with the KB's pydantic model and memoises the result per process, so an environment
that makes many copies of itself shares one index (building the same KB with equal parameters returns the *same*
object). Builds are cheap after the first one anyway, because every KB caches its rendered passages and index on
disk (:mod:`grove.knowledge.knowledge_cache`). The built-in KBs are declared by the knowledge-base routing
application (:mod:`grove.wings.kb_routing`) and imported when first built.
"""

from __future__ import annotations

import difflib
import threading
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from grove.knowledge.knowledge_cache import knowledge_cache_root
from grove.knowledge.passages import KnowledgeBase
from grove.registry import KNOWLEDGE_BASES

__all__ = ["build_knowledge_base", "clear_knowledge_base_memo"]

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
