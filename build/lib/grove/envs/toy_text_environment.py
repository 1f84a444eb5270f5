"""The base of gymnasium's toy-text worlds rendered as text (:mod:`grove.wings.games.frozenlake`,
:mod:`grove.wings.games.cliffwalking`, :mod:`grove.wings.games.taxi`) for language-model agents.

The dynamics, rewards and maps are gymnasium's (``gymnasium.envs.toy_text``; Gymnasium: "Gymnasium: A Standard
Interface for Reinforcement Learning Environments"); the text rendering is grove's, drawn from the state (no
ANSI colours). The anchor key is gymnasium's integer state, which is the whole Markov state of these worlds
(the map is fixed within a task), so equal keys are the same state whatever the action order.

Task ids: ``frozenlake`` and ``cliffwalking`` train on ids ``0..n-1`` and evaluate on ids from
:data:`EVAL_TASK_OFFSET` up; with ``frozenlake`` ``maps="random"`` the id seeds the map
(``generate_random_map(size, p, seed=task_id)``) and no held-out map is ever trained on (``held_out`` says which
side gives way: :class:`grove.wings.games.frozenlake.FrozenLakeParams`). ``taxi`` ids index a fixed shuffle of its 300
start states: training takes the first ids, evaluation the last ones, so no evaluation start state is ever
trained on. ``reset(task_id, seed)`` seeds gymnasium's generator with a hash of both (it only matters for the
slippery / rainy variants).

Oracle (:mod:`grove.envs.oracle`): :meth:`ToyTextEnvironment.oracle_action` plans on the wrapped env's transition
table (:func:`grove.envs.transition_table_plans.plan_transition_table`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Hashable, Sequence
from typing import Any

from grove.envs.actions import normalize_action, unknown_action_step
from grove.envs.base import Observation, Transition
from grove.envs.transition_table_plans import TablePlan, TransitionKind, plan_transition_table

__all__ = [
    "ANSWER_FORMAT",
    "EVAL_TASK_OFFSET",
    "GYMNASIUM",
    "ToyTextEnvironment",
    "grid_lines",
    "reset_seed",
    "where_text",
]

GYMNASIUM = "Gymnasium: A Standard Interface for Reinforcement Learning Environments (Towers et al., 2024)"

EVAL_TASK_OFFSET = 100_000
"""First evaluation task id of ``frozenlake`` and ``cliffwalking`` (training ids are ``0..n-1``)."""

ANSWER_FORMAT = (
    "Think briefly, then answer with exactly one action inside <action>...</action>, for example "
    "<action>{example}</action>. You may also give the number of a listed action, for example <action>1</action>."
)


def reset_seed(task_id: int, seed: int) -> int:
    """A 32-bit generator seed that depends on both the task and the episode seed (stable across runs)."""
    return int.from_bytes(hashlib.blake2b(f"{task_id}:{seed}".encode(), digest_size=4).digest(), "big")


class ToyTextEnvironment:
    """One copy of a toy-text world: a gymnasium env plus a text renderer.

    Subclasses set ``actions`` (in the gymnasium action order) and implement :meth:`_make` (the gymnasium env
    of a task), :meth:`_render` and :meth:`_outcome`; :meth:`_world` (default: one env for every task) says
    when a task needs another env (another map), :meth:`_start` adjusts the start state. An unknown command is a no-op step (reward 0, counted
    towards ``max_steps``) with ``info["invalid_action"] = True``; the action parsers normally prevent it.
    """

    actions: tuple[str, ...] = ()

    def __init__(self, params: Any) -> None:
        """``params``: the game's parameters (a pydantic model with ``max_steps``), kept as ``self.params``."""
        self.params = params
        self.max_steps = params.max_steps
        self._env: Any = None
        self._world_key: Hashable = None
        self._steps = 0
        self._done = True
        self._index = {a: i for i, a in enumerate(self.actions)}
        self._plan: tuple[Any, TablePlan] | None = None  # (the gymnasium env planned on, its plan)

    # -- to implement ------------------------------------------------------------------------------------
    def _make(self, task_id: int) -> Any:
        raise NotImplementedError

    def _world(self, task_id: int) -> Hashable:
        """What distinguishes the gymnasium env of ``task_id`` (its map): a new one is made when it changes."""
        return None

    def _start(self, task_id: int) -> None:
        """Hook after gymnasium's reset (e.g. to place Taxi in the task's start state)."""

    def _render(self, note: str) -> str:
        raise NotImplementedError

    def _outcome(self, reward: float, terminated: bool) -> tuple[bool, bool, str]:
        """``(won, lost, note)`` of the last step; ``note`` is a sentence shown above the grid, or ``""``."""
        raise NotImplementedError

    def _transition_kind(self, next_state: int, reward: float, terminated: bool) -> TransitionKind:
        """What an outcome of gymnasium's transition table does, for the oracle (:func:`plan_transition_table`):
        ``"win"`` (the goal), ``"loss"`` (what the expert never steps into) or ``"move"``."""
        raise NotImplementedError

    # -- Environment protocol ----------------------------------------------------------------------------
    @property
    def state(self) -> int:
        """The gymnasium integer state (the anchor key)."""
        return int(self._env.unwrapped.s)

    def reset(self, task_id: int, seed: int) -> Observation:
        world = self._world(task_id)
        if self._env is None or self._world_key != world:
            self._env, self._world_key = self._make(task_id), world
        self._env.reset(seed=reset_seed(task_id, seed))
        self._start(task_id)
        self._steps, self._done = 0, False
        return self._observe("")

    def step(self, action: str) -> Transition:
        if self._done:
            raise RuntimeError("step() after the episode ended; call reset() first")
        self._steps += 1
        truncated = self._steps >= self.max_steps
        key = normalize_action(action)
        if key not in self._index:
            self._done = truncated
            return unknown_action_step(action, self.actions, truncated, self._observe, lost=False)
        _, reward, terminated, _, _ = self._env.step(self._index[key])
        won, lost, note = self._outcome(float(reward), bool(terminated))
        self._done = bool(terminated) or truncated
        info = {"won": won, "lost": lost, "truncated": truncated and not terminated}
        return Transition(self._observe(note), float(reward), self._done, info)

    def _observe(self, note: str) -> Observation:
        return Observation(self._render(note), self.state, self.actions)

    # -- oracle (grove.envs.oracle) ------------------------------------------------------------------------
    def oracle_action(self) -> str | None:
        """The expert's command from the current state: the plan of :func:`plan_transition_table` on the wrapped
        env's table (a shortest safe path when deterministic, value iteration over the steps left when not);
        ``None`` once the episode is over or the goal cannot be reached before truncation. The plan is made
        once per map."""
        if self._done or self._env is None:
            return None
        if self._plan is None or self._plan[0] is not self._env:
            self._plan = (self._env, plan_transition_table(self._env.unwrapped.P, self._transition_kind, self.max_steps))
        action = self._plan[1].action(self.state, self.max_steps - self._steps)
        return None if action is None else self.actions[action]


def grid_lines(cells: Sequence[Sequence[str]]) -> list[str]:
    """A grid's rows as lines of space-separated cells."""
    return [" ".join(row) for row in cells]


def where_text(row: int, col: int) -> str:
    """A cell's place as the text says it (1-based row and column)."""
    return f"row {row + 1}, column {col + 1}"
