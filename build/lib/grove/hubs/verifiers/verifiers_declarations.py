"""The verifiers hub adapter as the registries know it before a config uses it: ids and documentation, no import."""

from grove.registry import ENVIRONMENTS, REWARD_FUNCTIONS
from grove.tasks.task import TASKS

NEEDS = ("verifiers",)  # what the extra installs
EXTRA = "verifiers"

ENVIRONMENTS.declare(
    "verifiers", module="grove.hubs.verifiers.verifiers_envs", extra=EXTRA, needs=NEEDS,
    summary="A Prime Intellect verifiers (0.4.0) environment played turn by turn; its weighted reward at the end",
)
TASKS.declare(
    "verifiers", module="grove.hubs.verifiers.verifiers_tasks", extra=EXTRA, needs=NEEDS,
    summary="The rows of a Prime Intellect verifiers (0.4.0) taskset as prompts; score them with verifiers_rubric",
)
REWARD_FUNCTIONS.declare(
    "verifiers_rubric", module="grove.hubs.verifiers.verifiers_rubrics", extra=EXTRA, needs=NEEDS,
    summary="The reward functions of a verifiers (0.4.0) task, one objective each, weighted as in its rubric",
)
