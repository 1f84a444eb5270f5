"""Knowledge bases behind one retriever interface: the interface (:class:`KnowledgeBase`, :class:`Passage`), building
a registered knowledge base by id (:func:`build_knowledge_base`, registry :data:`grove.registry.KNOWLEDGE_BASES`),
their on-disk cache, keyed search, answer matching (:mod:`grove.knowledge.text_match`) and the Human Phenotype
Ontology loader.

The knowledge bases themselves (``wikipedia_text``, ``tables``, ``medical_hpo``) and the routing question sets built
from them belong to the knowledge-base routing application (:mod:`grove.wings.kb_routing`, ``grove[kb-routing]``);
they are declared to the registry and imported when a config uses them. Details, sizes and timings:
``docs/knowledge-bases.md``.
"""

from grove.knowledge.knowledge_base_builds import build_knowledge_base, clear_knowledge_base_memo
from grove.knowledge.passages import KnowledgeBase, Passage, passage_evidence
from grove.knowledge.text_match import contains_answer, exact_match, normalize_answer, token_f1, token_recall

__all__ = [
    "KnowledgeBase",
    "Passage",
    "build_knowledge_base",
    "clear_knowledge_base_memo",
    "contains_answer",
    "exact_match",
    "normalize_answer",
    "passage_evidence",
    "token_f1",
    "token_recall",
]
