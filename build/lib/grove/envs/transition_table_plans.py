"""Planning on gymnasium's toy-text transition tables: the expert the toy-text worlds' oracles follow.

:func:`plan_transition_table` finds a shortest safe path by breadth-first search when every action has one outcome,
and runs finite-horizon value iteration on gymnasium's reward over the steps left when moves are random.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

__all__ = ["Outcomes", "TablePlan", "TransitionKind", "plan_transition_table"]


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
