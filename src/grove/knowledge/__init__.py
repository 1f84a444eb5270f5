"""Offline knowledge bases behind one retriever interface, and the routing-QA question sets built from them.

Knowledge bases (registered in :data:`grove.registry.KNOWLEDGE_BASES`; build with
:func:`build_knowledge_base`):

* ``wikipedia_text``: 10,033 Wikipedia lead summaries, BM25 or dense (:mod:`grove.knowledge.wiki_text`);
* ``tables``: countries, large cities and chemical elements, one row per passage
  (:mod:`grove.knowledge.tables_kb`);
* ``medical_hpo``: HPO phenotype terms and Orphanet/OMIM diseases (:mod:`grove.knowledge.medical_kb`).

Questions: :func:`routing_questions` (train/validation/test, gold routes checked against the KBs) and
:func:`quiz_questions` (out-of-distribution, from the BSD quiz game's files). Answer matching for rewards:
:mod:`grove.knowledge.text_match`. Details, sizes and timings: ``docs/knowledge-bases.md``.

Note: the functions ``routing_questions`` and ``quiz_questions`` re-exported here share their modules' names,
so the attribute ``grove.knowledge.routing_questions`` is the *function*; import the modules' other names with
``from grove.knowledge.routing_questions import ...`` (which always works), not ``import ... as``.
"""

from grove.knowledge.knowledge_base_builds import build_knowledge_base, clear_knowledge_base_memo
from grove.knowledge.passages import KnowledgeBase, Passage
from grove.knowledge.quiz_questions import quiz_question_report, quiz_questions
from grove.knowledge.routing_question_types import (
    CATEGORIES,
    DEFAULT_KB_IDS,
    KB_ROLES,
    GoldStep,
    RoutingQuestion,
    RoutingQuestionParams,
)
from grove.knowledge.routing_questions import routing_question_report, routing_questions
from grove.knowledge.sentence_embeddings import encode_texts
from grove.knowledge.text_match import contains_answer, exact_match, normalize_answer, token_f1, token_recall

__all__ = [
    "CATEGORIES",
    "DEFAULT_KB_IDS",
    "KB_ROLES",
    "GoldStep",
    "KnowledgeBase",
    "Passage",
    "RoutingQuestion",
    "RoutingQuestionParams",
    "build_knowledge_base",
    "clear_knowledge_base_memo",
    "contains_answer",
    "encode_texts",
    "exact_match",
    "normalize_answer",
    "quiz_question_report",
    "quiz_questions",
    "routing_question_report",
    "routing_questions",
    "token_f1",
    "token_recall",
]
