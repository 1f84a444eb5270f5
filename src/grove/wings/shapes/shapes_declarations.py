"""The shapes application as the registries know it before a config uses it: ids and documentation, no import."""

from grove.registry import KNOWLEDGE_BASES, REWARD_FUNCTIONS
from grove.tasks.task import TASKS

EXTRA = "vision"

TASKS.declare(
    "shapes", module="grove.wings.shapes.shapes_task", extra=EXTRA, needs=("PIL",),
    summary="Questions about generated pictures of coloured shapes (colour, shape, both, count), for vision-language "
    "policies",
)
REWARD_FUNCTIONS.declare(
    "picture_answer", module="grove.wings.shapes.shapes_task", extra=EXTRA, needs=("PIL",),
    summary="1 when the completion's first words, normalised, are the gold answer (a short answer about a picture)",
)
KNOWLEDGE_BASES.declare(
    "emblems", module="grove.wings.shapes.emblems_kb", extra=EXTRA, needs=("PIL",),
    summary="Pictures of the emblems of imaginary houses, captioned without what they show: the image route of "
    "knowledge-base routing",
)
