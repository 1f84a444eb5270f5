"""``verifiers_rubric``: a completion scored by the reward functions of its verifiers task (verifiers 0.4.0).

A verifiers (``pip install verifiers==0.4.0``, its ``verifiers.v1`` API) task scores a finished trace with its
**rubric**: the ``@vf.reward(weight=w)`` methods of its ``vf.Task`` class plus the rewards its ``TaskConfig`` plugs
in (``Task.hooks("reward")``); verifiers' reward of a trace is ``Σ_k w_k · score_k`` (``Trace.reward``). This reward
returns one **objective per reward function**, named after it, valued by the function's unweighted score::

    {"correct_answer": 1.0, "answer_format": 0.0}

and declares the rubric's weights (``objective_weights()`` of its parameters: ``{"correct_answer": 1.0,
"answer_format": 0.2}``). grove weighs objective ``k`` by ``weight × objective_weights[k]`` (the reward block's keys),
so with ``weight: 1`` and ``objective_weights`` equal to the rubric's weights the weighted sum of the objectives is
verifiers' ``Trace.reward`` on the same completion, and the reward combiners (GDPO, MO-GRPO, ...) see the weights.

Each completion is scored on a trace built as verifiers records a one-segment rollout: the row's system prompt and
prompt messages, then the completion as the sampled assistant message (``trace.last_reply`` is the completion,
stripped). The row comes from the ``verifiers_task`` column of the ``verifiers`` task (the whole ``TaskData``); the
task is rebuilt with the taskset's task class and config. Reward functions run as verifiers runs them (arguments
injected by name: ``task`` is the row, ``trace`` the trace), concurrently in an asyncio event loop; synchronous ones
are called directly. There is no separate parser in verifiers 0.4.0: each reward function reads the reply itself.

Not scored, because grove runs no sandbox: rewards that need a ``runtime`` argument (left out of the objectives,
as ``Task.score`` leaves them out without a runtime) and LLM judges (``TaskConfig.judges``: an error). A reward
returning keyed scores (a mapping) is an error: the objectives are declared before any call.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import inspect
import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from grove.hubs.verifiers.verifiers_loading import import_verifiers, load_verifiers
from grove.registry import REWARD_FUNCTIONS
from grove.rewards.values import dataset_column

TASK_COLUMN = "verifiers_task"

log = logging.getLogger("grove.rewards")


class VerifiersRubricError(RuntimeError):
    """A verifiers reward function failed on a completion (the message names the function and the task)."""


@dataclass(frozen=True)
class Rubric:
    """The scorable reward functions of a taskset's tasks: names (the objectives), weights, and the task class and
    config that rebuild a task from its row."""

    task_type: type
    task_config: Any
    names: tuple[str, ...]
    weights: tuple[float, ...]
    needs_runtime: tuple[str, ...]

    def task(self, row: Mapping[str, Any]) -> Any:
        """The ``vf.Task`` of a ``verifiers_task`` row."""
        return self.task_type(self.task_type.data_type().model_validate(row), self.task_config)


def _needs_runtime(fn: Any) -> bool:
    param = inspect.signature(fn).parameters.get("runtime")
    return param is not None and param.default is inspect.Parameter.empty


@functools.lru_cache(maxsize=16)
def _rubric(environment: str, kwargs_json: str) -> Rubric:
    taskset = load_verifiers(environment, json.loads(kwargs_json), "verifiers_rubric")[1]
    first = next(iter(taskset.take(1)), None)
    if first is None:
        raise ValueError(f"verifiers_rubric.environment {environment!r}: the taskset has no tasks")
    if first.config.judges:
        raise ValueError(
            f"verifiers_rubric.environment {environment!r}: its tasks plug LLM judges (TaskConfig.judges), which need "
            "a model client grove does not run; remove them from the task config"
        )
    hooks = first.hooks("reward")
    scorable = [fn for fn in hooks if not _needs_runtime(fn)]
    if not scorable:
        why = "every one of its reward functions needs a runtime" if hooks else "it has no @vf.reward function"
        raise ValueError(f"verifiers_rubric.environment {environment!r}: task {type(first).__name__} cannot be scored: {why}")
    if len(scorable) < len(hooks):
        log.warning("verifiers_rubric: %s's reward functions %s need a runtime (a sandbox grove does not run); they are "
                    "not objectives", type(first).__name__, [fn.__name__ for fn in hooks if _needs_runtime(fn)])
    return Rubric(
        task_type=type(first),
        task_config=first.config,
        names=tuple(fn.__name__ for fn in scorable),
        weights=tuple(float(getattr(fn, "_vf_weight", 1.0)) for fn in scorable),
        needs_runtime=tuple(fn.__name__ for fn in hooks if _needs_runtime(fn)),
    )


def rubric_of(environment: str, kwargs: Mapping[str, Any] | None = None) -> Rubric:
    """The rubric of the verifiers environment ``environment`` (cached per process)."""
    return _rubric(environment, json.dumps(dict(kwargs or {}), sort_keys=True, default=str))


class VerifiersRubricParams(BaseModel):
    """Parameters of the ``verifiers_rubric`` reward: the environment, as in the ``verifiers`` task."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    environment: str = Field(
        description="The verifiers environment whose rubric scores: as the verifiers task's 'environment'."
    )
    kwargs: dict[str, Any] = Field(default_factory=dict, description="As the verifiers task's 'kwargs'.")

    def objective_names(self) -> tuple[str, ...]:
        """One objective per reward function of the rubric, named after it, in verifiers' order (priority, name)."""
        return rubric_of(self.environment, self.kwargs).names

    def objective_weights(self) -> dict[str, float]:
        """The rubric's weight of each objective (``@vf.reward(weight=...)``): the ``objective_weights`` with which
        grove's weighted sum equals verifiers' reward."""
        rubric = rubric_of(self.environment, self.kwargs)
        return dict(zip(rubric.names, rubric.weights, strict=True))


def completion_trace(task: Any, completion: str) -> Any:
    """The ``vf.Trace`` of a one-segment rollout of ``task`` that answered ``completion``: the row's system prompt
    and prompt (or its string ``question``) as messages, then the completion as the sampled assistant message."""
    vf = import_verifiers("the verifiers_rubric reward")
    from verifiers.v1.graph import MessageNode
    from verifiers.v1.state import state_cls
    from verifiers.v1.trace import AgentInfo, TraceTask

    data = task.data
    trace = vf.Trace(
        task=TraceTask(type=type(task).__name__, data=data, key=task.key, hash=task.hash),
        agent=AgentInfo(config=vf.AgentConfig()),
        state=state_cls(type(task))(),
    )
    prompt = data.prompt if data.prompt is not None else getattr(data, "question", None)
    messages = [vf.SystemMessage(content=data.system_prompt)] if data.system_prompt else []
    if isinstance(prompt, str):
        messages.append(vf.UserMessage(content=prompt))
    elif prompt is not None:
        messages.extend(prompt)
    messages.append(vf.AssistantMessage(content=completion))
    for i, message in enumerate(messages):
        trace.nodes.append(
            MessageNode(parent=i - 1 if i else None, message=message, sampled=i == len(messages) - 1)
        )
    return trace


async def _call(fn: Any, available: dict[str, Any], task: Any) -> Any:
    from verifiers.v1.utils.decorators import invoke

    try:
        result = invoke(fn, available)
        if inspect.isawaitable(result):
            result = await result
    except Exception as exc:  # noqa: BLE001 - re-raised naming the reward function and the task
        raise VerifiersRubricError(
            f"verifiers reward function {fn.__name__!r} (objective {fn.__name__!r} of verifiers_rubric) of task "
            f"{type(task).__name__} {task.data.idx} raised {type(exc).__name__}: {exc}"
        ) from exc
    if isinstance(result, Mapping):
        raise VerifiersRubricError(
            f"verifiers reward function {fn.__name__!r} returned keyed scores {sorted(result)}; verifiers_rubric "
            "scores one objective per reward function: return one number"
        )
    return result


async def score_completion(rubric: Rubric, task: Any, completion: str) -> dict[str, float | None]:
    """``{objective: score}`` of one completion (``None`` where a reward function returned ``None``)."""
    trace = completion_trace(task, completion)
    available = {"task": task.data, "trace": trace}
    fns = [fn for fn in task.hooks("reward") if fn.__name__ in rubric.names]
    results = await asyncio.gather(*(_call(fn, available, task) for fn in fns))
    values = {fn.__name__: (None if r is None else float(r)) for fn, r in zip(fns, results, strict=True)}
    return {name: values.get(name) for name in rubric.names}


def run_coroutine(coro: Any) -> Any:
    """Run ``coro`` to completion: in a fresh event loop, or in another thread when one runs in this thread."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coro).result()


@REWARD_FUNCTIONS.register(
    "verifiers_rubric",
    params=VerifiersRubricParams,
)
def verifiers_rubric(
    prompts: Sequence[Any], completions: Sequence[str], *, params: VerifiersRubricParams, **columns: Any
) -> list[dict[str, float | None]]:
    """Each completion's score by every reward function of its verifiers task (one dict per sample)."""
    rubric = rubric_of(params.environment, params.kwargs)
    rows = dataset_column(
        columns, TASK_COLUMN, len(completions), reward="verifiers_rubric", source="task verifiers"
    )
    tasks = [rubric.task(row) for row in rows]

    async def score_all() -> list[dict[str, float | None]]:
        return list(await asyncio.gather(*(score_completion(rubric, t, c) for t, c in zip(tasks, completions, strict=True))))

    return run_coroutine(score_all())
