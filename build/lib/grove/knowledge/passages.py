"""The retriever interface every knowledge base implements.

A knowledge base (KB) is anything with a registry ``name``, a one-line ``description`` (shown to the model so
it can choose where to look) and a deterministic ``search(query, k)`` returning up to ``k``
:class:`Passage` objects, best first, and ``[]`` for an empty query. KBs register in
:data:`grove.registry.KNOWLEDGE_BASES` with a pydantic parameter model and are built by
:func:`grove.knowledge.knowledge_base_builds.build_knowledge_base`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

__all__ = ["KnowledgeBase", "Passage"]


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
