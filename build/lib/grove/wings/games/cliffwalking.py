"""CliffWalking as text (gymnasium ``CliffWalking-v1``, Sutton and Barto's cliff): walk along a 4×12 grid from the
bottom left to the bottom right without stepping off the cliff. The base class, task ids and oracle:
:mod:`grove.envs.toy_text_environment`.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

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

__all__ = ["CliffWalkingEnvironment", "CliffWalkingParams", "cliffwalking_suite"]



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

    params: CliffWalkingParams
    actions = ("up", "right", "down", "left")

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
        lines += grid_lines(cells)
        lines += [
            "Legend: P = you, . = safe ground, C = cliff, G = goal.",
            f"You are at {where_text(row, col)}; the goal is at {where_text(nrow - 1, ncol - 1)}.",
        ]
        return "\n".join(lines)


@ENVIRONMENTS.register("cliffwalking", params=CliffWalkingParams)
def cliffwalking_suite(params: CliffWalkingParams) -> EnvironmentSuite:
    """CliffWalking (gymnasium ``CliffWalking-v1``, Sutton and Barto's example 6.6)."""
    instructions = (
        "You are on a 4-row by 12-column grid with a cliff along the bottom row. Start at the bottom left and "
        "reach the goal G at the bottom right. Every step costs -1; stepping onto the cliff C costs -100 and "
        "sends you back to the start. Moving into the edge of the grid leaves you where you are. Actions: up, "
        "right, down, left.\n" + ANSWER_FORMAT.format(example="up")
    )
    return EnvironmentSuite(
        name="cliffwalking",
        make=lambda: CliffWalkingEnvironment(params),
        train_tasks=range(params.num_train_tasks),
        eval_tasks=range(EVAL_TASK_OFFSET, EVAL_TASK_OFFSET + params.num_eval_tasks),
        instructions=instructions,
        metadata={"params": params.model_dump(), "actions": CliffWalkingEnvironment.actions},
    )
