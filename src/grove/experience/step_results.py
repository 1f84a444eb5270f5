"""Checking what an environment's ``reset`` and ``step`` return, at the boundary, before the rollout uses it.

A user's environment is code grove does not control. A result of the wrong shape would otherwise fail deep inside
the rollout with a traceback (an observation that is a ``str``, an unhashable anchor, ``info=None``) or be read
wrongly without a sound (``done="no"`` is a true string, so the episode would end). Each check here raises
:class:`MalformedEnvironmentResult`, naming what was wrong and what is expected; the rollout ends that trajectory
as an environment error, like an exception, and the run goes on.

The checks are ``isinstance`` tests and one ``hash``: a few microseconds per step.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from grove.envs.base import Observation

__all__ = [
    "MALFORMED_KINDS",
    "MalformedEnvironmentResult",
    "checked_observation",
    "checked_summary",
    "checked_transition",
]

#: what can be wrong with a result (``MalformedEnvironmentResult.kind``)
MALFORMED_KINDS = (
    "transition", "observation", "text", "anchor", "admissible_actions", "reward", "done", "info", "summary",
)

_TRANSITION = "return grove.envs.base.Transition(observation, reward, done, info)"
_OBSERVATION = "return grove.envs.base.Observation(text=..., anchor=...)"


class MalformedEnvironmentResult(Exception):
    """An environment's ``reset`` or ``step`` returned something of the wrong type or value; ``kind`` is one of
    :data:`MALFORMED_KINDS`."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _is_bool(value: Any) -> bool:
    return isinstance(value, bool | np.bool_)


def _is_real(value: Any) -> bool:
    return isinstance(value, numbers.Real | np.bool_)


def checked_observation(value: Any, where: str) -> Observation:
    """``value`` when it is an :class:`Observation` with a ``str`` text, a hashable anchor and ``None`` or a
    sequence of ``str`` as admissible actions. ``where``: e.g. ``"environment 'corridor' step"``."""
    if not isinstance(value, Observation):
        raise MalformedEnvironmentResult(
            "observation", f"{where} returned an observation of type {type(value).__name__}; {_OBSERVATION}"
        )
    if not isinstance(value.text, str):
        raise MalformedEnvironmentResult(
            "text", f"{where} returned an observation whose text is of type {type(value.text).__name__}; "
            "Observation.text must be a str",
        )
    try:
        hash(value.anchor)
    except TypeError:
        raise MalformedEnvironmentResult(
            "anchor", f"{where} returned an observation whose anchor is an unhashable {type(value.anchor).__name__} "
            f"({_shown(value.anchor)}); the anchor must be hashable (an int, a str, a tuple of those): equal anchors "
            "mean the same state",
        ) from None
    actions = value.admissible_actions
    if actions is not None and (
        not isinstance(actions, Sequence) or isinstance(actions, str | bytes) or not all(isinstance(a, str) for a in actions)
    ):
        raise MalformedEnvironmentResult(
            "admissible_actions", f"{where} returned admissible_actions {_shown(actions)} of type "
            f"{type(actions).__name__}; give a tuple of str (the valid commands), or None when it has no list",
        )
    if not isinstance(value.images, tuple | list):
        raise MalformedEnvironmentResult(
            "images", f"{where} returned images of type {type(value.images).__name__}; Observation.images must be a "
            "tuple of images (file paths, PIL images or arrays), empty for none",
        )
    return value


def _checked_info(info: Any, where: str) -> dict[str, Any]:
    if not isinstance(info, Mapping):
        raise MalformedEnvironmentResult(
            "info", f"{where} returned info of type {type(info).__name__}; info must be a dict (e.g. {{}} or "
            "{'won': False})",
        )
    for key in ("won", "invalid_action"):  # the rollout reads these as flags
        if key in info and not _is_bool(info[key]):
            raise MalformedEnvironmentResult(
                "info", f"{where} returned info[{key!r}] = {_shown(info[key])} of type {type(info[key]).__name__}; "
                f"info[{key!r}] must be a bool",
            )
    if "outcome" in info and not (_is_real(info["outcome"]) and math.isfinite(info["outcome"])):
        raise MalformedEnvironmentResult(
            "info", f"{where} returned info['outcome'] = {_shown(info['outcome'])}; it must be a finite number",
        )
    return dict(info)


def checked_transition(value: Any, where: str) -> tuple[Observation, float, bool, dict[str, Any]]:
    """``(observation, reward, done, info)`` of a ``step`` result, as ``Observation``, ``float``, ``bool`` and
    ``dict``: a 4-tuple (a :class:`~grove.envs.base.Transition`) whose reward is a finite real number (a bool, int,
    float or numpy scalar), whose ``done`` is a bool (numpy's too: never a string or a number, which would be read
    by truthiness) and whose info is a mapping."""
    if not isinstance(value, tuple) or len(value) != 4:
        what = f"a tuple of {len(value)} items" if isinstance(value, tuple) else f"a {type(value).__name__}"
        hint = ""
        if isinstance(value, tuple) and len(value) == 5:
            hint = " (gymnasium's (observation, reward, terminated, truncated, info) has 5: done = terminated or truncated)"
        raise MalformedEnvironmentResult("transition", f"{where} returned {what}; {_TRANSITION}{hint}")
    observation, reward, done, info = value
    observation = checked_observation(observation, where)
    if not _is_real(reward):
        raise MalformedEnvironmentResult(
            "reward", f"{where} returned a reward {_shown(reward)} of type {type(reward).__name__}; the reward must be a "
            "real number (a bool, int, float or numpy scalar)",
        )
    reward = float(reward)
    if not math.isfinite(reward):
        raise MalformedEnvironmentResult("reward", f"{where} returned a reward of {reward}; the reward must be finite")
    if not _is_bool(done):
        raise MalformedEnvironmentResult(
            "done", f"{where} returned done = {_shown(done)} of type {type(done).__name__}; done must be a bool (True "
            "when the episode is over), never read by truthiness",
        )
    return observation, reward, bool(done), _checked_info(info, where)


def checked_summary(value: Any, where: str) -> dict[str, float]:
    """A ``summarize`` hook's result as ``{name: float}``: a mapping of ``str`` names to real numbers."""
    if not isinstance(value, Mapping):
        raise MalformedEnvironmentResult(
            "summary", f"{where} returned {type(value).__name__}; it must return a dict of metric names to numbers"
        )
    bad = next(((k, v) for k, v in value.items() if not isinstance(k, str) or not _is_real(v)), None)
    if bad is not None:
        raise MalformedEnvironmentResult(
            "summary", f"{where} returned {bad[0]!r}: {_shown(bad[1])} ({type(bad[1]).__name__}); it must return a "
            "dict of metric names (str) to numbers",
        )
    return {k: float(v) for k, v in value.items()}
