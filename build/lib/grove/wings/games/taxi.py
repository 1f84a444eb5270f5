"""Taxi as text (gymnasium ``Taxi-v4``, Dietterich's MAXQ taxi): pick the passenger up and drop them off at their
destination on a 5×5 grid. Task ids index a fixed shuffle of the 300 start states (training the first, evaluation
the last). The base class and oracle: :mod:`grove.envs.toy_text_environment`.
"""

from __future__ import annotations

from collections.abc import Hashable
from functools import lru_cache
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from grove.envs.base import EnvironmentSuite
from grove.envs.toy_text_environment import ANSWER_FORMAT, ToyTextEnvironment, where_text
from grove.envs.transition_table_plans import TransitionKind
from grove.registry import ENVIRONMENTS

__all__ = ["TAXI_START_STATES", "TaxiEnvironment", "TaxiParams", "taxi_suite"]



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
    from gymnasium.envs.toy_text.taxi import TaxiEnv

    states = np.flatnonzero(TaxiEnv().initial_state_distrib)
    return tuple(int(s) for s in np.random.default_rng(0).permutation(states))


class TaxiEnvironment(ToyTextEnvironment):
    """Taxi: drive to the passenger, pick them up, drive to the destination and drop them off."""

    params: TaxiParams
    actions = ("south", "north", "east", "west", "pickup", "dropoff")
    stop_names = ("R", "G", "Y", "B")

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
            return f"{self.stop_names[i]} ({where_text(*env.locs[i])})"

        here = stops.get((taxi_row, taxi_col))
        lines.append(f"Taxi T: at {where_text(taxi_row, taxi_col)}" + (f", on stop {here}." if here else "."))
        lines.append(
            "Passenger: in the taxi." if passenger == 4 else f"Passenger: waiting at {stop(passenger)}."
        )
        lines.append(f"Destination: {stop(destination)}.")
        lines.append("Legend: T = taxi, R G Y B = stops, . = road, | = wall (blocks east/west moves).")
        return "\n".join(lines)


@ENVIRONMENTS.register("taxi", params=TaxiParams)
def taxi_suite(params: TaxiParams) -> EnvironmentSuite:
    """Taxi (gymnasium ``Taxi-v4``): -1 per step, +20 for a correct dropoff, -10 for an illegal pickup/dropoff."""
    rain = " It is raining: a move sometimes goes sideways." if params.rainy else ""
    instructions = (
        "You drive a taxi T on a 5x5 grid with four stops R, G, Y and B. Drive to the passenger's stop, pick "
        "the passenger up, drive to the destination stop and drop them off. Walls | block east/west moves; "
        "driving into a wall or the edge leaves the taxi where it is. Every action costs -1, a correct dropoff "
        f"gives +20 and ends the episode, an illegal pickup or dropoff costs -10.{rain} Actions: south (down), "
        "north (up), east (right), west (left), pickup, dropoff.\n" + ANSWER_FORMAT.format(example="north")
    )
    return EnvironmentSuite(
        name="taxi",
        make=lambda: TaxiEnvironment(params),
        train_tasks=range(params.num_train_tasks),
        eval_tasks=range(TAXI_START_STATES - params.num_eval_tasks, TAXI_START_STATES),
        instructions=instructions,
        metadata={"params": params.model_dump(), "actions": TaxiEnvironment.actions},
    )
