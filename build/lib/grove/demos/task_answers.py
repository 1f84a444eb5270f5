"""Gold completions of single-turn tasks: the text a correct answer would be, in the format the config asks for.

Where a completion comes from, in order:

1. the task's own ``demonstration(example) -> str`` method, when it has one (a user task's way to offer gold text;
   the clinical application's ``clinical_hpo`` task has one: :mod:`grove.wings.clinical.clinical_demonstrations`);
2. the built-in tasks:

   * ``arithmetic``: the result, in the form the config's ``answer_match`` reward extracts (its ``extract``:
     ``answer_tag`` → ``<answer>N</answer>`` with its ``tag``; ``boxed`` → ``\\boxed{N}``; ``full`` → ``N``;
     ``last_number``, or no ``answer_match`` reward → ``<answer>N</answer>`` when the prompt or
     ``rollout.system_prompt`` asks for ``<answer>`` tags, else ``N``);
   * ``jsonl`` and ``hf_dataset`` (file tasks): the answer column as it is.

Any other task raises :class:`NoGoldCompletionError`, saying how to provide one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from grove.config import GroveConfig
from grove.config.reward_columns import reward_column_names
from grove.registry import REWARD_FUNCTIONS
from grove.tasks.task import Example, Task

__all__ = [
    "NoGoldCompletionError",
    "arithmetic_completion",
    "gold_completions",
]

GoldCompletion = Callable[[Example], str]


class NoGoldCompletionError(ValueError):
    """The task has no way to make a gold completion."""


def _answer_match_params(cfg: GroveConfig) -> Any | None:
    """The parameters of the ``answer_match`` reward that decides accuracy (the accuracy reward when it is one,
    else the first ``answer_match``); ``None`` without one."""
    matches = [r for r in cfg.rewards if r.id == "answer_match"]
    if not matches:
        return None
    accuracy = cfg.accuracy_reward_name
    chosen = next((r for r in matches if accuracy in reward_column_names(r)), matches[0])
    return chosen.validated(REWARD_FUNCTIONS)


def arithmetic_completion(example: Example, cfg: GroveConfig) -> str:
    """The result of an ``arithmetic`` example in the form the config's reward reads (see the module docstring)."""
    value = example.answer
    params = _answer_match_params(cfg)
    extract = getattr(params, "extract", "last_number")
    if extract == "answer_tag":
        return f"<{params.tag}>{value}</{params.tag}>"
    if extract == "boxed":
        return f"\\boxed{{{value}}}"
    if extract == "full":
        return value
    asks_for_tags = "<answer>" in example.prompt_text or "<answer>" in (cfg.rollout.system_prompt or "")
    return f"<answer>{value}</answer>" if asks_for_tags else value


def _answer_column(example: Example) -> str:
    return example.answer


def gold_completions(task: Task, cfg: GroveConfig) -> GoldCompletion:
    """The function giving each example of ``task`` (built from ``cfg.task``) its gold completion."""
    own = getattr(task, "demonstration", None)
    if callable(own):
        return own
    task_id = cfg.task.id
    if task_id == "arithmetic":
        return lambda example: arithmetic_completion(example, cfg)
    if task_id in ("jsonl", "hf_dataset"):
        return _answer_column
    raise NoGoldCompletionError(
        f"task {task_id!r} has no gold completions to demonstrate: give the task object a method "
        "`demonstration(example) -> str` returning a correct completion of an example, or write the completions "
        "yourself as a prompt/completion JSONL file for grove sft. Tasks with built-in gold completions: arithmetic, "
        "jsonl, hf_dataset, and those whose task object has that method (clinical_hpo)"
    )
