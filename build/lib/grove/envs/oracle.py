"""Oracle actions: the command an expert takes from an environment's current state (for expert demonstrations).

An environment offers an oracle by defining a method ``oracle_action(self) -> str | None`` on its class; nothing
is registered. The demonstration player resets the environment, then alternates ``oracle_action()`` and
``step(action)`` until the episode ends, so the method

* reads the environment's *current* state and re-plans from it: it is correct after any action, including one
  the oracle did not choose (a model's mistake, a deliberately bad action in a test);
* returns the command exactly as ``step`` accepts it, one of ``observation.admissible_actions`` when the
  environment lists them (for an environment read with the ``full_text`` action parser, the whole reply);
* returns ``None`` when no action leads to success any more (a hole fallen into, a Sokoban box pushed into a
  corner, a goal farther than the steps left before truncation) and after the episode has ended.

A minimal user environment::

    class Corridor:
        def reset(self, task_id: int, seed: int) -> Observation: ...
        def step(self, action: str) -> Transition: ...
        def oracle_action(self) -> str | None:
            return None if self.done else "right"

What the built-in oracles optimise:

* ``frozenlake``, ``cliffwalking``, ``taxi`` (:mod:`grove.envs.transition_table_plans`): planned on gymnasium's transition
  table ``P[state][action]``. Deterministic variants: a shortest path to the goal by breadth-first search that
  never steps into a hole (FrozenLake) or onto the cliff (CliffWalking); Taxi's shortest path to a successful
  drop-off. Slippery / rainy variants: finite-horizon value iteration on gymnasium's reward over the steps left
  before truncation (for FrozenLake, the probability of reaching the goal in time; for CliffWalking and Taxi,
  the expected return). ``None`` when the goal cannot be reached with positive probability in the steps left.
* ``sokoban`` (:mod:`grove.wings.games.sokoban_levels`): the first move of a shortest solution in moves (breadth-first search
  over player and box positions, pruning boxes on cells from which no target can be reached), cached so that
  following the oracle costs one search per episode; ``None`` when the room is unsolvable from the current
  state, when the search exceeds its node limit, or when the solution is longer than the steps left.
* ``textworld`` (:mod:`grove.wings.games.text_games`): the first command of TextWorld's winning policy from the
  current state (``EnvInfos(policy_commands=True)``, which TextWorld updates after every command, undoing
  detours); ``None`` once the game cannot be won.
* ``kb_routing`` (:mod:`grove.wings.kb_routing.kb_routing_environment`): the gold route: for the first gold hop whose answer no search
  has surfaced yet, ``<think>…</think><query kb="NAME">sub-question</query>`` with the hop's gold knowledge base
  and gold sub-question; when every hop is covered (or its gold search was already tried),
  ``<think>…</think><answer>GOLD</answer>`` with a gold answer, preferring one the search results showed.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

__all__ = ["OracleEnvironment", "has_oracle"]


@runtime_checkable
class OracleEnvironment(Protocol):
    """An environment that knows an expert's action from its current state (see the module docstring)."""

    def oracle_action(self) -> str | None:
        """The expert's next command from the current state, re-planned from it; ``None`` when no action leads
        to success any more or the episode has ended."""
        ...


def has_oracle(env: object) -> bool:
    """Whether ``env`` offers :meth:`OracleEnvironment.oracle_action` (a callable attribute of that name)."""
    return callable(getattr(env, "oracle_action", None))
