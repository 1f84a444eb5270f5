"""FrozenLake as text (gymnasium ``FrozenLake-v1``): walk from the top left to the goal without falling into a hole.

Fixed 4×4 / 8×8 maps or random maps seeded by the task id (``maps: random``; held-out maps never trained on:
:class:`FrozenLakeParams`), slippery or not; the observation draws the whole lake, a compact grid, or the cells
around the player (``render``). The base class, task ids and oracle: :mod:`grove.envs.toy_text_environment`.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from functools import lru_cache
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from grove.envs.base import EnvironmentSuite
from grove.envs.toy_text_environment import (
    ANSWER_FORMAT,
    EVAL_TASK_OFFSET,
    ToyTextEnvironment,
    grid_lines,
    where_text,
)
from grove.envs.transition_table_plans import TransitionKind
from grove.registry import ENVIRONMENTS

__all__ = ["FrozenLakeEnvironment", "FrozenLakeParams", "frozenlake_suite"]


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

    params: FrozenLakeParams
    actions = ("left", "down", "right", "up")

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
            where = f"You are at {where_text(row, col)}."
            if self.params.render == "local":
                where += " " + _frozenlake_neighbours(desc, row, col)
            return "\n".join([*lines, *grid_lines(cells), where])
        lines += ["The frozen lake (row 1 is the top, column 1 the left):", *grid_lines(cells)]
        lines += [
            _FROZENLAKE_LEGEND,
            f"You are at {where_text(row, col)}; the goal is at {where_text(*divmod(desc.size - 1, desc.shape[1]))}.",
        ]
        return "\n".join(lines)


@ENVIRONMENTS.register("frozenlake", params=FrozenLakeParams)
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
        "right, up.\n" + ANSWER_FORMAT.format(example="right")
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
