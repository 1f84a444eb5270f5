"""Expert episodes of ``cfg.env``: the oracle's actions, rendered exactly as an RL rollout renders them.

Each episode resets one copy of the environment to a *training* task (the suite's ``train_tasks``, in the epoch
order of :class:`grove.experience.task_sampler.TaskSampler` seeded with ``seed``; environment seeds from a
generator seeded with ``seed``) and plays up to ``env.max_turns`` turns. At each turn the action is the
environment's ``oracle_action()`` (the protocol of :mod:`grove.envs.oracle`) or, with probability ``noise``, an
admissible action other than the oracle's, drawn uniformly (the oracle re-plans from the state it leads to, so the
demonstrations show recoveries: DART, Laskey et al. 2017, "DART: Noise Injection for Robust Imitation Learning").
The text of the action is written for the configured action parser (:mod:`grove.demos.action_text`), tokenised as
a rollout samples it (its tokens, then EOS), and fed to the config's prompter
(:func:`grove.experience.prompters.build_prompter`) as :func:`grove.experience.episodes.run_episodes` feeds it
(``begin``, then ``context`` and ``record`` per turn). The prompter's samples become the rows, so a demonstration's
tokens are the tokens a rollout that sampled the same actions would train on, in either prompt mode.

An episode ends when the environment says ``done``, after ``env.max_turns`` turns, when the oracle returns
``None`` (not won), or when the next context would not fit the model (``env.prompt_overflow``, as in a rollout).
The oracle is asked after ``reset`` and right after each ``step``, so an episode it gives up on ends with the turn
just taken, as a rollout cut there would (a conversation gets no further observation).

The environment's ``reset``, ``step`` and ``oracle_action`` run as a rollout runs them
(:class:`grove.experience.env_calls.EnvironmentCalls`): with ``env.step_timeout_s`` set, a call that does not
return in time ends its episode, which is counted and left out of the file, and the next episode goes on. A call
that raises (or returns something malformed) stops the demonstrations with a :class:`DemonstrationError` naming
the environment, the call, the episode and the turn: a demonstration needs an expert that works.
"""

from __future__ import annotations

import random
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch

from grove.config import GroveConfig
from grove.demos.action_text import action_text, checked_action
from grove.demos.demo_progress import DemoProgress
from grove.demos.rows import action_ids, demonstration_row
from grove.demos.summary import DemoCounts, nothing_to_write
from grove.envs import build_environment
from grove.envs.base import Environment, Observation
from grove.experience.env_calls import EnvironmentCalls, EnvironmentTimeout
from grove.experience.episode_records import Prompter, SampleTokens, Turn
from grove.experience.prompters import build_prompter
from grove.experience.step_results import MalformedEnvironmentResult, checked_observation, checked_transition
from grove.experience.task_sampler import TaskSampler
from grove.registry import ACTION_PARSERS
from grove.rollout.engine import context_length
from grove.sft.demonstration_format import tokenizer_fingerprint
from grove.user_code import user_code
from grove.vision.image_table import ImageTable
from grove.vision.pixel_files import pixel_layout_fingerprint, write_pixels
from grove.vision.processors import processor_of

__all__ = ["DemoEpisode", "DemonstrationError", "EnvironmentDemonstrations"]

#: how an episode ended
Ending = Literal["done", "max_turns", "oracle_gave_up", "context_overflow", "timeout"]


class DemonstrationError(ValueError):
    """The environment or its oracle failed while a demonstration was played (raised, called ``sys.exit``,
    returned something malformed); the message names the environment, the call, the episode, the turn and where in
    the user's code it raised."""


class _CallTimedOut(Exception):
    """An environment call of the episode did not return within ``env.step_timeout_s``."""


def _raised_at(exc: BaseException) -> str:
    """``" (raised at FILE:LINE, in FUNCTION)"``: the innermost frame of ``exc`` or of its first cause with one."""
    while exc.__cause__ is not None and exc.__cause__.__traceback__ is not None:
        exc = exc.__cause__
    if exc.__traceback__ is None:
        return ""
    frame = traceback.extract_tb(exc.__traceback__)[-1]
    return f" (raised at {frame.filename}:{frame.lineno}, in {frame.name})"


@dataclass(frozen=True)
class _Place:
    """Where in the demonstrations a call is made: the episode (counted from 0), its task and seed."""

    episode: int
    task_id: int
    seed: int

    def at(self, turn: int) -> str:
        return f"episode {self.episode + 1} (task {self.task_id}, seed {self.seed}), turn {turn + 1}"


@dataclass
class DemoEpisode:
    """One played demonstration: its start, its turns' commands (and whether each was the oracle's), its training
    samples, whether it was won and how it ended."""

    task_id: int
    seed: int
    commands: list[str] = field(default_factory=list)
    oracle: list[bool] = field(default_factory=list)
    action_ids: list[list[int]] = field(default_factory=list)
    samples: list[SampleTokens] = field(default_factory=list)
    won: bool = False
    ended: Ending = "max_turns"
    timeout: str = ""


class EnvironmentDemonstrations:
    """Plays expert episodes of ``cfg.env`` and turns them into demonstration rows."""

    def __init__(self, cfg: GroveConfig, tokenizer: Any, *, model_context: int | None = None) -> None:
        if cfg.env is None:
            raise ValueError("environment demonstrations need an `env` section in the config")
        self.cfg = cfg
        self.env_cfg = cfg.env
        self.tokenizer = tokenizer
        self.fingerprint = tokenizer_fingerprint(tokenizer)
        self.suite = build_environment(cfg.env.id, cfg.env.params, tokenizer=tokenizer)
        self.name = self.suite.name
        self.model_context = model_context if model_context is not None else context_length(None, tokenizer)
        self.parser_id = cfg.env.action_parser.id
        parser = ACTION_PARSERS.get(self.parser_id)
        self.parser_params = cfg.env.action_parser.validated(ACTION_PARSERS)
        self.parse = lambda text, obs: parser(text, obs, self.parser_params)
        self.max_new_tokens = cfg.rollout.max_new_tokens
        self.timeout_s = cfg.env.step_timeout_s
        vision = processor_of(tokenizer)
        self.pixel_layout = None if vision is None else pixel_layout_fingerprint(vision[0], vision[1].name)

    def prompter(self) -> Prompter:
        """The prompter a rollout of this config builds for one trajectory."""
        return build_prompter(
            self.cfg, self.suite.instructions, self.tokenizer, self.model_context, self.max_new_tokens
        )

    def starts(self, episodes: int, seed: int) -> list[tuple[int, int]]:
        """``(task_id, environment seed)`` of each episode: training tasks only, in seeded epoch order."""
        train = list(self.suite.train_tasks)
        tasks = [train[i] for i in TaskSampler(len(train), seed).next(episodes)]
        seeds = torch.randint(0, 2**31 - 1, (episodes,), generator=torch.Generator().manual_seed(seed)).tolist()
        return list(zip(tasks, seeds, strict=True))

    # ------------------------------------------------------------------ one episode
    def _failed(self, what: str, where: str, exc: Exception) -> DemonstrationError:
        if isinstance(exc, MalformedEnvironmentResult):
            text = f"{exc} ({where})"
        else:
            text = (
                f"environment {self.name!r} {what} failed in {where} while playing a demonstration: "
                f"{type(exc).__name__}: {exc}{_raised_at(exc)}"
            )
        return DemonstrationError(f"{text}; fix the environment's code, then run grove demos again")

    def _make(self, place: _Place) -> Environment:
        try:
            with user_code(f"environment {self.name!r} make"):
                return self.suite.make()
        except Exception as exc:  # noqa: BLE001 - named with the episode
            raise self._failed("make", place.at(0), exc) from exc

    def _call(self, calls: EnvironmentCalls, what: str, where: str, fn: Any, *args: Any) -> Any:
        """``fn(*args)`` as a rollout calls the environment (``env.step_timeout_s``); a timeout ends the episode
        (:class:`_CallTimedOut`), anything it raises is a :class:`DemonstrationError`."""
        ((result, exc),) = calls.run([(0, what, fn, args)])
        if exc is None:
            return result
        if isinstance(exc, EnvironmentTimeout):
            raise _CallTimedOut(
                f"environment {self.name!r} {what} did not return within {self.timeout_s:g} s (env.step_timeout_s) "
                f"in {where}"
            )
        raise self._failed(what, where, exc) from exc

    def _require_oracle(self, env: Environment) -> None:
        if not callable(getattr(env, "oracle_action", None)):
            raise ValueError(
                f"environment {self.name!r} ({type(env).__module__}.{type(env).__qualname__}) has no oracle_action(): "
                "demonstrations need an expert. Give the environment class a method `oracle_action(self) -> str | "
                "None` that returns the command an expert sends from the current state (called after reset and after "
                "each step; None when nothing leads to success any more); see grove.envs.oracle"
            )

    def _oracle(
        self, calls: EnvironmentCalls, env: Environment, observation: Observation, place: _Place, turn: int
    ) -> str | None:
        task_id, seed = place.task_id, place.seed
        command = self._call(calls, "oracle_action", place.at(turn), env.oracle_action)
        if command is None:
            return None
        if not isinstance(command, str) or not command.strip():
            raise ValueError(
                f"environment {self.name!r}: oracle_action() returned {command!r} at turn {turn + 1} of task "
                f"{task_id} (seed {seed}); it must return a non-empty command string, or None"
            )
        command = command.strip()
        listed = observation.admissible_actions
        if listed and command not in listed:
            raise ValueError(
                f"environment {self.name!r}: oracle_action() returned {command!r} at turn {turn + 1} of task {task_id} "
                f"(seed {seed}), which is not one of the observation's admissible actions {list(listed)}; the oracle "
                "must return one of them, spelled as listed"
            )
        return command

    def _noisy(self, command: str, observation: Observation, rng: random.Random, noise: float, where: str) -> str:
        """``command``, or with probability ``noise`` another admissible action drawn uniformly."""
        listed = observation.admissible_actions
        if not listed:
            raise ValueError(
                f"noise {noise} needs an environment that lists its actions, but environment {self.name!r} gives no "
                f"admissible_actions ({where}): a random action is drawn from them. Use noise 0 for this environment"
            )
        if rng.random() >= noise:
            return command
        others = [a for a in listed if a != command]
        return rng.choice(others) if others else command

    def play(
        self, task_id: int, seed: int, *, noise: float = 0.0, rng: random.Random | None = None, episode: int = 0,
        on_turn: Callable[[int], None] | None = None,
    ) -> DemoEpisode:
        """One episode from ``(task_id, seed)``: the oracle's actions (``noise``: see the module docstring).
        ``episode``: its number in the file (for messages); ``on_turn(n)``: called after the ``n``-th turn."""
        place = _Place(episode, task_id, seed)
        calls = EnvironmentCalls(self.name, self.timeout_s)
        try:
            return self._play(calls, place, noise, rng or random.Random(0), on_turn)
        except _CallTimedOut as timeout:
            return DemoEpisode(task_id, seed, ended="timeout", timeout=str(timeout))
        finally:
            calls.close()

    def _checked(self, check: Callable[..., Any], result: Any, what: str, where: str) -> Any:
        try:
            return check(result, f"environment {self.name!r} {what}")
        except MalformedEnvironmentResult as exc:
            raise self._failed(what, where, exc) from exc

    def _play(
        self, calls: EnvironmentCalls, place: _Place, noise: float, rng: random.Random,
        on_turn: Callable[[int], None] | None,
    ) -> DemoEpisode:
        task_id, seed = place.task_id, place.seed
        episode = DemoEpisode(task_id, seed)
        env = self._make(place)
        self._require_oracle(env)
        reset = self._call(calls, "reset", place.at(0), env.reset, task_id, seed)
        observation = self._checked(checked_observation, reset, "reset", place.at(0))
        prompter = self.prompter()
        prompter.begin(observation)
        turns: list[Turn] = []
        max_turns = self.env_cfg.max_turns
        command = self._oracle(calls, env, observation, place, 0)
        for turn_number in range(max_turns):
            if command is None:
                episode.ended = "oracle_gave_up"
                break
            if prompter.context() is None:
                episode.ended = "context_overflow"
                break
            sent = command
            if noise > 0:
                where = f"task {task_id}, seed {seed}, turn {turn_number + 1}"
                sent = self._noisy(command, observation, rng, noise, where)
            ids = action_ids(self.tokenizer, action_text(sent, self.parser_id, self.parser_params))
            text = self.tokenizer.decode(ids, skip_special_tokens=True)  # what a rollout's parser reads
            parsed = checked_action(sent, text, observation, self.parse, self.parser_id)
            result = self._call(calls, "step", place.at(turn_number), env.step, parsed.action)
            nxt, reward, done, info = self._checked(checked_transition, result, "step", place.at(turn_number))
            if info.get("invalid_action") and sent == command:
                raise ValueError(
                    f"environment {self.name!r} rejected its own oracle's action {command!r} (info['invalid_action']) "
                    f"at turn {turn_number + 1} of task {task_id} (seed {seed}); the oracle must return a command "
                    "that step accepts"
                )
            turn = Turn(
                observation=observation, action_ids=ids, logprobs=[0.0] * len(ids), text=text, parsed=parsed,
                reward=reward, penalty=self.env_cfg.invalid_action_penalty if info.get("invalid_action") else 0.0,
                done=done, finish_reason="eos", info=info,
            )
            turns.append(turn)
            episode.commands.append(sent)
            episode.oracle.append(sent == command)
            episode.action_ids.append(ids)
            episode.won = episode.won or bool(info.get("won", False))
            if done:
                episode.ended = "done"
            # the oracle is asked right after the step: when it gives up, this turn is the episode's last, and the
            # conversation gets no further observation (as in a rollout that ends here)
            command = None if done or turn_number == max_turns - 1 else self._oracle(
                calls, env, nxt, place, turn_number + 1
            )
            ends = done or command is None
            if ends and not done and turn_number < max_turns - 1:
                episode.ended = "oracle_gave_up"
            prompter.record(turn, None if ends else nxt)
            observation = nxt
            if on_turn is not None:
                on_turn(turn_number + 1)
            if ends:
                break
        episode.samples = prompter.samples() if turns else []
        return episode

    # ------------------------------------------------------------------ rows
    def rows(
        self, counts: DemoCounts, *, episodes: int, noise: float, keep: Literal["won", "all"], seed: int,
        progress: DemoProgress | None = None, image_dir: Path | None = None,
    ) -> Iterator[dict[str, Any]]:
        """The rows of ``episodes`` demonstrations (only the won ones with ``keep="won"``); ``counts`` is updated
        as they are played and ``progress`` told. A sample whose tokens hold pictures (a vision-language policy)
        has its pixels saved in ``image_dir`` (:mod:`grove.vision.pixel_files`), named in its row's ``pixels``
        relative to the demonstration file's folder. Raises :class:`grove.demos.summary.NoDemonstrationsError` after
        the last episode when not one was kept."""
        rng = random.Random(f"grove-demos-noise-{seed}")
        on_turn = None if progress is None else (lambda turn: progress.tick(counts, turn))
        for number, (task_id, env_seed) in enumerate(self.starts(episodes, seed)):
            episode = self.play(task_id, env_seed, noise=noise, rng=rng, episode=number, on_turn=on_turn)
            self._count(counts, episode)
            if progress is not None:
                progress.tick(counts)
            if (keep == "won" and not episode.won) or not episode.samples:
                continue
            counts.kept_episodes += 1
            counts.turns += len(episode.commands)
            counts.oracle_actions += sum(episode.oracle)
            counts.other_actions += len(episode.oracle) - sum(episode.oracle)
            counts.long_actions += sum(len(ids) > self.max_new_tokens for ids in episode.action_ids)
            for index, sample in enumerate(episode.samples):
                pixels = {} if sample.images is None else {
                    "pixels": self._save_pixels(sample.images, image_dir, f"{number:06d}-{index:03d}")}
                row = demonstration_row(
                    sample, self.tokenizer, self.fingerprint, source=self.name, task_id=task_id, episode=number,
                    won=episode.won, seed=env_seed, ended=episode.ended,
                    oracle=[episode.oracle[t] for t in sample.turns],
                    actions=[episode.commands[t] for t in sample.turns], **pixels,
                )
                counts.rows += 1
                counts.completion_tokens += sum(row["completion_mask"])
                yield row
        if not counts.kept_episodes:
            raise nothing_to_write(counts, source=self.name, keep=keep, max_turns=self.env_cfg.max_turns)

    def _save_pixels(self, table: ImageTable, image_dir: Path | None, stem: str) -> str:
        """Save a sample's pixels as ``image_dir/<stem>.safetensors``; the name its row gives them."""
        if image_dir is None or self.pixel_layout is None:
            raise ValueError(f"environment {self.name!r} shows pictures: give the folder to save their pixels in "
                             "(image_dir), and a vision-language policy")
        write_pixels(image_dir / f"{stem}.safetensors", table, self.pixel_layout)
        return f"{image_dir.name}/{stem}.safetensors"

    @staticmethod
    def _count(counts: DemoCounts, episode: DemoEpisode) -> None:
        """Count a played episode and how it ended."""
        counts.episodes += 1
        counts.won += episode.won
        counts.oracle_gave_up += episode.ended == "oracle_gave_up"
        counts.no_first_action += episode.ended == "oracle_gave_up" and not episode.commands
        counts.context_overflows += episode.ended == "context_overflow"
        counts.truncated += episode.ended == "max_turns" and not episode.won
        counts.lost += episode.ended == "done" and not episode.won
        counts.timeouts += episode.ended == "timeout"
        if episode.ended == "timeout" and not counts.first_timeout:
            counts.first_timeout = episode.timeout
