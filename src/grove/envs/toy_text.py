"""Gymnasium's toy-text worlds (FrozenLake, CliffWalking, Taxi) rendered as text for language-model agents.

The dynamics, rewards and maps are gymnasium's (``gymnasium.envs.toy_text``; Gymnasium: "Gymnasium: A Standard
Interface for Reinforcement Learning Environments"); the text rendering is grove's, drawn from the state (no
ANSI colours). The anchor key is gymnasium's integer state, which is the whole Markov state of these worlds
(the map is fixed within a task), so equal keys are the same state whatever the action order.

Task ids: ``frozenlake`` and ``cliffwalking`` train on ids ``0..n-1`` and evaluate on ids from
:data:`EVAL_TASK_OFFSET` up; with ``frozenlake`` ``maps="random"`` the id seeds the map
(``generate_random_map(size, p, seed=task_id)``) and no held-out map is ever trained on (``held_out`` says which
side gives way: :class:`FrozenLakeParams`). ``taxi``
ids index a fixed shuffle of its 300 start states: training takes the first ids, evaluation the last ones, so
no evaluation start state is ever trained on. ``reset(task_id, seed)`` seeds gymnasium's generator with a
hash of both (it only matters for the slippery / rainy variants).

Oracle (:mod:`grove.envs.oracle`): :meth:`ToyTextEnvironment.oracle_action` plans on the wrapped env's transition
table (:func:`plan_transition_table`): a shortest safe path by breadth-first search when every action has one
outcome, finite-horizon value iteration on gymnasium's reward over the steps left when moves are random.
"""

from __future__ import annotations

import hashlib
from collections import deque
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from grove.envs.actions import normalize_action
from grove.envs.base import EnvironmentSuite, Observation, Transition
from grove.registry import ENVIRONMENTS

__all__ = [
    "EVAL_TASK_OFFSET",
    "CliffWalkingParams",
    "FrozenLakeParams",
    "TablePlan",
    "TaxiParams",
    "ToyTextEnvironment",
    "cliffwalking_suite",
    "frozenlake_suite",
    "plan_transition_table",
    "taxi_suite",
]

GYMNASIUM = "Gymnasium: A Standard Interface for Reinforcement Learning Environments (Towers et al., 2024)"
SUTTON_BARTO = "Reinforcement Learning: An Introduction (Sutton and Barto, 2018)"
MAXQ = "Hierarchical Reinforcement Learning with the MAXQ Value Function Decomposition (Dietterich, 2000)"

EVAL_TASK_OFFSET = 100_000
"""First evaluation task id of ``frozenlake`` and ``cliffwalking`` (training ids are ``0..n-1``)."""

_ANSWER_FORMAT = (
    "Think briefly, then answer with exactly one action inside <action>...</action>, for example "
    "<action>{example}</action>. You may also give the number of a listed action, for example <action>1</action>."
)


def _reset_seed(task_id: int, seed: int) -> int:
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

    def __init__(self, max_steps: int) -> None:
        self.max_steps = max_steps
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
        self._env.reset(seed=_reset_seed(task_id, seed))
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
            note = f"Unknown action {action!r}; the actions are: {', '.join(self.actions)}."
            info = {"won": False, "lost": False, "truncated": truncated, "invalid_action": True}
            return Transition(self._observe(note), 0.0, truncated, info)
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


# ------------------------------------------------------------------------------------------------------
# Planning on gymnasium's transition table (the oracle)
# ------------------------------------------------------------------------------------------------------

TransitionKind = Literal["win", "loss", "move"]
"""What one outcome of an action does: ends the episode with success, is a failure the expert never risks in a
deterministic world (a hole, the cliff), or moves on to the next state."""

UNREACHABLE = np.iinfo(np.int64).max // 2
"""Distance of a state from which no safe path reaches the goal."""

VALUE_ITERATION_TOLERANCE = 1e-10
"""Value iteration stops early once no state value changes by more than this: the policy is stationary from
there on."""


@dataclass(frozen=True)
class TablePlan:
    """The expert's plan of one transition table, for every state and number of steps left.

    * ``distance[s]``: fewest steps from ``s`` to a winning outcome along outcomes of positive probability that
      are not losses (:data:`UNREACHABLE` when there is none);
    * ``policy[h, s]``: the action to take in ``s`` with ``h`` steps left (row ``h`` is the last row when
      ``h`` exceeds it: deterministic tables and converged value iteration have a single stationary row).
    """

    distance: np.ndarray
    policy: np.ndarray

    def action(self, state: int, steps_left: int) -> int | None:
        """The action index to take in ``state``; ``None`` when the goal cannot be reached in ``steps_left``."""
        if steps_left < 1 or self.distance[state] > steps_left:
            return None
        return int(self.policy[min(steps_left, len(self.policy) - 1), state])


Outcomes = Mapping[int, Mapping[int, Sequence[tuple[float, int, float, bool]]]]
"""gymnasium's toy-text table ``P[state][action] -> [(probability, next_state, reward, terminated)]``."""


def plan_transition_table(
    table: Outcomes, kind: Callable[[int, float, bool], TransitionKind], horizon: int
) -> TablePlan:
    """Plan an expert on gymnasium's transition table ``P`` (``P[s][a] -> [(p, next, reward, terminated)]``).

    ``kind(next_state, reward, terminated)`` classifies an outcome. When every action has a single outcome the
    world is deterministic and the policy follows a shortest path to a win that takes no ``"loss"`` outcome
    (breadth-first search backwards from the winning transitions; ties go to the lower action index). Otherwise
    the policy is finite-horizon value iteration on gymnasium's reward (Sutton and Barto, 2018, section 4.4):
    ``Q_h(s, a) = E[r + V_{h-1}(s')]`` (no continuation after a terminating outcome), maximised for ``h = 1 ..
    horizon`` steps left; with FrozenLake's reward (1 at the goal, else 0) that is the probability of reaching
    the goal in time. ``distance`` (breadth-first over outcomes of positive probability that are not losses) says
    when no action can succeed any more.
    """
    states = len(table)
    actions = len(table[0])
    outcomes = [
        [[(float(p), int(n), float(r), bool(t)) for p, n, r, t in table[s][a] if p > 0] for a in range(actions)]
        for s in range(states)
    ]
    kinds = [[[kind(n, r, t) for _, n, r, t in outcomes[s][a]] for a in range(actions)] for s in range(states)]
    distance = np.full(states, UNREACHABLE, dtype=np.int64)
    predecessors: list[list[int]] = [[] for _ in range(states)]
    queue: deque[int] = deque()
    for s in range(states):
        for a in range(actions):
            for (_, n, _, _), k in zip(outcomes[s][a], kinds[s][a], strict=True):
                if k == "win" and distance[s] != 1:
                    distance[s] = 1
                    queue.append(s)
                elif k == "move":
                    predecessors[n].append(s)
    while queue:
        n = queue.popleft()
        for s in predecessors[n]:
            if distance[s] == UNREACHABLE:
                distance[s] = distance[n] + 1
                queue.append(s)
    deterministic = all(len(outcomes[s][a]) == 1 for s in range(states) for a in range(actions))
    if deterministic:
        cost = np.full((states, actions), UNREACHABLE, dtype=np.int64)
        for s in range(states):
            for a in range(actions):
                (_, n, _, _), k = outcomes[s][a][0], kinds[s][a][0]
                cost[s, a] = 1 if k == "win" else (1 + distance[n] if k == "move" else UNREACHABLE)
        return TablePlan(distance, cost.argmin(axis=1)[None, :])
    reward = np.zeros((states, actions))
    going_on = np.zeros((states * actions, states))
    for s in range(states):
        for a in range(actions):
            for p, n, r, t in outcomes[s][a]:
                reward[s, a] += p * r
                if not t:
                    going_on[s * actions + a, n] += p
    value = np.zeros(states)
    rows = [np.zeros(states, dtype=np.int64)]  # row 0: no step left (never read)
    for _ in range(horizon):
        q = reward + (going_on @ value).reshape(states, actions)
        rows.append(q.argmax(axis=1))
        new = q.max(axis=1)
        converged = float(np.abs(new - value).max()) <= VALUE_ITERATION_TOLERANCE
        value = new
        if converged:
            break
    return TablePlan(distance, np.stack(rows))


def _grid_lines(cells: Sequence[Sequence[str]]) -> list[str]:
    return [" ".join(row) for row in cells]


def _where(row: int, col: int) -> str:
    return f"row {row + 1}, column {col + 1}"


# ------------------------------------------------------------------------------------------------------
# FrozenLake
# ------------------------------------------------------------------------------------------------------


class FrozenLakeParams(BaseModel):
    """Parameters of the ``frozenlake`` environment."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    size: int = Field(
        4, ge=2, le=12, description="Side of the square lake: 4 or 8 for the fixed maps; 2..12 for random maps."
    )
    slippery: bool = Field(
        False, description="Gymnasium's slippery ice: the move goes sideways with probability 2/3."
    )
    maps: Literal["fixed", "random"] = Field(
        "fixed",
        description="'fixed': gymnasium's standard map of that size (tasks then differ only by seed); 'random': "
        "generate_random_map(size, p, seed=task_id), one map per task.",
    )
    p: float = Field(0.8, gt=0.0, le=1.0, description="Probability that a tile is frozen, for maps='random'.")
    max_steps: int = Field(100, ge=1, description="Steps before the episode is truncated.")
    num_train_tasks: int = Field(
        1000,
        ge=1,
        description="Training task ids from 0 up; with maps='random' and held_out='representative', ids whose map "
        "equals a held-out map are skipped.",
    )
    num_eval_tasks: int = Field(
        100,
        ge=0,
        description="Held-out task ids from 100000 up; with maps='random' and held_out='novel', ids whose map "
        "equals a training map are skipped.",
    )
    held_out: Literal["representative", "novel"] = Field(
        "representative",
        description="With maps='random', which side gives way so that no held-out map is trained on. "
        "'representative': the held-out maps are the generator's first num_eval_tasks draws from id 100000 "
        "(a fair sample of the map distribution) and training skips every id whose map equals one of them. "
        "'novel': training takes ids 0..num_train_tasks-1 and the held-out maps are the first that differ from "
        "all of them; small lakes repeat their common maps, so these are the rarer ones (at 4x4 with p=0.8: "
        "3.7 holes on average against 2.7, none with fewer than 2) and held-out success measures harder maps.",
    )
    render: Literal["full", "compact", "local"] = Field(
        "full",
        description="'full': each observation has a heading, the grid, a legend and both positions in words "
        "(≈ 85 tokens at size 4); 'compact': the grid and your position only (≈ 30 tokens), the legend and the "
        "numbered actions move to the instructions (so env.show_admissible_actions: false loses nothing). Compact "
        "observations cost less prefill per turn and fewer training tokens. 'local': the compact observation plus "
        "what each move leads to ('Left: edge. Down: hole. Right: ice. Up: edge.', ≈ 15 tokens more), so whether a "
        "move falls into a hole is read from one line instead of worked out from the grid.",
    )

    @model_validator(mode="after")
    def _fixed_maps_exist(self) -> FrozenLakeParams:
        if self.maps == "fixed" and self.size not in (4, 8):
            raise ValueError(f"size {self.size}: gymnasium's fixed maps are 4x4 and 8x8; use maps: random for other sizes")
        return self


@lru_cache(maxsize=4096)
def _frozenlake_map(size: int, maps: str, p: float, task_id: int) -> tuple[str, ...]:
    from gymnasium.envs.toy_text.frozen_lake import MAPS, generate_random_map

    if maps == "fixed":
        return tuple(MAPS[f"{size}x{size}"])
    return tuple(generate_random_map(size=size, p=p, seed=task_id))


def _frozenlake_tasks(params: FrozenLakeParams) -> tuple[Sequence[int], Sequence[int]]:
    """Training and held-out task ids (:attr:`FrozenLakeParams.held_out`): with random maps no held-out map
    equals a training map; with the fixed map the two id ranges simply differ."""
    if params.maps != "random":
        return range(params.num_train_tasks), range(EVAL_TASK_OFFSET, EVAL_TASK_OFFSET + params.num_eval_tasks)

    def draw(first: int, count: int, excluded: set[tuple[str, ...]], side: str, other: str) -> list[int]:
        ids: list[int] = []
        task = first
        while len(ids) < count:
            if task - first >= 100 * count + 10_000:
                raise ValueError(
                    f"frozenlake: only {len(ids)} {side} maps differ from the {other}; lower num_train_tasks or "
                    "num_eval_tasks, or raise size"
                )
            if _frozenlake_map(params.size, "random", params.p, task) not in excluded:
                ids.append(task)
            task += 1
        return ids

    def maps(ids: Sequence[int]) -> set[tuple[str, ...]]:
        return {_frozenlake_map(params.size, "random", params.p, t) for t in ids}

    if params.held_out == "representative":
        held_out = range(EVAL_TASK_OFFSET, EVAL_TASK_OFFSET + params.num_eval_tasks)
        return draw(0, params.num_train_tasks, maps(held_out), "training", f"{params.num_eval_tasks} held-out maps"), held_out
    train = range(params.num_train_tasks)
    return train, draw(EVAL_TASK_OFFSET, params.num_eval_tasks, maps(train), "held-out", f"{params.num_train_tasks} training maps")


_FROZENLAKE_LEGEND = "Legend: P = you, . = frozen ice (safe), H = hole, G = goal."
_FROZENLAKE_TILES = {"S": "ice", "F": "ice", "H": "hole", "G": "goal"}


def _frozenlake_neighbours(desc: np.ndarray, row: int, col: int) -> str:
    """What each move leads to, in the actions' order: ``"Left: edge. Down: hole. Right: ice. Up: edge."``."""
    parts = []
    for name, (dr, dc) in zip(FrozenLakeEnvironment.actions, ((0, -1), (1, 0), (0, 1), (-1, 0)), strict=True):
        r, c = row + dr, col + dc
        inside = 0 <= r < desc.shape[0] and 0 <= c < desc.shape[1]
        parts.append(f"{name.capitalize()}: {_FROZENLAKE_TILES[desc[r, c].decode()] if inside else 'edge'}.")
    return " ".join(parts)


class FrozenLakeEnvironment(ToyTextEnvironment):
    """FrozenLake: walk from the start (top left) to the goal (bottom right) without falling into a hole."""

    actions = ("left", "down", "right", "up")

    def __init__(self, params: FrozenLakeParams) -> None:
        super().__init__(params.max_steps)
        self.params = params

    def _world(self, task_id: int) -> Hashable:
        return task_id if self.params.maps == "random" else None

    def _make(self, task_id: int) -> Any:
        from gymnasium.envs.toy_text.frozen_lake import FrozenLakeEnv

        desc = _frozenlake_map(self.params.size, self.params.maps, self.params.p, task_id)
        return FrozenLakeEnv(desc=list(desc), is_slippery=self.params.slippery)

    def _outcome(self, reward: float, terminated: bool) -> tuple[bool, bool, str]:
        tile = self._tile()
        if terminated and tile == "G":
            return True, False, "You reached the goal!"
        if terminated and tile == "H":
            return False, True, "You fell into a hole. The episode is over."
        return False, False, ""

    def _transition_kind(self, next_state: int, reward: float, terminated: bool) -> TransitionKind:
        if terminated:
            return "win" if reward > 0 else "loss"  # the goal pays 1; a hole (or staying on G/H) pays 0
        return "move"

    def _tile(self) -> str:
        desc = self._env.unwrapped.desc
        row, col = divmod(self.state, desc.shape[1])
        return desc[row, col].decode()

    def _render(self, note: str) -> str:
        desc = self._env.unwrapped.desc
        row, col = divmod(self.state, desc.shape[1])
        cells = [[{"S": ".", "F": "."}.get(c.decode(), c.decode()) for c in line] for line in desc]
        cells[row][col] = "P"
        lines = [note] if note else []
        if self.params.render in ("compact", "local"):
            where = f"You are at {_where(row, col)}."
            if self.params.render == "local":
                where += " " + _frozenlake_neighbours(desc, row, col)
            return "\n".join([*lines, *_grid_lines(cells), where])
        lines += ["The frozen lake (row 1 is the top, column 1 the left):", *_grid_lines(cells)]
        lines += [
            _FROZENLAKE_LEGEND,
            f"You are at {_where(row, col)}; the goal is at {_where(*divmod(desc.size - 1, desc.shape[1]))}.",
        ]
        return "\n".join(lines)


@ENVIRONMENTS.register(
    "frozenlake",
    params=FrozenLakeParams,
    paper=GYMNASIUM,
    summary="Gymnasium FrozenLake as a text grid: reach the goal without falling into a hole",
)
def frozenlake_suite(params: FrozenLakeParams) -> EnvironmentSuite:
    """FrozenLake (gymnasium ``FrozenLake-v1``): reward 1 on reaching the goal, else 0; a hole ends the episode."""
    train, eval_tasks = _frozenlake_tasks(params)
    slip = (
        " The ice is slippery: a move may take you sideways instead of the way you chose."
        if params.slippery
        else ""
    )
    instructions = (
        "You are walking on a frozen lake drawn as a grid. Start at the top left and reach the goal G at the "
        "bottom right. Falling into a hole H ends the episode with no reward; reaching the goal gives "
        f"reward 1.{slip} Moving into the edge of the lake leaves you where you are. Actions: left, down, "
        "right, up.\n" + _ANSWER_FORMAT.format(example="right")
    )
    if params.render in ("compact", "local"):  # what compact observations leave out, and the numbered actions
        instructions += (
            "\nEach observation draws the lake row by row, row 1 at the top and column 1 at the left. "
            + _FROZENLAKE_LEGEND
            + " The actions are always listed as: "
            + ", ".join(f"{i}. {a}" for i, a in enumerate(FrozenLakeEnvironment.actions, start=1))
            + "."
        )
    return EnvironmentSuite(
        name="frozenlake",
        make=lambda: FrozenLakeEnvironment(params),
        train_tasks=train,
        eval_tasks=eval_tasks,
        instructions=instructions,
        metadata={"params": params.model_dump(), "actions": FrozenLakeEnvironment.actions},
    )


# ------------------------------------------------------------------------------------------------------
# CliffWalking
# ------------------------------------------------------------------------------------------------------


class CliffWalkingParams(BaseModel):
    """Parameters of the ``cliffwalking`` environment."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    slippery: bool = Field(False, description="Gymnasium's slippery cliff: moves sometimes go sideways.")
    max_steps: int = Field(100, ge=1, description="Steps before the episode is truncated.")
    num_train_tasks: int = Field(
        100, ge=1, description="Training task ids 0..n-1 (one map: tasks differ only by the generator seed)."
    )
    num_eval_tasks: int = Field(10, ge=0, description="Held-out task ids from 100000 up.")


class CliffWalkingEnvironment(ToyTextEnvironment):
    """CliffWalking: walk along a 4×12 grid from the bottom left to the bottom right without stepping off the cliff."""

    actions = ("up", "right", "down", "left")

    def __init__(self, params: CliffWalkingParams) -> None:
        super().__init__(params.max_steps)
        self.params = params

    def _make(self, task_id: int) -> Any:
        from gymnasium.envs.toy_text.cliffwalking import CliffWalkingEnv

        return CliffWalkingEnv(is_slippery=self.params.slippery)

    def _outcome(self, reward: float, terminated: bool) -> tuple[bool, bool, str]:
        if terminated:
            return True, False, "You reached the goal!"
        if reward <= -100:
            return False, False, "You stepped off the cliff (reward -100) and are back at the start."
        return False, False, ""

    def _transition_kind(self, next_state: int, reward: float, terminated: bool) -> TransitionKind:
        if terminated:
            return "win"
        return "loss" if reward <= -100 else "move"  # the cliff sends the walker back to the start

    def _render(self, note: str) -> str:
        env = self._env.unwrapped
        nrow, ncol = env.shape
        cells = [["C" if env._cliff[r, c] else "." for c in range(ncol)] for r in range(nrow)]
        cells[nrow - 1][ncol - 1] = "G"
        row, col = divmod(self.state, ncol)
        cells[row][col] = "P"
        lines = [note] if note else []
        lines += [f"The cliff (row 1 is the top, column 1 the left; {nrow} rows, {ncol} columns):"]
        lines += _grid_lines(cells)
        lines += [
            "Legend: P = you, . = safe ground, C = cliff, G = goal.",
            f"You are at {_where(row, col)}; the goal is at {_where(nrow - 1, ncol - 1)}.",
        ]
        return "\n".join(lines)


@ENVIRONMENTS.register(
    "cliffwalking",
    params=CliffWalkingParams,
    paper=f"{SUTTON_BARTO}; {GYMNASIUM}",
    summary="Gymnasium CliffWalking as a text grid: -1 per step, -100 for stepping off the cliff",
)
def cliffwalking_suite(params: CliffWalkingParams) -> EnvironmentSuite:
    """CliffWalking (gymnasium ``CliffWalking-v1``, Sutton and Barto's example 6.6)."""
    instructions = (
        "You are on a 4-row by 12-column grid with a cliff along the bottom row. Start at the bottom left and "
        "reach the goal G at the bottom right. Every step costs -1; stepping onto the cliff C costs -100 and "
        "sends you back to the start. Moving into the edge of the grid leaves you where you are. Actions: up, "
        "right, down, left.\n" + _ANSWER_FORMAT.format(example="up")
    )
    return EnvironmentSuite(
        name="cliffwalking",
        make=lambda: CliffWalkingEnvironment(params),
        train_tasks=range(params.num_train_tasks),
        eval_tasks=range(EVAL_TASK_OFFSET, EVAL_TASK_OFFSET + params.num_eval_tasks),
        instructions=instructions,
        metadata={"params": params.model_dump(), "actions": CliffWalkingEnvironment.actions},
    )


# ------------------------------------------------------------------------------------------------------
# Taxi
# ------------------------------------------------------------------------------------------------------

TAXI_START_STATES = 300
"""Taxi-v4's start states: 25 taxi cells × 4 passenger stops × 3 other destinations."""


class TaxiParams(BaseModel):
    """Parameters of the ``taxi`` environment."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    rainy: bool = Field(
        False, description="Gymnasium's is_rainy: moves go in the intended direction with probability 0.8."
    )
    max_steps: int = Field(200, ge=1, description="Steps before the episode is truncated (gymnasium: 200).")
    num_train_tasks: int = Field(
        250, ge=1, description="Training task ids 0..n-1 (each a distinct start state)."
    )
    num_eval_tasks: int = Field(
        50, ge=0, description="Held-out task ids 300-n..299: start states never used in training."
    )

    @model_validator(mode="after")
    def _fits(self) -> TaxiParams:
        if self.num_train_tasks + self.num_eval_tasks > TAXI_START_STATES:
            raise ValueError(
                f"num_train_tasks + num_eval_tasks must be at most {TAXI_START_STATES} (Taxi's start states)"
            )
        return self


@lru_cache(maxsize=1)
def _taxi_start_states() -> tuple[int, ...]:
    """Taxi's 300 start states in a fixed shuffled order (task id ``i`` starts in the ``i``-th)."""
    import numpy as np
    from gymnasium.envs.toy_text.taxi import TaxiEnv

    states = np.flatnonzero(TaxiEnv().initial_state_distrib)
    return tuple(int(s) for s in np.random.default_rng(0).permutation(states))


class TaxiEnvironment(ToyTextEnvironment):
    """Taxi: drive to the passenger, pick them up, drive to the destination and drop them off."""

    actions = ("south", "north", "east", "west", "pickup", "dropoff")
    stop_names = ("R", "G", "Y", "B")

    def __init__(self, params: TaxiParams) -> None:
        super().__init__(params.max_steps)
        self.params = params

    def _make(self, task_id: int) -> Any:
        from gymnasium.envs.toy_text.taxi import TaxiEnv

        return TaxiEnv(is_rainy=self.params.rainy)

    def _world(self, task_id: int) -> Hashable:
        if not 0 <= task_id < TAXI_START_STATES:
            raise ValueError(f"taxi task id {task_id} is not in 0..{TAXI_START_STATES - 1}")
        return None

    def _start(self, task_id: int) -> None:
        self._env.unwrapped.s = _taxi_start_states()[task_id]

    def _outcome(self, reward: float, terminated: bool) -> tuple[bool, bool, str]:
        if terminated:
            return True, False, "The passenger was dropped off at the destination!"
        if reward <= -10:
            return False, False, "Illegal pickup or dropoff (reward -10)."
        return False, False, ""

    def _transition_kind(self, next_state: int, reward: float, terminated: bool) -> TransitionKind:
        return "win" if terminated else "move"  # only a correct drop-off terminates

    def _render(self, note: str) -> str:
        env = self._env.unwrapped
        taxi_row, taxi_col, passenger, destination = env.decode(self.state)
        stops = {loc: name for loc, name in zip(env.locs, self.stop_names, strict=True)}
        lines = [note] if note else []
        lines += ["The city (row 1 is the top, column 1 the left):", "+" + "-" * 9 + "+"]
        for r in range(5):
            line = "|"
            for c in range(5):
                line += "T" if (r, c) == (taxi_row, taxi_col) else stops.get((r, c), ".")
                line += "|" if env.desc[r + 1, 2 * c + 2] == b"|" else " "
            lines.append(line)
        lines.append("+" + "-" * 9 + "+")

        def stop(i: int) -> str:
            return f"{self.stop_names[i]} ({_where(*env.locs[i])})"

        here = stops.get((taxi_row, taxi_col))
        lines.append(f"Taxi T: at {_where(taxi_row, taxi_col)}" + (f", on stop {here}." if here else "."))
        lines.append(
            "Passenger: in the taxi." if passenger == 4 else f"Passenger: waiting at {stop(passenger)}."
        )
        lines.append(f"Destination: {stop(destination)}.")
        lines.append("Legend: T = taxi, R G Y B = stops, . = road, | = wall (blocks east/west moves).")
        return "\n".join(lines)


@ENVIRONMENTS.register(
    "taxi",
    params=TaxiParams,
    paper=f"{MAXQ}; {GYMNASIUM}",
    summary="Gymnasium Taxi-v4 as text: pick the passenger up and drop them at the destination",
)
def taxi_suite(params: TaxiParams) -> EnvironmentSuite:
    """Taxi (gymnasium ``Taxi-v4``): -1 per step, +20 for a correct dropoff, -10 for an illegal pickup/dropoff."""
    rain = " It is raining: a move sometimes goes sideways." if params.rainy else ""
    instructions = (
        "You drive a taxi T on a 5x5 grid with four stops R, G, Y and B. Drive to the passenger's stop, pick "
        "the passenger up, drive to the destination stop and drop them off. Walls | block east/west moves; "
        "driving into a wall or the edge leaves the taxi where it is. Every action costs -1, a correct dropoff "
        f"gives +20 and ends the episode, an illegal pickup or dropoff costs -10.{rain} Actions: south (down), "
        "north (up), east (right), west (left), pickup, dropoff.\n" + _ANSWER_FORMAT.format(example="north")
    )
    return EnvironmentSuite(
        name="taxi",
        make=lambda: TaxiEnvironment(params),
        train_tasks=range(params.num_train_tasks),
        eval_tasks=range(TAXI_START_STATES - params.num_eval_tasks, TAXI_START_STATES),
        instructions=instructions,
        metadata={"params": params.model_dump(), "actions": TaxiEnvironment.actions},
    )
