"""Multi-turn episodes: G copies of an environment per group, one batched generate per turn.

Every turn generates for **all still-running environments at once** (one ``engine.generate`` call over
their contexts); an environment that is done drops out of generation (verl-agent keeps generating for
finished ones). The model's text is parsed into an action (:mod:`grove.envs.actions`); an invalid action
does not step the environment (the state, hence the anchor, stays) and is charged the configured penalty.
A well-formed action the environment itself rejects (it returns ``info["invalid_action"] = True``, e.g.
an unknown knowledge base) is charged the same penalty and counted as invalid too.

A user's environment cannot end the run: one that raises, calls ``sys.exit``, hangs past ``step_timeout_s``
(``env.step_timeout_s``) or returns a malformed result (:mod:`grove.experience.step_results`), in ``make``,
``reset`` or ``step``, ends its own trajectory as failed; the failure is counted by kind and logged once
(:mod:`grove.experience.env_failures`); the other episodes go on. With a timeout the turn's calls run
concurrently, one worker thread per environment copy (:mod:`grove.experience.env_calls`); without one they
are made directly, in this thread. Either way the results are used in trajectory order, so the episodes do
not depend on the threads' timing.

How the model's context is built and which tokens become training samples is the job of a
:class:`Prompter` (one per trajectory): per-step prompts (:mod:`grove.experience.per_step_prompts`) or one
growing token-exact conversation (:mod:`grove.experience.conversation`). A context that would not fit the
model's context (or ``env.max_context_tokens``) ends its trajectory as truncated at that turn
(``context_overflow``), warned once per environment; the prompter may instead cut a long observation to its
end (``env.prompt_overflow: truncate_observation``).
"""

from __future__ import annotations

import logging
import math
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from grove.envs.actions import ParsedAction
from grove.envs.base import Environment, Observation
from grove.experience.context_budget import ContextOverflow
from grove.experience.env_calls import EnvironmentCalls, EnvironmentTimeout
from grove.experience.env_failures import ERROR_KINDS, error_kind, report_failure
from grove.experience.step_results import MalformedEnvironmentResult, checked_observation, checked_transition
from grove.rollout.engine import RolloutEngine, SamplingParams, reusing_prefixes
from grove.user_code import user_code

__all__ = [
    "ContextOverflow",
    "EnvironmentTimeout",
    "EpisodeRun",
    "Prompter",
    "SampleTokens",
    "Trajectory",
    "Turn",
    "run_episodes",
]

log = logging.getLogger("grove.experience")


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


_overflow_warned: set[str] = set()


def _warn_overflow(env_name: str, turn_number: int, overflow: ContextOverflow | None) -> None:
    """Say once per environment (and process) that a trajectory ended because its context would not fit."""
    if env_name in _overflow_warned or overflow is None:
        return
    _overflow_warned.add(env_name)
    log.warning(
        "environment %s: the context of turn %d is %d tokens, more than the %d that %s leaves for it; the trajectory "
        "ends there as truncated (counted in context_overflow_trajectories; later overflows of this environment are "
        "only counted)%s",
        env_name, turn_number + 1, overflow.tokens, overflow.limit, overflow.budget,
        f". {overflow.hint}" if overflow.hint else "",
    )


class _Failures:
    """An episode run's environment failures: each ends its trajectory, is counted by kind and logged once."""

    def __init__(self, env_name: str) -> None:
        self.env_name = env_name
        self.kinds: Counter[str] = Counter(dict.fromkeys(ERROR_KINDS, 0))

    def fail(self, traj: Trajectory, exc: Exception, where: str) -> None:
        traj.error = report_failure(self.env_name, exc, where)
        traj.error_kind = error_kind(exc)
        self.kinds[traj.error_kind] += 1


def run_episodes(
    engine: RolloutEngine,
    make_env: Callable[[], Environment],
    starts: Sequence[tuple[int, int]],
    group_size: int,
    make_prompter: Callable[[], Prompter],
    parse: Callable[[str, Observation], ParsedAction],
    sampling: SamplingParams,
    generator: torch.Generator,
    *,
    max_turns: int,
    invalid_penalty: float,
    env_name: str = "environment",
    step_timeout_s: float | None = None,
) -> EpisodeRun:
    """Play ``group_size`` episodes from each ``(task_id, seed)`` in ``starts``; group ``g`` is ``starts[g]``.

    ``step_timeout_s``: seconds an environment's ``reset`` or ``step`` may take before its trajectory ends as an
    environment error (None: no limit, the calls are made directly, in this thread; with a limit the copies'
    calls of one turn run concurrently, one worker thread per copy)."""
    calls = EnvironmentCalls(env_name, step_timeout_s)
    try:
        return _play(
            engine, make_env, starts, group_size, make_prompter, parse, sampling, generator, calls,
            max_turns=max_turns, invalid_penalty=invalid_penalty, env_name=env_name,
        )
    finally:
        calls.close()


def _play(
    engine: RolloutEngine,
    make_env: Callable[[], Environment],
    starts: Sequence[tuple[int, int]],
    group_size: int,
    make_prompter: Callable[[], Prompter],
    parse: Callable[[str, Observation], ParsedAction],
    sampling: SamplingParams,
    generator: torch.Generator,
    calls: EnvironmentCalls,
    *,
    max_turns: int,
    invalid_penalty: float,
    env_name: str,
) -> EpisodeRun:
    failures = _Failures(env_name)
    where_reset, where_step = f"environment {env_name!r} reset", f"environment {env_name!r} step"
    trajectories = [
        Trajectory(group=g, slot=slot, task_id=task_id, seed=seed)
        for g, (task_id, seed) in enumerate(starts)
        for slot in range(group_size)
    ]
    envs: list[Environment | None] = []
    t0 = time.perf_counter()
    for traj in trajectories:  # made in order, in this thread: a suite's `make` may share state between copies
        try:
            with user_code(f"environment {env_name!r} make"):
                envs.append(make_env())
        except Exception as exc:  # noqa: BLE001 - an environment failure ends only its own trajectory
            envs.append(None)
            failures.fail(traj, exc, "make")
    resets = [(k, "reset", env.reset, (trajectories[k].task_id, trajectories[k].seed))
              for k, env in enumerate(envs) if env is not None]
    observations: list[Observation | None] = [None] * len(trajectories)
    for (k, *_), (obs, exc) in zip(resets, calls.run(resets), strict=True):
        if exc is None:
            try:
                observations[k] = checked_observation(obs, where_reset)
            except MalformedEnvironmentResult as malformed:
                exc = malformed
        if exc is not None:
            envs[k] = None
            failures.fail(trajectories[k], exc, "reset")
    env_seconds = time.perf_counter() - t0
    prompters = [make_prompter() for _ in trajectories]
    for prompter, obs in zip(prompters, observations, strict=True):
        if obs is not None:
            prompter.begin(obs)
    gen_seconds = 0.0
    tokens = env_steps = prompt_tokens = reused_tokens = 0

    active = [k for k, obs in enumerate(observations) if obs is not None]
    with reusing_prefixes(engine):  # the turns share weights: each reuses the previous turn's keys and values
        for turn_number in range(max_turns):
            contexts, running = [], []
            for k in active:
                ctx = prompters[k].context()
                if ctx is None:
                    trajectories[k].context_overflow = True
                    trajectories[k].overflow = prompters[k].overflow
                    _warn_overflow(env_name, turn_number, prompters[k].overflow)
                else:
                    contexts.append(ctx)
                    running.append(k)
            if not running:
                break
            out = engine.generate(contexts, 1, sampling, generator)
            gen_seconds += out.seconds
            tokens += out.num_generated_tokens
            prompt_tokens += sum(len(c) for c in contexts)
            reused_tokens += out.prompt_tokens_reused
            lengths = out.response_mask.sum(1).tolist()
            all_ids, all_logprobs = out.response_ids.tolist(), out.logprobs.tolist()  # one conversion per turn
            t0 = time.perf_counter()
            actions = [parse(out.texts[row], observations[k]) for row, k in enumerate(running)]
            steps = [(k, "step", envs[k].step, (a.action,)) for k, a in zip(running, actions, strict=True) if a.valid]
            results = dict(zip((k for k, *_ in steps), calls.run(steps), strict=True))
            still = []
            for row, k in enumerate(running):
                traj, obs, parsed = trajectories[k], observations[k], actions[row]
                n = int(lengths[row])
                reward, done, info, nxt = 0.0, False, {}, obs
                if k in results:
                    value, exc = results[k]
                    if exc is None:
                        try:
                            nxt, reward, done, info = checked_transition(value, where_step)
                            env_steps += 1
                        except MalformedEnvironmentResult as malformed:
                            exc = malformed
                    if exc is not None:
                        failures.fail(traj, exc, "step")
                turn = Turn(
                    observation=obs,
                    action_ids=all_ids[row][:n],
                    logprobs=all_logprobs[row][:n],
                    text=out.texts[row],
                    parsed=parsed,
                    reward=reward,
                    penalty=0.0,
                    done=done,
                    finish_reason=out.finish_reasons[row],
                    info=info,
                )
                turn.penalty = invalid_penalty if turn.invalid else 0.0
                traj.turns.append(turn)
                traj.won = traj.won or bool(info.get("won", False))
                traj.done = done
                ends = traj.done or traj.failed or turn_number == max_turns - 1
                prompters[k].record(turn, None if ends else nxt)
                observations[k] = nxt
                if not ends:
                    still.append(k)
            env_seconds += time.perf_counter() - t0
            active = still
    for traj, prompter in zip(trajectories, prompters, strict=True):
        traj.samples = prompter.samples() if traj.turns else []
    return EpisodeRun(
        trajectories, gen_seconds, env_seconds, tokens, env_steps, dict(failures.kinds), prompt_tokens, reused_tokens
    )
