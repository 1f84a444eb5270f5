"""Environments for the agent tests, referenced by import path (``tests.agent_envs:corridor``) like a user's own.

``corridor``: positions 0..length; the goal is the right end (reward 1, won). Any text is a move: "left" or
"right" as such, anything else by the parity of its character codes, so a random policy still moves (and
revisits states, which GiGPO's anchor groups need). ``fail_at``: the environment raises when a copy reaches
that position on an odd task id (an environment bug the rollout must isolate). ``pictures: true`` adds a picture of
the corridor to every observation (one gray column per cell, the walker's brighter), for vision-language policies.
"""

from __future__ import annotations

import numpy as np

from grove.envs.base import EnvironmentSuite, Observation, Transition


class Corridor:
    def __init__(self, length: int, fail_at: int | None, pictures: bool = False) -> None:
        self.length = length
        self.fail_at = fail_at
        self.pictures = pictures
        self.position = 0
        self.task_id = 0

    def _observation(self) -> Observation:
        cells = ["_"] * (self.length + 1)
        cells[self.position] = "P"
        images = ()
        if self.pictures:
            picture = np.full((32, 32, 3), 60, dtype=np.uint8)
            width = 32 // (self.length + 1)
            picture[:, self.position * width : (self.position + 1) * width] = 230
            images = (picture,)
        return Observation(text="".join(cells), anchor=self.position, admissible_actions=("left", "right"),
                           images=images)

    def reset(self, task_id: int, seed: int) -> Observation:
        self.task_id = task_id
        self.position = task_id % 2  # two different starts, so tasks differ
        return self._observation()

    def step(self, action: str) -> Transition:
        word = action.strip().lower()
        right = word == "right" or (word != "left" and sum(map(ord, word)) % 2 == 0)
        self.position = min(self.length, self.position + 1) if right else max(0, self.position - 1)
        if self.fail_at is not None and self.position == self.fail_at and self.task_id % 2 == 1:
            raise RuntimeError(f"corridor bug at position {self.position}")
        won = self.position == self.length
        return Transition(self._observation(), 1.0 if won else 0.0, won, {"won": won})


def corridor(params: dict) -> EnvironmentSuite:
    length = int(params.get("length", 3))
    fail_at = params.get("fail_at")
    pictures = bool(params.get("pictures", False))
    return EnvironmentSuite(
        name="corridor",
        make=lambda: Corridor(length, fail_at, pictures),
        train_tasks=list(range(8)),
        eval_tasks=list(range(100, 104)),
        instructions="Walk right to the end of the corridor. Answer with left or right.",
    )
