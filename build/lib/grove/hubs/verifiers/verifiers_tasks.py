"""``verifiers``: the tasks of a Prime Intellect verifiers taskset (``pip install verifiers==0.4.0``) as a grove task.

verifiers 0.4.0 (its ``verifiers.v1`` API) describes an environment as a **taskset** (``vf.Taskset``) yielding
**tasks** (``vf.Task``): each holds its row (``vf.TaskData``: ``prompt``, ``system_prompt`` and the taskset's own
fields, e.g. ``answer`` or ``info``) and scores a finished trace with its ``@vf.reward(weight=...)`` methods. An
``Env`` (``vf.Env``) adds how agents play a task (one segment, or a multi-turn exchange: the ``verifiers``
environment of :mod:`grove.hubs.verifiers.verifiers_envs`). This task reads the rows only:

* ``environment`` names the taskset: ``package.module:function`` (called with ``kwargs``; it returns a
  ``vf.Taskset`` or a ``vf.Env``, whose ``taskset`` is used), or an installed verifiers taskset id, loaded as
  verifiers loads it (``vf.load_environment(vf.resolve_env_config({"taskset": {"id": ..., **kwargs}}))``);
* the prompt is the row's ``prompt`` (a string, or chat messages turned into ``{role, content}`` dicts), with its
  ``system_prompt`` as a first system message; a row without a prompt falls back to a string ``question`` field;
* the answer is the row's ``answer`` field as a string (``""`` when it has none); every field the taskset adds to
  ``TaskData`` is a column (``answer``, ``info``, ...), and ``verifiers_task`` holds the whole row (JSON), from which
  the ``verifiers_rubric`` reward rebuilds the task to score a completion;
* the eval split is the same environment built with ``eval_kwargs`` when given (the environment's own held-out
  rows, e.g. ``{split: test}``), else ``eval_fraction`` of the rows chosen by ``seed``. A training row equal to an
  eval row (the same ``Task.key``) is dropped from training.

An infinite taskset (``Taskset.INFINITE``) needs ``max_tasks``, which caps the rows read from each taskset.
"""

from __future__ import annotations

import random
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from grove.hubs.verifiers.verifiers_loading import load_verifiers
from grove.tasks.task import TASKS, Example, Task, TaskDataError, TaskSplits

TASK_COLUMN = "verifiers_task"
"""The column holding a row's whole ``TaskData`` (JSON), from which the ``verifiers_rubric`` reward rebuilds it."""

_RESERVED_COLUMNS = ("prompts", "completions", TASK_COLUMN)





class VerifiersTaskParams(BaseModel):
    """Parameters of the ``verifiers`` task."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    environment: str = Field(
        description="The verifiers environment: 'package.module:function' returning a vf.Taskset or vf.Env "
        "(called with kwargs), or an installed verifiers taskset id (vf.load_environment)."
    )
    kwargs: dict[str, Any] = Field(
        default_factory=dict,
        description="Keyword arguments of the function, or the taskset config's fields for a taskset id.",
    )
    eval_kwargs: dict[str, Any] | None = Field(
        None,
        description="The environment's own eval rows: the same environment built with these kwargs (e.g. "
        "{split: test}); null holds out eval_fraction of the rows instead.",
    )
    eval_fraction: float = Field(
        0.1, ge=0, lt=1, description="Fraction of the rows held out for eval when eval_kwargs is null."
    )
    seed: int = Field(0, description="Seed choosing the held-out rows.")
    max_tasks: int | None = Field(
        None, ge=1, description="Rows read from each taskset (the first ones); required for an infinite taskset."
    )

    @field_validator("environment")
    @classmethod
    def _named(cls, v: str) -> str:
        module, colon, attr = v.partition(":")
        if not v.strip() or (colon and not (module and attr)):
            raise ValueError(
                f"environment must be 'package.module:function' or a verifiers taskset id, got {v!r}"
            )
        return v


def read_tasks(taskset: Any, max_tasks: int | None, what: str) -> list[Any]:
    """The tasks of ``taskset`` (at most ``max_tasks``); :class:`TaskDataError` for an infinite one without a cap."""
    if max_tasks is None and not taskset.bounded:
        raise TaskDataError(f"{what}: the taskset {type(taskset).__name__} is infinite; set max_tasks")
    return list(taskset.take(max_tasks) if max_tasks is not None else taskset)


def split_tasks(params: Any, where: str = "task") -> tuple[list[Any], list[Any]]:
    """``(train, eval)`` tasks of the environment ``params`` name (``environment``, ``kwargs``, ``eval_kwargs``,
    ``eval_fraction``, ``seed``, ``max_tasks``); a training task equal to an eval task is dropped."""
    source = f"{where}.environment {params.environment!r}"
    tasks = read_tasks(load_verifiers(params.environment, params.kwargs, where, TaskDataError)[1], params.max_tasks, source)
    if params.eval_kwargs is not None:
        held = read_tasks(load_verifiers(params.environment, params.eval_kwargs, where, TaskDataError)[1], params.max_tasks,
                          source)
        train = tasks
    else:
        n_eval = round(params.eval_fraction * len(tasks))
        if params.eval_fraction > 0 and n_eval == 0 and len(tasks) >= 2:
            n_eval = 1
        chosen = set(random.Random(params.seed).sample(range(len(tasks)), n_eval))
        train = [t for i, t in enumerate(tasks) if i not in chosen]
        held = [t for i, t in enumerate(tasks) if i in chosen]
    held_keys = {t.key for t in held}
    train = [t for t in train if t.key not in held_keys]
    for split, chosen_tasks in (("train", train), ("eval", held)):
        if not chosen_tasks:
            raise TaskDataError(
                f"{source}: the {split} split is empty ({len(tasks)} tasks read); adjust eval_fraction, "
                "eval_kwargs or max_tasks"
            )
    return train, held


def chat_prompt(data: Any, where: str) -> str | list[dict[str, Any]]:
    """A row's prompt as grove shows it: the ``prompt`` string (or its ``question`` field when it has no prompt),
    or ``{role, content}`` messages; a ``system_prompt`` becomes the first message."""
    from verifiers.v1.types import content_text

    prompt = data.prompt
    if prompt is None:
        prompt = getattr(data, "question", None)
        if not isinstance(prompt, str):
            raise TaskDataError(
                f"{where} has no prompt (the environment opens it with a user turn) and no string 'question' "
                "field; play it with the 'verifiers' environment instead"
            )
    if isinstance(prompt, str):
        if not data.system_prompt:
            return prompt
        messages = [{"role": "user", "content": prompt}]
    else:
        messages = [{"role": m.role, "content": content_text(m.content)} for m in prompt]
    if data.system_prompt:
        messages = [{"role": "system", "content": data.system_prompt}, *messages]
    return messages


def task_example(task: Any, where: str) -> Example:
    """One row as an :class:`Example`: prompt, the ``answer`` field as a string, the taskset's fields as columns and
    the whole row under ``verifiers_task``."""
    import verifiers.v1 as vf

    data = task.data
    fields = data.model_dump(mode="json", exclude=set(vf.TaskData.model_fields))
    answer = "" if fields.get("answer") is None else str(fields["answer"])
    columns = {k: v for k, v in fields.items() if k not in _RESERVED_COLUMNS}
    columns["answer"] = answer
    columns[TASK_COLUMN] = data.model_dump(mode="json")
    return Example(prompt=chat_prompt(data, where), answer=answer, columns=columns)


@TASKS.register(
    "verifiers",
    params=VerifiersTaskParams,
)
def verifiers_task(params: VerifiersTaskParams) -> Task:
    """The train and eval rows of the verifiers environment ``params.environment``."""
    train, held = split_tasks(params)
    return TaskSplits(
        name="verifiers",
        train=tuple(task_example(t, f"task {t.data.idx} of {params.environment!r}") for t in train),
        eval=tuple(task_example(t, f"task {t.data.idx} of {params.environment!r}") for t in held),
    )
