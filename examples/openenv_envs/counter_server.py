"""A tiny OpenEnv environment served by openenv's own FastAPI app factory: count up (or down) to a target.

The OpenEnv ``Environment`` subclass :class:`CounterEnvironment` is served with
``openenv.core.env_server.create_fastapi_app``, so its WebSocket protocol is OpenEnv's own (grove's ``openenv``
adapter, ``src/grove/hubs/openenv/openenv_servers.py``, talks to it like to any OpenEnv server; ``docs/hub-openenv.md``).

* **reset(seed)**: the counter starts at 0; the target is ``1 + seed % 3`` (grove passes the task id as the seed).
* **step(CounterAction(command))**: ``inc`` adds 1, ``dec`` subtracts 1, anything else leaves the counter as it is.
  Reaching the target ends the episode with reward 1 (``solved``); every other step gives 0.
* **Observation**: ``text`` (what the agent reads), ``value`` (the counter: a hashable anchor), ``target``,
  ``legal_actions`` and ``solved``. **State**: ``value`` and ``target`` besides OpenEnv's ``episode_id`` and
  ``step_count``.

For fault tests, ``COUNTER_CRASH_FILE`` names a file holding a number ``n``: while it exists, the server process
deletes it and exits (code 3) at its ``n``-th step, as a server that dies in the middle of episodes.

Three ways to serve it:

* ``app``: many sessions at once (``SUPPORTS_CONCURRENT_SESSIONS``; one process serves a whole run's copies);
* ``single_session_app``: OpenEnv's default capacity, one session per process;
* ``python examples/openenv_envs/counter_server.py --port 8123 [--single-session]``: either one with uvicorn.
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys
from pathlib import Path
from typing import Any

from openenv.core.env_server import (
    Action,
    Environment,
    Observation,
    State,
    create_fastapi_app,
)

MAX_SESSIONS = 64

ACTIONS = ["inc", "dec"]
_steps_served = itertools.count(1)


def _crash_if_asked() -> None:
    """Exit at the ``n``-th step of this process when ``COUNTER_CRASH_FILE`` holds ``n`` (deleting the file)."""
    crash_file = Path(os.environ.get("COUNTER_CRASH_FILE", "") or "/nonexistent")
    step = next(_steps_served)
    if crash_file.is_file() and step >= int(crash_file.read_text()):
        crash_file.unlink()
        print(f"counter server: exiting at step {step} (COUNTER_CRASH_FILE)", file=sys.stderr, flush=True)
        os._exit(3)


class CounterAction(Action):
    """One command: ``inc`` or ``dec``."""

    command: str


class CounterObservation(Observation):
    text: str
    value: int
    target: int
    legal_actions: list[str]
    solved: bool = False


class CounterState(State):
    value: int = 0
    target: int = 1


class CounterEnvironment(Environment):
    """Count from 0 to the target with ``inc`` and ``dec``; one instance per session."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        super().__init__()
        self._state = CounterState()

    def _observe(self, reward: float, done: bool) -> CounterObservation:
        value, target = self._state.value, self._state.target
        text = f"The counter shows {value}. Make it show {target}."
        return CounterObservation(
            text=text, value=value, target=target, legal_actions=list(ACTIONS), solved=value == target,
            reward=reward, done=done,
        )

    def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> CounterObservation:
        self._state = CounterState(episode_id=episode_id, value=0, target=1 + (seed or 0) % 3)
        return self._observe(0.0, False)

    def step(self, action: CounterAction, timeout_s: float | None = None, **kwargs: Any) -> CounterObservation:
        _crash_if_asked()
        command = action.command.strip().lower()
        self._state.value += {"inc": 1, "dec": -1}.get(command, 0)
        self._state.step_count += 1
        solved = self._state.value == self._state.target
        return self._observe(1.0 if solved else 0.0, solved)

    @property
    def state(self) -> CounterState:
        return self._state


app = create_fastapi_app(CounterEnvironment, CounterAction, CounterObservation, max_concurrent_envs=MAX_SESSIONS)
single_session_app = create_fastapi_app(CounterEnvironment, CounterAction, CounterObservation)


def main(argv: list[str] | None = None) -> None:
    import uvicorn

    parser = argparse.ArgumentParser(description="Serve the counter OpenEnv environment on 127.0.0.1.")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--single-session", action="store_true", help="OpenEnv's default capacity of one session")
    args = parser.parse_args(argv)
    served = single_session_app if args.single_session else app
    uvicorn.run(served, host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
