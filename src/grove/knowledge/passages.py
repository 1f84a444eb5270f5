"""The retriever interface every knowledge base implements.

A knowledge base (KB) is anything with a registry ``name``, a one-line ``description`` (shown to the model so
it can choose where to look) and a deterministic ``search(query, k)`` returning up to ``k``
:class:`Passage` objects, best first, and ``[]`` for an empty query. KBs register in
:data:`grove.registry.KNOWLEDGE_BASES` with a pydantic parameter model and are built by
:func:`grove.knowledge.knowledge_base_builds.build_knowledge_base`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

__all__ = ["KnowledgeBase", "Passage", "passage_evidence"]


@dataclass(frozen=True)
class Passage:
    """One retrieved passage.

    ``kb`` is the registry id of the KB that produced it, ``doc_id`` a stable id within that KB (e.g.
    ``"country:FR"``, ``"ORPHA:558"``, a Wikipedia title), ``text`` the rendered passage (self-contained: a
    table row names its own key, a Wikipedia passage starts with its title) and ``score`` the retriever's
    score (comparable only within one KB and one query). A picture knowledge base's passages hold ``images``
    (arrays or PIL images, shown to a vision-language policy beside ``text``, their caption) and ``image_facts``,
    what the pictures show in words: never shown to the model, read only to tell whether a search surfaced an
    answer (:func:`passage_evidence`)."""

    kb: str
    doc_id: str
    title: str
    text: str
    score: float = 0.0
    images: tuple[Any, ...] = field(default=(), repr=False)
    image_facts: str = ""


@runtime_checkable
class KnowledgeBase(Protocol):
    """What the environment codes against (see the module docstring)."""

    name: str
    description: str

    def search(self, query: str, k: int) -> list[Passage]: ...


def passage_evidence(passage: Passage) -> str:
    """What a passage tells, to check it for an answer: its text, and what its pictures show (``image_facts``)."""
    return f"{passage.text} {passage.image_facts}" if passage.image_facts else passage.text
