"""The environment seam: what a multi-turn environment gives the agent rollout, and what it takes.

An :class:`Environment` is one copy of a world. The rollout resets ``G`` copies to the same
``(task_id, seed)`` (a *group*), then steps each with the action parsed from the model's text until
``done`` or the turn limit. Implementations are registered in :data:`grove.envs.registry.ENVIRONMENTS`
as factories ``fn(params) -> EnvironmentSuite``; user environments are found by import path
(``"my_pkg.my_module:my_factory"``), like rewards.

The **anchor key** of an observation is the exact canonical environment state (hashable; equal keys mean
the same state whatever history led there). GiGPO ("Group-in-Group Policy Optimization for LLM Agent
Training") groups the actions taken from equal anchor keys within a group to compute step advantages.

The rollout checks what ``reset`` and ``step`` return before using it (:mod:`grove.experience.step_results`): a
result of another type (an observation that is a ``str``, ``done="no"``, ``info=None``, gymnasium's 5-tuple) ends
that copy's trajectory as an environment error, as an exception, a ``sys.exit`` or a hang past
``env.step_timeout_s`` do; the run goes on (docs/environments.md, "When an environment misbehaves").
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol, runtime_checkable

__all__ = [
    "Environment",
    "EnvironmentSuite",
    "EnvironmentUnavailableError",
    "EpisodeRecord",
    "Observation",
    "Transition",
]


class EnvironmentUnavailableError(RuntimeError):
    """An environment could not be started or reached (e.g. a hub's environment server that does not start). When
    building the environment, it stops the command with one ``error:`` line; during an episode, it ends that
    trajectory as any environment failure does."""


@dataclass(frozen=True)
class Observation:
    """What the model is shown about the current state.

    * ``text``: the observation rendered as text (no history, no template: the rollout adds those);
    * ``anchor``: hashable exact state key (e.g. the integer state of a toy-text env, a hash of sorted
      TextWorld facts, the Sokoban grid text);
    * ``admissible_actions``: the valid commands in this state, when the environment knows them
      (shown to the model and used by the ``admissible`` action parser); ``None`` when it does not;
    * ``images``: pictures of the state for a vision-language policy (file paths, PIL images or ``[H, W(, C)]``
      arrays), shown before the text of the observation's user message; empty for text environments.

    An observation longer than the model's context ends its trajectory, or keeps its end
    (``env.prompt_overflow``).
    """

    text: str
    anchor: Hashable
    admissible_actions: tuple[str, ...] | None = None
    images: tuple[Any, ...] = ()


class Transition(NamedTuple):
    """``env.step(action)``'s result; unpacks as ``observation, reward, done, info``.

    ``reward`` is a finite real number (a bool, int, float or numpy scalar), ``done`` a bool (numpy's too; never a
    string or a number), ``info`` a mapping. ``info`` may carry ``"won": bool`` (the episode succeeded; success rate is read from it),
    ``"lost": bool`` and anything else the environment wants logged.
    """

    observation: Observation
    reward: float
    done: bool
    info: dict[str, Any]


@runtime_checkable
class Environment(Protocol):
    """One copy of a world. ``reset`` must be deterministic in ``(task_id, seed)``."""

    def reset(self, task_id: int, seed: int) -> Observation: ...

    def step(self, action: str) -> Transition: ...


@dataclass(frozen=True)
class EpisodeRecord:
    """What an environment's ``summarize`` hook sees of one played episode: the task, per turn the ``info``
    the environment returned (``{}`` for a turn whose action could not be parsed: the environment was not
    stepped) and whether the action was valid, and how the episode ended."""

    task_id: int
    infos: tuple[Mapping[str, Any], ...]
    valid: tuple[bool, ...]
    won: bool
    truncated: bool


@dataclass(frozen=True)
class EnvironmentSuite:
    """A registered environment: how to make copies, which tasks train and which are held out.

    * ``make``: a fresh environment (not yet reset); called once per trajectory slot;
    * ``train_tasks`` / ``eval_tasks``: disjoint task ids (evaluation never sees a training task);
    * ``instructions``: the rules and the action format, the first part of every prompt;
    * ``name``: for logs and docs;
    * ``summarize``: optional, the environment's own metrics of a list of episodes (e.g. routing accuracy
      per knowledge base); logged every training step and reported by evaluation;
    * ``extra_eval_tasks``: optional named held-out task sets evaluated besides ``eval_tasks`` (e.g. an
      out-of-distribution set); their metrics are reported under ``<name>/``.
    """

    name: str
    make: Callable[[], Environment]
    train_tasks: Sequence[int]
    eval_tasks: Sequence[int]
    instructions: str
    metadata: dict[str, Any] = field(default_factory=dict)
    summarize: Callable[[Sequence[EpisodeRecord]], dict[str, float]] | None = None
    extra_eval_tasks: Mapping[str, Sequence[int]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.train_tasks:
            raise ValueError(f"environment {self.name!r} has no training tasks")
        train = set(self.train_tasks)
        for label, tasks in {"eval": self.eval_tasks, **self.extra_eval_tasks}.items():
            overlap = train & set(tasks)
            if overlap:
                raise ValueError(
                    f"environment {self.name!r}: tasks {sorted(overlap)[:5]} are both train and {label}"
                )
