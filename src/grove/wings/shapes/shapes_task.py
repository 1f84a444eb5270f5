"""``shapes``: short questions about generated pictures of coloured shapes (:mod:`grove.wings.shapes.shape_pictures`),
for vision-language policies; and ``picture_answer``, the reward that checks such a short answer.

Each example's prompt is one user message: the picture (an image part holding the array) and the question. The
kinds of question (``questions``, drawn uniformly per example):

* ``colour``: "What colour is the shape?" (one shape) → ``red``;
* ``shape``: "What shape is in the picture?" (one shape) → ``circle``;
* ``both``: "Name the colour and the shape." (one shape) → ``red circle``;
* ``count``: "How many shapes are in the picture?" (one to three) → ``2``.

The train and eval splits are drawn from independent seeds (``seed`` and ``seed + 1``), so no picture is in both.
``grove demos`` writes an example's answer as its gold completion (with the picture as a PNG file), the data
``grove sft`` warm-starts a vision-language policy from.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from grove.registry import REWARD_FUNCTIONS
from grove.rewards.values import dataset_column
from grove.tasks.task import TASKS, Example, Task, TaskSplits
from grove.wings.shapes.shape_pictures import draw_picture

__all__ = ["QUESTIONS", "ShapesParams", "picture_answer", "shapes_task"]

QuestionKind = Literal["colour", "shape", "both", "count"]

QUESTIONS: dict[str, str] = {
    "colour": "What colour is the shape? Answer with one word.",
    "shape": "What shape is in the picture? Answer with one word.",
    "both": "Name the colour and the shape, in two words.",
    "count": "How many shapes are in the picture? Answer with a number.",
}


class ShapesParams(BaseModel):
    """Parameters of the ``shapes`` task."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    questions: tuple[QuestionKind, ...] = Field(("colour", "shape"), min_length=1,
                                                description="The kinds of question asked (colour, shape, both, count).")
    image_size: int = Field(32, ge=16, le=512, description="Side of the square pictures, in pixels.")
    train_size: int = Field(2000, ge=1, description="Training examples.")
    eval_size: int = Field(200, ge=1, description="Held-out examples.")
    seed: int = Field(0, description="Seed of the training pictures (the held-out ones use seed + 1).")


def _examples(params: ShapesParams, count: int, seed: int) -> list[Example]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        kind = params.questions[int(rng.integers(len(params.questions)))]
        shapes = int(rng.integers(1, 4)) if kind == "count" else 1
        picture = draw_picture(rng, params.image_size, shapes)
        first = picture.shapes[0]
        answer = {"colour": first.colour, "shape": first.kind, "both": f"{first.colour} {first.kind}",
                  "count": str(len(picture.shapes))}[kind]
        prompt = [{"role": "user", "content": [{"type": "image", "image": picture.pixels},
                                               {"type": "text", "text": QUESTIONS[kind]}]}]
        out.append(Example(prompt=prompt, answer=answer, columns={"question_kind": kind}))
    return out


@dataclass(frozen=True)
class ShapesTask(TaskSplits):
    """The two splits, and the gold completion ``grove demos`` writes for an example: its answer."""

    def demonstration(self, example: Example) -> str:
        return example.answer


@TASKS.register("shapes", params=ShapesParams, summary="Questions about generated pictures of coloured shapes")
def shapes_task(params: ShapesParams) -> Task:
    """The ``shapes`` task (see the module docstring)."""
    return ShapesTask("shapes", tuple(_examples(params, params.train_size, params.seed)),
                      tuple(_examples(params, params.eval_size, params.seed + 1)))


_WORDS = re.compile(r"[a-z0-9]+")
_FILLER = {"a", "an", "the", "it", "is", "its", "this", "there", "are", "shape", "colour", "color"}


def _words(text: str) -> list[str]:
    return [w for w in _WORDS.findall(text.lower()) if w not in _FILLER]


class PictureAnswerParams(BaseModel):
    """Parameters of the ``picture_answer`` reward."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_words: int = Field(4, ge=1, description="Answers longer than this many words (fillers aside) score 0.")


@REWARD_FUNCTIONS.register("picture_answer", params=PictureAnswerParams,
                           summary="1 when the completion's first words, normalised, are the gold answer")
def picture_answer(
    prompts: Sequence[Any], completions: Sequence[str], *, params: PictureAnswerParams, **columns: Any
) -> list[float | None]:
    """1.0 when the completion's words (lower case; articles and fillers such as "it is", "the shape" left out) begin
    with the gold answer's and it has at most ``max_words`` of them (so listing every colour does not score), else
    0.0; ``None`` where the gold answer is ``None``."""
    golds = dataset_column(columns, "answer", len(completions), reward="picture_answer")
    out: list[float | None] = []
    for completion, gold in zip(completions, golds, strict=True):
        if gold is None:
            out.append(None)
            continue
        words, target = _words(completion), _words(str(gold))
        ok = 0 < len(words) <= params.max_words and words[: len(target)] == target
        out.append(1.0 if ok else 0.0)
    return out
