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
:class:`grove.experience.episode_records.Prompter` (one per trajectory): per-step prompts (:mod:`grove.experience.per_step_prompts`) or one
growing token-exact conversation (:mod:`grove.experience.conversation`). A context that would not fit the
model's context (or ``env.max_context_tokens``) ends its trajectory as truncated at that turn
(``context_overflow``), warned once per environment; the prompter may instead cut a long observation to its
end (``env.prompt_overflow: truncate_observation``).
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from grove.envs.actions import ParsedAction
from grove.envs.base import Environment, Observation
from grove.experience.context_budget import ContextOverflow
from grove.experience.env_calls import EnvironmentCalls, EnvironmentTimeout
from grove.experience.env_failures import ERROR_KINDS, error_kind, report_failure
from grove.experience.episode_records import EpisodeRun, Prompter, Trajectory, Turn
from grove.experience.step_results import MalformedEnvironmentResult, checked_observation, checked_transition
from grove.rollout.engine import RolloutEngine, SamplingParams, reusing_prefixes
from grove.user_code import user_code
from grove.vision.image_table import ImageTable

__all__ = ["EnvironmentTimeout", "EpisodeSettings", "run_episodes"]

log = logging.getLogger("grove.experience")


_overflow_warned: set[str] = set()


def _warn_overflow(env_name: str, turn_number: int, overflow: ContextOverflow | None) -> None:
    """Say once per environment (and process) that a trajectory ended because its context would not fit."""
    if env_name in _overflow_warned or overflow is None:
        return
    _overflow_warned.add(env_name)
    log.warning(
        "environment %s: the context of turn %d is %s, more than the %d that %s leaves for it; the trajectory "
        "ends there as truncated (counted in context_overflow_trajectories; later overflows of this environment are "
        "only counted)%s",
        env_name, turn_number + 1, overflow.described, overflow.limit, overflow.budget,
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


@dataclass(frozen=True)
class EpisodeSettings:
    """How episodes are played: ``make_env`` makes one copy of the environment, ``make_prompter`` one
    :class:`~grove.experience.episode_records.Prompter` per trajectory, ``parse`` turns the model's text into an
    action, each turn samples with ``sampling``, an episode lasts at most ``max_turns`` turns and an invalid action is
    charged ``invalid_penalty``. ``env_name`` names the environment in failures and warnings. ``step_timeout_s``:
    seconds an environment's ``reset`` or ``step`` may take before its trajectory ends as an environment error
    (``None``: no limit, the calls are made directly, in this thread; with a limit the copies' calls of one turn
    run concurrently, one worker thread per copy)."""

    make_env: Callable[[], Environment]
    make_prompter: Callable[[], Prompter]
    parse: Callable[[str, Observation], ParsedAction]
    sampling: SamplingParams
    max_turns: int
    invalid_penalty: float
    env_name: str = "environment"
    step_timeout_s: float | None = None


def run_episodes(
    engine: RolloutEngine,
    settings: EpisodeSettings,
    starts: Sequence[tuple[int, int]],
    *,
    group_size: int,
    generator: torch.Generator,
) -> EpisodeRun:
    """Play ``group_size`` episodes from each ``(task_id, seed)`` in ``starts`` as ``settings`` say; group ``g`` is
    ``starts[g]``."""
    trajectories = [
        Trajectory(group=g, slot=slot, task_id=task_id, seed=seed)
        for g, (task_id, seed) in enumerate(starts)
        for slot in range(group_size)
    ]
    calls = EnvironmentCalls(settings.env_name, settings.step_timeout_s)
    try:
        return _play(engine, settings, trajectories, generator, calls)
    finally:
        calls.close()


def _started_environments(
    settings: EpisodeSettings,
    trajectories: list[Trajectory],
    calls: EnvironmentCalls,
    failures: _Failures,
) -> tuple[list[Environment | None], list[Observation | None]]:
    """One environment per trajectory, made in order in this thread (a suite's ``make`` may share state between
    copies) and reset to the trajectory's task and seed: each copy and its first observation, ``None`` where making
    or resetting failed (that trajectory ends as an environment failure)."""
    env_name = settings.env_name
    envs: list[Environment | None] = []
    for traj in trajectories:
        try:
            with user_code(f"environment {env_name!r} make"):
                envs.append(settings.make_env())
        except Exception as exc:  # noqa: BLE001 - an environment failure ends only its own trajectory
            envs.append(None)
            failures.fail(traj, exc, "make")
    resets = [(k, "reset", env.reset, (trajectories[k].task_id, trajectories[k].seed))
              for k, env in enumerate(envs) if env is not None]
    observations: list[Observation | None] = [None] * len(trajectories)
    for (k, *_), (obs, exc) in zip(resets, calls.run(resets), strict=True):
        if exc is None:
            try:
                observations[k] = checked_observation(obs, f"environment {env_name!r} reset")
            except MalformedEnvironmentResult as malformed:
                exc = malformed
        if exc is not None:
            envs[k] = None
            failures.fail(trajectories[k], exc, "reset")
    return envs, observations


def _turn_contexts(
    active: list[int], prompters: list[Prompter], trajectories: list[Trajectory], env_name: str, turn_number: int
) -> tuple[list[list[int]], list[int]]:
    """The contexts of this turn and the trajectories they belong to; a trajectory whose context does not fit the
    model ends here (marked, with one warning). The contexts' images: :func:`_context_images`."""
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
    return contexts, running


def _context_images(prompters: list[Prompter], running: list[int]) -> dict[str, ImageTable]:
    """The ``images`` keyword of this turn's generate call: the pixels of the running contexts (one owner each), or
    nothing when none holds an image."""
    tables = [getattr(prompters[k], "images", None) for k in running]
    return {"images": ImageTable.of_owners(tables)} if any(t is not None for t in tables) else {}


def _transition(
    result: tuple[Any, BaseException | None] | None,
    obs: Observation,
    traj: Trajectory,
    failures: _Failures,
    where: str,
) -> tuple[Observation, float, bool, dict[str, Any], bool]:
    """``(next observation, reward, done, info, stepped)`` of a turn: the checked result of its ``env.step``, or the
    turn's own observation with no reward when the action was invalid (no step) or the step failed (recorded);
    ``stepped``: the environment took the step."""
    if result is None:
        return obs, 0.0, False, {}, False
    value, exc = result
    if exc is None:
        try:
            return (*checked_transition(value, where), True)
        except MalformedEnvironmentResult as malformed:
            exc = malformed
    failures.fail(traj, exc, "step")
    return obs, 0.0, False, {}, False


def _append_turn(traj: Trajectory, turn: Turn, invalid_penalty: float) -> None:
    """Add ``turn`` to ``traj``, charging an invalid action the penalty; the episode is won once any turn says so."""
    turn.penalty = invalid_penalty if turn.invalid else 0.0
    traj.turns.append(turn)
    traj.won = traj.won or bool(turn.info.get("won", False))
    traj.done = turn.done


def _play(
    engine: RolloutEngine,
    settings: EpisodeSettings,
    trajectories: list[Trajectory],
    generator: torch.Generator,
    calls: EnvironmentCalls,
) -> EpisodeRun:
    """The turns of ``trajectories`` (fresh, one per episode), played to their end or ``settings.max_turns``."""
    env_name, max_turns = settings.env_name, settings.max_turns
    failures = _Failures(env_name)
    where_step = f"environment {env_name!r} step"
    t0 = time.perf_counter()
    envs, observations = _started_environments(settings, trajectories, calls, failures)
    env_seconds = time.perf_counter() - t0
    prompters = [settings.make_prompter() for _ in trajectories]
    for prompter, obs in zip(prompters, observations, strict=True):
        if obs is not None:
            prompter.begin(obs)
    gen_seconds = 0.0
    tokens = env_steps = prompt_tokens = reused_tokens = 0

    active = [k for k, obs in enumerate(observations) if obs is not None]
    with reusing_prefixes(engine):  # the turns share weights: each reuses the previous turn's keys and values
        for turn_number in range(max_turns):
            contexts, running = _turn_contexts(active, prompters, trajectories, env_name, turn_number)
            if not running:
                break
            out = engine.generate(contexts, 1, settings.sampling, generator, **_context_images(prompters, running))
            gen_seconds += out.seconds
            tokens += out.num_generated_tokens
            prompt_tokens += sum(len(c) for c in contexts)
            reused_tokens += out.prompt_tokens_reused
            lengths = out.response_mask.sum(1).tolist()
            all_ids, all_logprobs = out.response_ids.tolist(), out.logprobs.tolist()  # one conversion per turn
            t0 = time.perf_counter()
            actions = [settings.parse(out.texts[row], observations[k]) for row, k in enumerate(running)]
            steps = [(k, "step", envs[k].step, (a.action,)) for k, a in zip(running, actions, strict=True) if a.valid]
            results = dict(zip((k for k, *_ in steps), calls.run(steps), strict=True))
            still = []
            for row, k in enumerate(running):
                traj, obs, parsed = trajectories[k], observations[k], actions[row]
                n = int(lengths[row])
                nxt, reward, done, info, stepped = _transition(results.get(k), obs, traj, failures, where_step)
                env_steps += stepped
                turn = Turn(
                    observation=obs, action_ids=all_ids[row][:n], logprobs=all_logprobs[row][:n], text=out.texts[row],
                    parsed=parsed, reward=reward, penalty=0.0, done=done, finish_reason=out.finish_reasons[row],
                    info=info,
                )
                _append_turn(traj, turn, settings.invalid_penalty)
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
