"""The reasoning-gym hub adapter as the registries know it before a config uses it: ids and documentation, no import."""

from grove.registry import REWARD_FUNCTIONS
from grove.tasks.task import TASKS

NEEDS = ("reasoning_gym",)  # what the extra installs
EXTRA = "reasoning-gym"

TASKS.declare(
    "reasoning_gym", module="grove.hubs.reasoning_gym.reasoning_gym_tasks", extra=EXTRA, needs=NEEDS,
    summary="reasoning-gym procedural generators (one dataset or a weighted mix), disjoint seeded train/eval splits",
)
REWARD_FUNCTIONS.declare(
    "reasoning_gym", module="grove.hubs.reasoning_gym.reasoning_gym_scores", extra=EXTRA, needs=NEEDS,
    summary="reasoning-gym's score_answer(extracted answer, entry) in [0, 1] for the reasoning_gym task",
)
