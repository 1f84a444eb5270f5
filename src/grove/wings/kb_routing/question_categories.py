"""Candidate questions of each category of the routing question set, before splitting and the answerability
check (:mod:`grove.wings.kb_routing.routing_questions`): one generator per category, ``fn(kbs, params) -> Candidate``s,
in :data:`GENERATORS`. Facts come from the knowledge bases' own rows, so answers agree with what retrieval
returns; the templates, filters and their reasons are in ``docs/knowledge-bases.md``."""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from grove.knowledge.knowledge_base_builds import build_knowledge_base
from grove.knowledge.text_match import contains_answer, normalize_answer
from grove.wings.kb_routing.keyed_search import KeyedBm25KnowledgeBase
from grove.wings.kb_routing.routing_question_types import (
    DEFAULT_KB_IDS,
    OPTIONAL_KB_IDS,
    GoldStep,
    RoutingQuestionParams,
)
from grove.wings.kb_routing.wiki_text import WikipediaTextKnowledgeBase

__all__ = ["GENERATORS", "Candidate", "RoleKnowledgeBases"]

MIN_DESCRIPTION_WORDS = 4
MAX_DISEASE_WORDS = 5
MAX_DISEASE_CHARS = 40
MIN_DISEASE_PHENOTYPES = 3


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
class Candidate:
    """A question before the answerability check; ``gold_docs[i]`` is the doc hop ``i`` must surface."""

    entity: str
    qid: str
    question: str
    answers: tuple[str, ...]
    steps: tuple[GoldStep, ...]
    gold_docs: tuple[str | None, ...] = field(default=())


class RoleKnowledgeBases:
    """The default KBs of the roles, built lazily with the params' cache dir."""

    def __init__(self, cache_dir: str | None) -> None:
        self.cache_dir = cache_dir
        self._built: dict[str, Any] = {}

    def __getitem__(self, role: str) -> Any:
        if role not in self._built:
            kb_id = {**DEFAULT_KB_IDS, **OPTIONAL_KB_IDS}[role]
            self._built[role] = build_knowledge_base(kb_id, {"cache_dir": self.cache_dir})
        return self._built[role]


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


def _country_capital(kbs: RoleKnowledgeBases, params: RoutingQuestionParams) -> Iterator[Candidate]:
    for doc_id, c in _countries(kbs["tables"]):
        name, capital = c["name"], c["capital"]
        if not capital or _capital_gives_itself_away(name, capital):
            continue
        step = GoldStep("tables", f"capital of {name}", (capital,))
        yield Candidate(
            name,
            f"country_capital:{c['iso']}",
            f"What is the capital of {name}?",
            (capital,),
            (step,),
            (doc_id,),
        )


def _country_population(kbs: RoleKnowledgeBases, params: RoutingQuestionParams) -> Iterator[Candidate]:
    for doc_id, c in _countries(kbs["tables"]):
        name, population = c["name"], int(c["population"])
        if population <= 0:
            continue
        answers = _population_answers(population)
        step = GoldStep("tables", f"population of {name}", answers)
        yield Candidate(
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


def _element_symbol(kbs: RoleKnowledgeBases, params: RoutingQuestionParams) -> Iterator[Candidate]:
    for doc_id, e in _elements(kbs["tables"]):
        step = GoldStep("tables", f"chemical symbol of {e['name']}", (e["symbol"],))
        yield Candidate(
            e["name"],
            f"element_symbol:{e['number']}",
            f"What is the chemical symbol of {e['name']}?",
            (e["symbol"],),
            (step,),
            (doc_id,),
        )


def _element_number(kbs: RoleKnowledgeBases, params: RoutingQuestionParams) -> Iterator[Candidate]:
    for doc_id, e in _elements(kbs["tables"]):
        answer = str(e["number"])
        step = GoldStep("tables", f"atomic number of {e['name']}", (answer,))
        yield Candidate(
            e["name"],
            f"element_number:{e['number']}",
            f"What is the atomic number of {e['name']}?",
            (answer,),
            (step,),
            (doc_id,),
        )


_DISEASE_NAME_RE = re.compile(r"^[^,;()\[\]0-9]+$")


def _disease_phenotype(kbs: RoleKnowledgeBases, params: RoutingQuestionParams) -> Iterator[Candidate]:
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
        yield Candidate(
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


def _wiki_description(kbs: RoleKnowledgeBases, params: RoutingQuestionParams) -> Iterator[Candidate]:
    for d in _unique_descriptions(kbs["text"]):
        title = d["title"]
        answers = _title_answers(title)
        step = GoldStep("text", d["description"], answers)
        yield Candidate(
            title,
            f"wiki_description:{title}",
            f"Which subject is described as '{d['description']}'?",
            answers,
            (step,),
            (title,),
        )


def _capital_population(kbs: RoleKnowledgeBases, params: RoutingQuestionParams) -> Iterator[Candidate]:
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
        yield Candidate(
            name,
            f"capital_population:{country['iso']}",
            f"What is the population of the capital of {name}?",
            answers,
            steps,
            (country_doc, city_doc),
        )


def _wiki_country_capital(kbs: RoleKnowledgeBases, params: RoutingQuestionParams) -> Iterator[Candidate]:
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
        yield Candidate(
            c["name"],
            f"wiki_country_capital:{c['iso']}",
            f"What is the capital of the country described as '{d['description']}'?",
            (c["capital"],),
            steps,
            (d["title"], country_doc),
        )


def _arithmetic(kbs: RoleKnowledgeBases, params: RoutingQuestionParams) -> Iterator[Candidate]:
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
        yield Candidate(expr, f"arithmetic:{a}-{op}-{b}", f"What is {expr}?", (str(value),), (), ())


def _emblem_colour(kbs: RoleKnowledgeBases, params: RoutingQuestionParams) -> Iterator[Candidate]:
    """"What colour is the shape on the emblem of {house}?" (``pictures``: "emblem of {house}"): the caption does
    not say, the picture does (its ``image_facts`` hold the answer, for the answerability check only)."""
    for house, passage in kbs["pictures"].facts():
        colour = passage.image_facts.split()[1]
        yield Candidate(
            entity=house,
            qid=f"emblem_colour:{house}",
            question=f"What colour is the shape on the emblem of {house}?",
            answers=(colour,),
            steps=(GoldStep("pictures", f"emblem of {house}", (colour,)),),
            gold_docs=(passage.doc_id,),
        )


GENERATORS: dict[str, Callable[[RoleKnowledgeBases, RoutingQuestionParams], Iterator[Candidate]]] = {
    "country_capital": _country_capital,
    "country_population": _country_population,
    "element_symbol": _element_symbol,
    "element_number": _element_number,
    "disease_phenotype": _disease_phenotype,
    "wiki_description": _wiki_description,
    "capital_population": _capital_population,
    "wiki_country_capital": _wiki_country_capital,
    "arithmetic": _arithmetic,
    "emblem_colour": _emblem_colour,
}
