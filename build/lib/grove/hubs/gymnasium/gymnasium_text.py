"""Any registered gymnasium environment with a discrete action space, as text (``gymnasium``).

``env_id`` names the gymnasium environment (``FrozenLake-v1``, ``CliffWalking-v1``, ``Taxi-v4``, ``Blackjack-v1``,
``CartPole-v1``...) and ``kwargs`` go to ``gymnasium.make``. The observation text is the environment's own ``ansi``
rendering when it has one (colour codes become ``[X]`` marks, named on a last line), else a description of the
observation (``Observation: 5``, ``Observation: (14, 10, 0)``, floats to 4 significant digits). Actions are the
environment's own names when grove knows them (the toy-text worlds, Blackjack and the classic-control tasks), else
``params.actions`` or ``"0".."n-1"``. Gymnasium: "Gymnasium: A Standard Interface for Reinforcement Learning
Environments" (Towers et al., 2024).

**Anchor.** With ``anchor: observation`` (default) the anchor key is the observation made hashable (an ``int``, a
tuple, arrays as tuples of Python numbers). It is the exact state only where the observation is the whole Markov
state: FrozenLake, CliffWalking, Taxi (the map is fixed by ``env_id`` and ``kwargs``) and Blackjack's
(sum, dealer card, usable ace) are; an environment whose observation hides part of its state (a partially observed
world, a wrapper that drops information) pools steps from different states, so its anchors are approximate. Float
observations (CartPole) are exact but almost never repeat, so nearly every anchor group is a single step. With
``anchor: none`` every step gets a key of its own: GiGPO's step advantage is then 0 for every step (a lone step in its
anchor group gets 0) and GiGPO reduces to episode-level GRPO (``episode_grpo``); the suite logs this once when it is
built. (``None`` itself is not used as the key: equal keys pool, so a constant ``None`` would pool every step.)

**Tasks and seeds.** Task ``i`` resets gymnasium with ``seed=i``, so a task is one start state (one Blackjack deal,
one CartPole start); the transitions after the reset are drawn from a generator seeded with ``(task_id, seed)``
(slippery ice, the cards dealt next). Training ids ``0..n-1``, evaluation ids from 100000 up.

**Success.** ``info["won"]`` by ``won_if``: ``positive_return`` (default; the step that terminates the episode pays a
positive reward: FrozenLake's goal, Taxi's dropoff, a won Blackjack hand), ``terminated`` (the episode terminates,
whatever the reward: CliffWalking, MountainCar, Acrobot reach their goal with a negative or zero reward) or
``survived`` (it reaches the step limit without terminating: CartPole). An unknown action is a no-op step with
``info["invalid_action"] = True``.
"""

from __future__ import annotations

import difflib
import itertools
import logging
import re
from collections.abc import Hashable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from grove.envs.actions import normalize_action, unknown_action_step
from grove.envs.base import EnvironmentSuite, Observation, Transition
from grove.envs.toy_text_environment import ANSWER_FORMAT, EVAL_TASK_OFFSET, reset_seed
from grove.registry import ENVIRONMENTS

__all__ = ["GymnasiumParams", "GymnasiumTextEnvironment", "gymnasium_suite", "observation_key", "observation_text"]

logger = logging.getLogger(__name__)

_UNIQUE_KEYS = itertools.count()
_ANSI_SEGMENT = re.compile(r"\x1b\[([\d;]*)m(.*?)\x1b\[0m", re.DOTALL)
_ANSI_ANY = re.compile(r"\x1b\[[\d;]*m")
_COLOURS = ("black", "red", "green", "yellow", "blue", "magenta", "cyan", "white")

# The environment's own action names and a one-line legend, by the class of ``env.unwrapped`` (gymnasium's docs).
_KNOWN: dict[str, tuple[tuple[str, ...], str]] = {
    "FrozenLakeEnv": (("left", "down", "right", "up"), "The lake: S start, F frozen ice, H hole, G goal; the marked "
                      "cell is you; a line in parentheses names your last move."),
    "CliffWalkingEnv": (("up", "right", "down", "left"), "The grid: x you, o ground, C cliff, T goal."),
    "TaxiEnv": (("south", "north", "east", "west", "pickup", "dropoff"), "The city: R G Y B stops, | walls; yellow "
                "background: the empty taxi (green: carrying the passenger); blue: the passenger; magenta: the "
                "destination; a line in parentheses names your last move."),
    "BlackjackEnv": (("stick", "hit"), "The observation is (your sum, the dealer's showing card, 1 if you hold a "
                     "usable ace)."),
    "CartPoleEnv": (("push left", "push right"), "The observation is (cart position, cart velocity, pole angle, "
                    "pole angular velocity)."),
    "MountainCarEnv": (("accelerate left", "do not accelerate", "accelerate right"), "The observation is (position, "
                       "velocity); the goal is at position 0.5."),
    "AcrobotEnv": (("torque -1", "torque 0", "torque +1"), "The observation is the cosines and sines of the two "
                   "joint angles and their angular velocities."),
    "LunarLander": (("do nothing", "fire left engine", "fire main engine", "fire right engine"), ""),
}


class GymnasiumParams(BaseModel):
    """Parameters of the ``gymnasium`` environment."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    env_id: str = Field(..., min_length=1, description="A registered gymnasium id, e.g. FrozenLake-v1 or Taxi-v4.")
    kwargs: dict[str, Any] = Field(default_factory=dict, description="Keyword arguments to gymnasium.make.")
    render: Literal["auto", "ansi", "observation"] = Field(
        "auto",
        description="'ansi': the environment's render_mode='ansi' text (an error when it has none); 'observation': a "
        "description of the observation ('Observation: 5'); 'auto': ansi when the environment offers it.",
    )
    actions: tuple[str, ...] | None = Field(
        None,
        description="Names of the Discrete actions in gymnasium's order; default: the environment's own names when "
        "grove knows them, else '0'..'n-1'.",
    )
    max_steps: int = Field(100, ge=1, description="Steps before truncation (gymnasium's own time limit applies too).")
    num_train_tasks: int = Field(1000, ge=1, le=EVAL_TASK_OFFSET, description="Training task ids 0..n-1 (reset seeds).")
    num_eval_tasks: int = Field(100, ge=0, description="Held-out task ids from 100000 up (reset seeds).")
    anchor: Literal["observation", "none"] = Field(
        "observation",
        description="'observation': the observation made hashable (exact where it is the whole state); 'none': a "
        "key of its own per step, so GiGPO reduces to episode-level GRPO.",
    )
    won_if: Literal["positive_return", "terminated", "survived"] = Field(
        "positive_return",
        description="info['won'] when the terminating step pays a positive reward ('positive_return'), when the "
        "episode terminates ('terminated'), or when it reaches the step limit without terminating ('survived').",
    )
    instructions: str | None = Field(
        None, description="Text describing the world, replacing grove's generic description (the answer format stays)."
    )

    @field_validator("kwargs")
    @classmethod
    def _no_render_mode(cls, v: dict[str, Any]) -> dict[str, Any]:
        if "render_mode" in v:
            raise ValueError("render_mode is chosen by the 'render' parameter (ansi or observation), not by kwargs")
        return v

    @field_validator("actions")
    @classmethod
    def _distinct(cls, v: tuple[str, ...] | None) -> tuple[str, ...] | None:
        if v is not None and (len({normalize_action(a) for a in v}) != len(v) or not all(map(normalize_action, v))):
            raise ValueError("action names must be distinct and non-empty (compared case-insensitively)")
        return v


def _fail(field: str, message: str) -> ValueError:
    return ValueError(f"environment 'gymnasium': {field}: {message}")


def observation_key(value: Any) -> Hashable:
    """The observation made hashable: numpy scalars and arrays become Python numbers and tuples, dicts sorted tuples
    of ``(key, value)``."""
    if hasattr(value, "tolist"):  # numpy array or scalar
        value = value.tolist()
    if isinstance(value, dict):
        return tuple((k, observation_key(v)) for k, v in sorted(value.items()))
    if isinstance(value, list | tuple):
        return tuple(observation_key(v) for v in value)
    return value


def _describe(value: Any) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k}: {_describe(v)}" for k, v in value.items())
    if isinstance(value, tuple):
        return "(" + ", ".join(_describe(v) for v in value) + ")"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def observation_text(value: Any) -> str:
    """``Observation: ...`` for a Discrete, Box, Tuple or Dict observation (floats to 4 significant digits)."""
    return f"Observation: {_describe(observation_key(value))}"


def _colour(codes: str) -> str:
    words = []
    for code in (int(c) for c in codes.split(";") if c.isdigit()):
        if code == 1:
            words.append("bold")
        elif 30 <= code <= 37:
            words.append(_COLOURS[code - 30])
        elif 40 <= code <= 47:
            words.append(f"{_COLOURS[code - 40]} background")
    return " ".join(words) or "highlighted"


def ansi_text(frame: str) -> str:
    """An ``ansi`` frame as plain text: each coloured segment ``X`` becomes ``[X]``, named on a last line."""
    marks: list[str] = []

    def mark(m: re.Match[str]) -> str:
        marks.append(f"[{m.group(2)}] {_colour(m.group(1))}")
        return f"[{m.group(2)}]"

    text = _ANSI_ANY.sub("", _ANSI_SEGMENT.sub(mark, frame)).strip("\n")
    return text + ("\nMarked: " + "; ".join(marks) + "." if marks else "")


class GymnasiumTextEnvironment:
    """One copy of a gymnasium environment with a Discrete action space, observed as text."""

    def __init__(self, params: GymnasiumParams, actions: tuple[str, ...], ansi: bool) -> None:
        self.params = params
        self.actions = actions
        self._ansi = ansi
        self._index = {normalize_action(a): i for i, a in enumerate(actions)}
        self._env: Any = None
        self._obs: Any = None
        self._steps = 0
        self._done = True

    def _make(self) -> Any:
        import gymnasium

        kwargs = {**self.params.kwargs, **({"render_mode": "ansi"} if self._ansi else {})}
        return gymnasium.make(self.params.env_id, **kwargs)

    def reset(self, task_id: int, seed: int) -> Observation:
        from gymnasium.utils import seeding

        if self._env is None:
            self._env = self._make()
        self._obs, _ = self._env.reset(seed=task_id)
        self._env.unwrapped.np_random, _ = seeding.np_random(reset_seed(task_id, seed))
        self._steps, self._done = 0, False
        return self._observe("")

    def step(self, action: str) -> Transition:
        if self._done:
            raise RuntimeError("step() after the episode ended; call reset() first")
        self._steps += 1
        limit = self._steps >= self.params.max_steps
        index = self._index.get(normalize_action(action))
        if index is None:
            self._done = limit
            return unknown_action_step(action, self.actions, limit, self._observe, lost=False)
        start = getattr(self._env.action_space, "start", 0)
        self._obs, reward, terminated, truncated, _ = self._env.step(int(start) + index)
        terminated, truncated = bool(terminated), bool(truncated) or limit
        won = {
            "positive_return": terminated and float(reward) > 0,
            "terminated": terminated,
            "survived": truncated and not terminated,
        }[self.params.won_if]
        self._done = terminated or truncated
        info = {"won": won, "lost": terminated and not won, "truncated": truncated and not terminated}
        return Transition(self._observe(""), float(reward), self._done, info)

    def _observe(self, note: str) -> Observation:
        text = ansi_text(self._env.render()) if self._ansi else observation_text(self._obs)
        anchor = observation_key(self._obs) if self.params.anchor == "observation" else ("step", next(_UNIQUE_KEYS))
        return Observation("\n".join(filter(None, [note, text])), anchor, self.actions)


def _probe(params: GymnasiumParams) -> Any:
    """A gymnasium env of ``params`` (ansi rendering when asked or available), or a ``ValueError`` naming the field."""
    import gymnasium

    if params.env_id not in gymnasium.registry:
        close = difflib.get_close_matches(params.env_id, list(gymnasium.registry), n=5, cutoff=0.5)
        hint = f" Similar registered ids: {', '.join(close)}." if close else ""
        raise _fail("env_id", f"{params.env_id!r} is not a registered gymnasium {gymnasium.__version__} id.{hint}")
    try:
        env = gymnasium.make(params.env_id, **params.kwargs)
        modes = list(env.metadata.get("render_modes") or [])
        if "ansi" in modes and params.render != "observation":
            env.close()
            env = gymnasium.make(params.env_id, **params.kwargs, render_mode="ansi")
    except TypeError as exc:
        raise _fail("kwargs", f"gymnasium.make({params.env_id!r}, **{params.kwargs!r}) failed: {exc}") from None
    except Exception as exc:  # missing extras (box2d, mujoco), deprecated versions
        raise _fail("env_id", f"gymnasium.make({params.env_id!r}) failed: {type(exc).__name__}: {exc}") from None
    if params.render == "ansi" and "ansi" not in modes:
        raise _fail("render", f"{params.env_id} has no 'ansi' rendering (render modes: {modes}); use "
                    "render: observation or auto")
    return env


def _action_names(params: GymnasiumParams, env: Any) -> tuple[str, ...]:
    from gymnasium.spaces import Discrete

    space = env.action_space
    if not isinstance(space, Discrete):
        raise _fail("env_id", f"{params.env_id} has the action space {space}; only Discrete action spaces can be "
                    "named as text actions")
    n = int(space.n)
    if params.actions is not None:
        if len(params.actions) != n:
            raise _fail("actions", f"{len(params.actions)} names given, but {params.env_id} has {n} actions")
        return params.actions
    unwrapped = env.unwrapped
    known = _KNOWN.get(type(unwrapped).__name__)
    if known is not None and len(known[0]) == n:
        return known[0]
    meanings = getattr(unwrapped, "get_action_meanings", None)
    names = tuple(str(m).lower() for m in meanings()) if callable(meanings) else ()
    return names if len(names) == n and len(set(names)) == n else tuple(str(i) for i in range(n))


@ENVIRONMENTS.register(
    "gymnasium",
    params=GymnasiumParams,
)
def gymnasium_suite(params: GymnasiumParams) -> EnvironmentSuite:
    """The suite of ``params.env_id``: the observation as text, the actions by name, task ``i`` reset with seed ``i``."""
    try:
        import gymnasium  # noqa: F401
    except ImportError:
        raise ImportError("the 'gymnasium' environment needs gymnasium: pip install gymnasium") from None
    env = _probe(params)
    actions = _action_names(params, env)
    ansi = env.render_mode == "ansi"
    known = _KNOWN.get(type(env.unwrapped).__name__, ((), ""))[1]
    float_obs = getattr(env.observation_space, "dtype", None) is not None and env.observation_space.dtype.kind == "f"
    env.close()
    if params.anchor == "none":
        logger.warning("gymnasium %s with anchor: none: every step is its own anchor group, so GiGPO's step "
                       "advantage is 0 and it reduces to episode-level GRPO", params.env_id)
    elif float_obs:
        logger.warning("gymnasium %s has float observations: equal states almost never repeat, so nearly every "
                       "anchor group is one step and GiGPO is close to episode-level GRPO", params.env_id)
    shown = "its text rendering" if ansi else "its observation"
    world = params.instructions or f"You act in the gymnasium environment {params.env_id}; each turn shows {shown}. {known}"
    instructions = (
        f"{world.strip()} Actions: {', '.join(actions)}.\n" + ANSWER_FORMAT.format(example=actions[0])
    )
    return EnvironmentSuite(
        name=f"gymnasium:{params.env_id}",
        make=lambda: GymnasiumTextEnvironment(params, actions, ansi),
        train_tasks=range(params.num_train_tasks),
        eval_tasks=range(EVAL_TASK_OFFSET, EVAL_TASK_OFFSET + params.num_eval_tasks),
        instructions=instructions,
        metadata={"params": params.model_dump(), "actions": actions, "render": "ansi" if ansi else "observation"},
    )
