"""Multi-turn episodes: G copies of an environment per group, one batched generate per turn.

Every turn generates for **all still-running environments at once** (one ``engine.generate`` call over
their contexts); an environment that is done drops out of generation (verl-agent keeps generating for
finished ones). The model's text is parsed into an action (:mod:`grove.envs.actions`); an invalid action
does not step the environment (the state, hence the anchor, stays) and is charged the configured penalty.
A well-formed action the environment itself rejects (it returns ``info["invalid_action"] = True``, e.g.
an unknown knowledge base) is charged the same penalty and counted as invalid too.
An environment that raises, in ``reset`` or ``step``, ends its own trajectory as failed; the error is
counted and its traceback logged once per (environment, exception type); the other episodes go on.
With ``step_timeout_s`` (``env.step_timeout_s``) a ``reset`` or ``step`` that does not return in time ends its
trajectory the same way (:class:`EnvironmentTimeout`). The calls then run in one reusable daemon worker thread
per :func:`run_episodes` call, waited for with a time limit; a thread cannot be killed, so a timed-out call is
abandoned with its thread (which lives on until the call returns, or until the process exits) and later calls
get a fresh thread. (Not a ``ThreadPoolExecutor``: its threads are joined at interpreter exit, so one hung
environment would keep the trainer from exiting.) Code that must run in the main thread (``signal.alarm``)
cannot be used inside an environment with a step timeout.

How the model's context is built and which tokens become training samples is the job of a
:class:`Prompter` (one per trajectory): per-step prompts (:mod:`grove.experience.per_step_prompts`) or one
growing token-exact conversation (:mod:`grove.experience.conversation`).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
import traceback
import weakref
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from grove.envs.actions import ParsedAction
from grove.envs.base import Environment, Observation
from grove.rollout.engine import RolloutEngine, SamplingParams, reusing_prefixes

__all__ = ["EnvironmentTimeout", "EpisodeRun", "Prompter", "SampleTokens", "Trajectory", "Turn", "run_episodes"]

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

    def begin(self, observation: Observation) -> None: ...

    def context(self) -> list[int] | None:
        """Token ids to generate the next action from; ``None`` when the context would be too long."""
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
    error: str | None = None  # "ExceptionType: message" when the environment raised
    context_overflow: bool = False
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
            "trajectory": [
                {
                    "observation": t.observation.text,
                    "anchor": repr(t.observation.anchor),
                    "model_text": t.text,
                    "action": t.parsed.action,
                    "valid": not t.invalid,
                    "reward": t.reward,
                    "penalty": t.penalty,
                }
                for t in self.turns
            ],
        }


@dataclass
class EpisodeRun:
    trajectories: list[Trajectory]
    generation_seconds: float
    environment_seconds: float
    generated_tokens: int
    environment_steps: int
    errors: int
    prompt_tokens: int = 0  # context tokens of every turn's generate call
    prompt_tokens_reused: int = 0  # of those, taken from the engine's cache (rollout.prefix_reuse)


class _ErrorLog:
    """Logs each (environment, exception type)'s traceback once per process."""

    seen: set[tuple[str, str]] = set()

    @classmethod
    def report(cls, env_name: str, exc: BaseException, where: str) -> str:
        key = (env_name, type(exc).__name__)
        if key not in cls.seen:
            cls.seen.add(key)
            log.warning(
                "environment %s raised in %s; the trajectory ends as failed and the run goes on "
                "(later errors of this type are only counted):\n%s",
                env_name, where, "".join(traceback.format_exception(exc)),
            )
        return f"{type(exc).__name__}: {exc}"


class EnvironmentTimeout(TimeoutError):
    """An environment's ``reset`` or ``step`` did not return within ``env.step_timeout_s``."""


def _serve_env_calls(calls: queue.SimpleQueue) -> None:
    """A worker thread's loop: run ``(future, fn, args)`` items until ``None``."""
    while (item := calls.get()) is not None:
        future, fn, args = item
        if future.set_running_or_notify_cancel():
            try:
                future.set_result(fn(*args))
            except BaseException as exc:  # noqa: BLE001 - handed to the waiting caller
                future.set_exception(exc)


class _EnvCalls:
    """Environment calls with a time limit (``timeout_s``; None: called directly, as without a limit).

    Each call runs in one reusable daemon thread; a call still running after ``timeout_s`` is abandoned with its
    thread (told to end once the call returns) and :class:`EnvironmentTimeout` is raised; the next call starts a
    fresh thread."""

    def __init__(self, timeout_s: float | None) -> None:
        self.timeout_s = timeout_s
        self._calls: queue.SimpleQueue | None = None
        self._finalizer: weakref.finalize | None = None

    def __call__(self, what: str, fn: Callable[..., Any], *args: Any) -> Any:
        if self.timeout_s is None:
            return fn(*args)
        if self._calls is None:
            self._calls = queue.SimpleQueue()
            threading.Thread(target=_serve_env_calls, args=(self._calls,), name="grove-env-calls", daemon=True).start()
            self._finalizer = weakref.finalize(self, self._calls.put, None)  # the thread ends with this object
        future: Future = Future()
        self._calls.put((future, fn, args))
        try:
            return future.result(timeout=self.timeout_s)
        except TimeoutError:
            if future.done():  # it finished just now, or the environment raised a TimeoutError of its own
                return future.result()
            self.close()  # abandon the hung thread: it ends when (if) the call returns
            raise EnvironmentTimeout(
                f"{what} did not return within {self.timeout_s:g} s (env.step_timeout_s); the trajectory ends here"
            ) from None

    def close(self) -> None:
        if self._finalizer is not None:
            self._finalizer()  # puts the stop marker, once
        self._calls = self._finalizer = None


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
    environment error (None: no limit, the calls are made directly)."""
    calls = _EnvCalls(step_timeout_s)
    trajectories: list[Trajectory] = []
    envs: list[Environment | None] = []
    prompters: list[Prompter] = []
    observations: list[Observation | None] = []
    env_seconds = gen_seconds = 0.0
    tokens = env_steps = errors = prompt_tokens = reused_tokens = 0
    for g, (task_id, seed) in enumerate(starts):
        for slot in range(group_size):
            traj = Trajectory(group=g, slot=slot, task_id=task_id, seed=seed)
            t0 = time.perf_counter()
            try:
                env = make_env()
                obs = calls("reset", env.reset, task_id, seed)
            except Exception as exc:  # noqa: BLE001 - an environment failure ends only its own trajectory
                env, obs = None, None
                traj.error = _ErrorLog.report(env_name, exc, "reset")
                errors += 1
            env_seconds += time.perf_counter() - t0
            prompter = make_prompter()
            if obs is not None:
                prompter.begin(obs)
            trajectories.append(traj)
            envs.append(env)
            prompters.append(prompter)
            observations.append(obs)

    active = [k for k, obs in enumerate(observations) if obs is not None]
    with reusing_prefixes(engine):  # the turns share weights: each reuses the previous turn's keys and values
        for turn_number in range(max_turns):
            contexts, running = [], []
            for k in active:
                ctx = prompters[k].context()
                if ctx is None:
                    trajectories[k].context_overflow = True
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
            still = []
            for row, k in enumerate(running):
                traj, obs = trajectories[k], observations[k]
                n = int(lengths[row])
                ids, lps = all_ids[row][:n], all_logprobs[row][:n]
                parsed = parse(out.texts[row], obs)
                reward, done, info, nxt = 0.0, False, {}, obs
                if parsed.valid:
                    try:
                        nxt, reward, done, info = calls("step", envs[k].step, parsed.action)
                        env_steps += 1
                    except Exception as exc:  # noqa: BLE001
                        traj.error = _ErrorLog.report(env_name, exc, "step")
                        errors += 1
                turn = Turn(
                    observation=obs,
                    action_ids=ids,
                    logprobs=lps,
                    text=out.texts[row],
                    parsed=parsed,
                    reward=float(reward),
                    penalty=0.0,
                    done=bool(done),
                    finish_reason=out.finish_reasons[row],
                    info=dict(info),
                )
                turn.penalty = invalid_penalty if turn.invalid else 0.0
                traj.turns.append(turn)
                traj.won = traj.won or bool(info.get("won", False))
                traj.done = bool(done)
                ends = traj.done or traj.failed or turn_number == max_turns - 1
                prompters[k].record(turn, None if ends else nxt)
                observations[k] = nxt
                if not ends:
                    still.append(k)
            env_seconds += time.perf_counter() - t0
            active = still
    calls.close()
    for traj, prompter in zip(trajectories, prompters, strict=True):
        traj.samples = prompter.samples() if traj.turns else []
    return EpisodeRun(trajectories, gen_seconds, env_seconds, tokens, env_steps, errors, prompt_tokens, reused_tokens)
