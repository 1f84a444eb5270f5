"""``emblems``: a picture knowledge base: the emblems of imaginary houses, each a generated picture of one
coloured shape (:mod:`grove.wings.shapes.shape_pictures`) captioned "The emblem of House Arlen.".

The caption never says what the emblem shows, so a question about it ("What colour is the shape on the emblem of
House Arlen?", the ``emblem_colour`` routing category) is answered only by a policy that looks at the picture: the
image route of knowledge-base routing. Houses are named from syllables drawn with ``seed`` (distinct names, no
external data); a house's emblem is drawn from a seed of its name, so it is the same in every build.

Search: the houses whose names the query holds (lower-cased words), best first by how many of the query's words
their caption holds, ties by name; ``[]`` for an empty query. ``cache_dir`` is accepted (the routing question
builder passes it to every role's knowledge base); nothing is cached on disk, building 300 emblems takes a second.
"""

from __future__ import annotations

import hashlib
import re

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from grove.knowledge.passages import Passage
from grove.registry import KNOWLEDGE_BASES
from grove.wings.shapes.shape_pictures import Picture, draw_picture

__all__ = ["EmblemsKnowledgeBase", "EmblemsParams", "emblems_knowledge_base", "house_names"]

_ONSETS = ("ar", "bel", "cor", "dun", "el", "fal", "gar", "hol", "ir", "jor", "kel", "lor", "mar", "nor", "or",
           "per", "quin", "ros", "sar", "tor", "ul", "val", "wen", "yar", "zan")
_CODAS = ("len", "mont", "wick", "dale", "ford", "wyn", "ric", "mere", "holt", "by", "ton", "vane", "stead")
_WORD = re.compile(r"[a-z0-9]+")


class EmblemsParams(BaseModel):
    """Parameters of the ``emblems`` knowledge base."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    houses: int = Field(300, ge=1, le=len(_ONSETS) * len(_CODAS), description="Number of houses (and emblems).")
    image_size: int = Field(32, ge=16, le=512, description="Side of the emblem pictures, in pixels.")
    seed: int = Field(0, description="Seed of the house names.")
    cache_dir: str | None = Field(None, description="Accepted for the routing question builder; nothing is cached.")


def house_names(count: int, seed: int) -> list[str]:
    """``count`` distinct house names ("House Arlen"), drawn with ``seed``."""
    names = [f"House {a.capitalize()}{b}" for a in _ONSETS for b in _CODAS]
    order = np.random.default_rng(seed).permutation(len(names))
    return [names[i] for i in order[:count]]


def _emblem(name: str, size: int) -> Picture:
    seed = int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big")
    return draw_picture(np.random.default_rng(seed), size, 1)


class EmblemsKnowledgeBase:
    """The emblems of ``houses`` houses (see the module docstring)."""

    name = "emblems"
    description = "Pictures of the emblems of the noble houses (a picture per house; look at it to see the emblem)"

    def __init__(self, params: EmblemsParams) -> None:
        self.passages: list[Passage] = []
        for house in house_names(params.houses, params.seed):
            picture = _emblem(house, params.image_size)
            shape = picture.shapes[0]
            self.passages.append(Passage(
                kb="emblems", doc_id=f"emblem:{house}", title=f"The emblem of {house}",
                text=f"The emblem of {house}.", images=(picture.pixels,),
                image_facts=f"a {shape.colour} {shape.kind}",
            ))
        self._words = [set(_WORD.findall(p.title.lower())) for p in self.passages]
        self._house_word = [_WORD.findall(p.title.lower())[-1] for p in self.passages]

    def search(self, query: str, k: int) -> list[Passage]:
        words = set(_WORD.findall(query.lower()))
        if not words or k < 1:
            return []
        scored = [
            (-len(words & self._words[i]), self.passages[i].title, i)
            for i in range(len(self.passages)) if self._house_word[i] in words
        ]
        return [self.passages[i] for _, _, i in sorted(scored)[:k]]

    def facts(self) -> list[tuple[str, Passage]]:
        """Every house with its emblem's passage (what the routing questions are built from)."""
        return [(p.title.removeprefix("The emblem of "), p) for p in self.passages]


@KNOWLEDGE_BASES.register("emblems", params=EmblemsParams)
def emblems_knowledge_base(params: EmblemsParams) -> EmblemsKnowledgeBase:
    """The ``emblems`` knowledge base (see the module docstring)."""
    return EmblemsKnowledgeBase(params)
