"""What a played episode is made of: its turns (:class:`Turn`), the training samples a prompter cut from them
(:class:`SampleTokens`), the trajectory (:class:`Trajectory`) and a round of episodes with its timings
(:class:`EpisodeRun`); and the :class:`Prompter` protocol that turns turns into model contexts and samples. The
episodes are played by :func:`grove.experience.episodes.run_episodes`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from grove.envs.actions import ParsedAction
from grove.envs.base import Observation
from grove.experience.context_budget import ContextOverflow
from grove.experience.env_failures import ERROR_KINDS
from grove.vision.image_table import ImageTable

__all__ = ["EpisodeRun", "Prompter", "SampleTokens", "Trajectory", "Turn"]


@dataclass
class Turn:
    """One step of a trajectory: the state acted from, what the model sampled, what the environment did."""

    observation: Observation
    action_ids: list[int]
    logprobs: list[float]
    text: str
    parsed: ParsedAction
    reward: float
    penalty: float
    done: bool
    finish_reason: str
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def invalid(self) -> bool:
        """The action could not be parsed, or the environment rejected it (``info["invalid_action"]``)."""
        return not self.parsed.valid or bool(self.info.get("invalid_action", False))


@dataclass
class SampleTokens:
    """One training sample cut from a trajectory: its prompt, and its response tokens with, per token, the
    sampling log-prob (0 on environment tokens) and the turn that produced it (-1: environment token)."""

    prompt_ids: list[int]
    response_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    token_turns: list[int] = field(default_factory=list)
    images: ImageTable | None = None  # the pixels of the images among its tokens (one owner), for a VLM policy

    def append(self, ids: Sequence[int], logprobs: Sequence[float] | None, turn: int) -> None:
        self.response_ids.extend(ids)
        self.logprobs.extend(logprobs if logprobs is not None else [0.0] * len(ids))
        self.token_turns.extend([turn] * len(ids))

    @property
    def turns(self) -> list[int]:
        return sorted({t for t in self.token_turns if t >= 0})


class Prompter(Protocol):
    """Builds one trajectory's model contexts and cuts its training samples."""

    #: why the last :meth:`context` was ``None`` (``None`` while every context fit)
    overflow: ContextOverflow | None
    #: the pixels of the images in the last :meth:`context` (one owner; ``None``: it holds no image)
    images: ImageTable | None

    def begin(self, observation: Observation) -> None: ...

    def context(self) -> list[int] | None:
        """Token ids to generate the next action from; ``None`` when the context would be too long (then
        :attr:`overflow` says by how much)."""
        ...

    def record(self, turn: Turn, next_observation: Observation | None) -> None:
        """The turn just taken; ``next_observation`` is ``None`` when the episode ends with it."""
        ...

    def samples(self) -> list[SampleTokens]: ...


@dataclass
class Trajectory:
    group: int
    slot: int
    task_id: int
    seed: int
    turns: list[Turn] = field(default_factory=list)
    won: bool = False
    done: bool = False
    error: str | None = None  # "ExceptionType: message" when the environment failed
    error_kind: str | None = None  # one of env_failures.ERROR_KINDS
    context_overflow: bool = False
    overflow: ContextOverflow | None = None  # how the context that ended the trajectory did not fit
    samples: list[SampleTokens] = field(default_factory=list)

    @property
    def episode_return(self) -> float:
        return sum(t.reward for t in self.turns)

    @property
    def failed(self) -> bool:
        return self.error is not None

    @property
    def truncated(self) -> bool:
        """Ended by the turn limit or the context limit, not by the environment."""
        return not self.done and not self.failed

    def record(self) -> dict[str, Any]:
        """The whole trajectory as JSON-able data (samples.jsonl, evaluation samples)."""
        return {
            "group": self.group,
            "task_id": self.task_id,
            "seed": self.seed,
            "return": self.episode_return,
            "won": self.won,
            "turns": len(self.turns),
            "ended": "error" if self.failed else ("done" if self.done else "truncated"),
            **({"error": self.error} if self.error else {}),
            **({"context_overflow": True} if self.context_overflow else {}),
            "trajectory": [
                {
                    "observation": t.observation.text,
                    "anchor": repr(t.observation.anchor),
                    "model_text": t.text,
                    "action": t.parsed.action,
                    "valid": not t.invalid,
                    "reward": t.reward,
                    "penalty": t.penalty,
                    **({"info": info} if (info := _scalar_info(t.info)) else {}),
                }
                for t in self.turns
            ],
        }


def _scalar_info(info: dict[str, Any]) -> dict[str, Any]:
    """The entries of a step's ``info`` that JSON holds as they are (strings, booleans, integers, finite floats,
    nulls), e.g. ``kb_routing``'s ``step_type``, ``kb`` and ``routing_correct``, for the trajectory records."""
    return {
        str(k): v
        for k, v in info.items()
        if v is None or isinstance(v, str | bool | int) or (isinstance(v, float) and math.isfinite(v))
    }


@dataclass
class EpisodeRun:
    trajectories: list[Trajectory]
    generation_seconds: float
    environment_seconds: float
    generated_tokens: int
    environment_steps: int
    error_kinds: dict[str, int] = field(default_factory=lambda: dict.fromkeys(ERROR_KINDS, 0))
    prompt_tokens: int = 0  # context tokens of every turn's generate call
    prompt_tokens_reused: int = 0  # of those, taken from the engine's cache (rollout.prefix_reuse)

    @property
    def errors(self) -> int:
        """Trajectories an environment failure ended (every kind)."""
        return sum(self.error_kinds.values())

    @property
    def context_overflows(self) -> int:
        """Trajectories ended because their next context would not fit."""
        return sum(t.context_overflow for t in self.trajectories)
