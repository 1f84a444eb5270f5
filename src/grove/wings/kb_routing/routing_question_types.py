"""The routing question set's data types and parameters: :class:`GoldStep`, :class:`RoutingQuestion`, the
knowledge-base roles, the categories and :class:`RoutingQuestionParams`. How questions are generated per
category is in :mod:`grove.wings.kb_routing.question_categories`; splitting, the answerability check and the cache in
:mod:`grove.wings.kb_routing.routing_questions` (whose docstring describes the whole set)."""

from __future__ import annotations

import typing
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

__all__ = [
    "CATEGORIES",
    "DEFAULT_CATEGORIES",
    "DEFAULT_KB_IDS",
    "KB_ROLES",
    "OPTIONAL_KB_IDS",
    "Category",
    "GoldStep",
    "RoutingQuestion",
    "RoutingQuestionParams",
    "question_from_dict",
    "route_of",
]

KB_ROLES = ("text", "tables", "medical")
DEFAULT_KB_IDS = {"text": "wikipedia_text", "tables": "tables", "medical": "medical_hpo"}
#: roles a configuration adds on purpose: ``pictures`` (the ``emblems`` picture knowledge base, ``grove[vision]``),
#: whose questions only a vision-language policy can answer
OPTIONAL_KB_IDS = {"pictures": "emblems"}
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
    "emblem_colour",
]
CATEGORIES: tuple[str, ...] = typing.get_args(Category)
#: the categories built by default: those of the default roles (``emblem_colour`` asks for the ``pictures`` role)
DEFAULT_CATEGORIES: tuple[str, ...] = tuple(c for c in CATEGORIES if c != "emblem_colour")
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
    ``"test"`` or ``"quiz"`` (the out-of-distribution set of :mod:`grove.wings.kb_routing.quiz_questions`)."""

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
        default_factory=lambda: list(DEFAULT_CATEGORIES),
        min_length=1,
        description="Categories to build (kept in the canonical order); emblem_colour (the pictures role) is built "
        "only when named.",
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
