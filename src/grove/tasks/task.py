"""Tasks: a train and an eval split of :class:`Example` prompts with gold answers.

Registry convention
-------------------
A task is registered in :data:`TASKS` as a builder ``fn(params) -> Task``, where ``params`` is the
validated instance of its pydantic parameter model. :func:`build_task` validates a params dict and
calls the builder::

    task = build_task("arithmetic", {"num_terms": 3, "operators": ["+", "*"]})
    task = build_task(cfg.task)  # a config component ``{id: ..., <params>}``
    task.train[0].prompt, task.train[0].answer, task.eval
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, ValidationError

from grove.registry import Registry

ChatMessages = list[dict[str, Any]]


@dataclass(frozen=True)
class Example:
    """One problem: the prompt, its gold answer, and the dataset columns handed to reward functions.

    ``columns`` always contains ``"answer"`` (equal to :attr:`answer`); it is filled in when absent.
    Other entries are extra dataset columns (e.g. ``"question"``), passed to reward functions as
    keyword arguments.
    """

    prompt: str | ChatMessages
    answer: str
    columns: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if "answer" not in self.columns:
            object.__setattr__(self, "columns", {**self.columns, "answer": self.answer})
        elif self.columns["answer"] != self.answer:
            raise ValueError(
                f"Example: columns['answer'] ({self.columns['answer']!r}) differs from answer ({self.answer!r})"
            )

    @property
    def prompt_text(self) -> str:
        """The prompt as reward functions see it: the string, or the last user message of a chat (the text of its
        parts, where its content is a list of text and image parts)."""
        if isinstance(self.prompt, str):
            return self.prompt
        users = [m["content"] for m in self.prompt if m.get("role") == "user"]
        if not users:
            return ""
        content = users[-1]
        if isinstance(content, list):
            return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict) and p.get("type") == "text")
        return content


@runtime_checkable
class Task(Protocol):
    """What the trainer needs from a task: a name and two splits of examples."""

    name: str
    train: Sequence[Example]
    eval: Sequence[Example]


@dataclass(frozen=True)
class TaskSplits:
    """Plain :class:`Task` implementation returned by the built-in task builders."""

    name: str
    train: Sequence[Example]
    eval: Sequence[Example]


TASKS: Registry = Registry("task")


class TaskParamsError(ValueError):
    """A task's parameters failed validation."""


class TaskDataError(ValueError):
    """A task's data is unusable (a malformed or missing data file, an empty split); the message names the file
    and line, or the task and split, and the fix. The CLI prints it as ``error: ...`` (exit code 2)."""


def require_examples(task: Task, task_id: str, splits: Sequence[str] = ("train", "eval")) -> None:
    """Raise :class:`TaskDataError` naming the task and the split when one of ``splits`` has no examples."""
    for split in splits:
        if len(getattr(task, split)) == 0:
            raise TaskDataError(
                f"task {task_id!r}: the {split} split has no examples; check the task's parameters (e.g. its data "
                f"file, {split}_size, eval_fraction or filters) so that both train and eval have at least one"
            )


def build_task(spec: str | Any, params: Mapping[str, Any] | BaseModel | None = None, *, entry: Any = None) -> Task:
    """Build a registered task.

    Args:
        spec: the task id (``"arithmetic"``), or a config component with ``.id`` and ``.params``
            (e.g. ``grove.config.ComponentSpec``), in which case ``params`` must be omitted.
        params: the task's parameters (dict or params-model instance), validated against its model.
        entry: the task's registry entry, where the caller looked it up already (the run's front door).

    Raises:
        UnknownComponentError: unknown id (the message lists the known ids).
        TaskParamsError: invalid parameters.
    """
    if isinstance(spec, str):
        id = spec
    else:
        if params is not None:
            raise TypeError(
                "build_task: pass params either inside the component spec or separately, not both"
            )
        id, params = spec.id, spec.params
    entry = entry or TASKS.entry(id)  # raises UnknownComponentError listing the known ids
    values = params.model_dump() if isinstance(params, BaseModel) else dict(params or {})
    try:
        validated = entry.params.model_validate(values)
    except ValidationError as e:
        raise TaskParamsError(f"invalid params for task {id!r}: {e}") from e
    return entry.fn(validated)


def columns_for_rewards(
    examples: Sequence[Example], completion_ids: Sequence[Sequence[int]] | None = None
) -> dict[str, list[Any]]:
    """Column-wise view of ``examples[i].columns`` for reward calls (``None`` where an example lacks a key), with
    ``completion_ids`` (each completion's generated token ids, TRL's column) when given."""
    keys: dict[str, None] = {}
    for ex in examples:
        keys.update(dict.fromkeys(ex.columns))
    columns = {k: [ex.columns.get(k) for ex in examples] for k in keys}
    if completion_ids is not None:
        columns["completion_ids"] = [list(ids) for ids in completion_ids]
    return columns
