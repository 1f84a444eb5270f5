"""TextWorld text adventures, generated offline and cached ("TextWorld: A Learning Environment for Text-based
Games", Côté et al., 2018).

Games come from TextWorld's challenge generators (``textworld.challenges``): ``coin_collector`` (walk a chain
of rooms to a coin; Yuan et al., 2018, "Counting to Explore and Generalize in Text-based Games"), ``simple``
(find, carry and place objects) and ``cooking`` (the First TextWorld Problems cooking games). A game is made
with ``challenge.make(settings, GameOptions(seeds=task_id))`` and compiled to Z-machine code by the Inform 7
compiler bundled in the ``textworld`` wheel (no network). Each game is generated once into ``cache_dir``
(``textworld/<challenge>-<hash of the settings>/<task_id>.z8`` and ``.json``, written under a temporary name
and renamed, so concurrent generators do not corrupt each other) and reused afterwards.

Task ids are the generator seeds: training games use seeds ``0..n-1``, evaluation games seeds from
:data:`EVAL_TASK_OFFSET` up, so no evaluation game is a training game. With ``eval_unseen_items`` the
evaluation games also come from TextWorld's held-out item distributions (cooking ``split="test"``, simple
``test=True``).

Observation: the game's feedback with the ASCII-art banner removed (at reset it holds the objective; the
objective is prepended when it does not). Admissible actions: TextWorld's ``admissible_commands``, sorted.
Anchor: the md5 of the sorted world facts (``str(fact)`` of ``state.facts``), equal for different action
orders that reach the same world state (``look`` or ``examine`` leave it unchanged). Reward: the score
increase of the step; ``info["won"]`` / ``info["lost"]`` are TextWorld's.

Oracle (:mod:`grove.envs.oracle`): the first of TextWorld's ``policy_commands`` (requested with the other infos),
the winning commands from the current state: TextWorld tracks the quests and, after a command off the policy,
adds the command that undoes it (e.g. ``go south`` after a wrong ``go north``).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import shutil
import tempfile
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from grove.envs.base import EnvironmentSuite, Observation, Transition
from grove.registry import ENVIRONMENTS

__all__ = [
    "EVAL_TASK_OFFSET",
    "TextWorldEnvironment",
    "TextWorldParams",
    "challenge_settings",
    "clean_feedback",
    "ensure_game",
    "facts_anchor",
    "game_dir",
    "textworld_suite",
]

logger = logging.getLogger(__name__)


EVAL_TASK_OFFSET = 100_000
"""First evaluation game seed (training games use seeds ``0..n-1``)."""


class TextWorldParams(BaseModel):
    """Parameters of the ``textworld`` environment."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    challenge: Literal["coin_collector", "simple", "cooking"] = Field(
        "coin_collector",
        description="TextWorld challenge: 'coin_collector' (find the coin), 'simple' (fetch and place "
        "objects) or 'cooking' (gather ingredients, prepare and eat a meal).",
    )
    level: int = Field(
        5,
        ge=1,
        le=300,
        description="coin_collector: difficulty 1..300 (levels 1-100: a chain of `level` rooms).",
    )
    rewards: Literal["dense", "balanced", "sparse"] = Field(
        "dense", description="simple: how often the score increases on the way to the goal."
    )
    goal: Literal["detailed", "brief", "none"] = Field(
        "detailed", description="simple: how much of the objective the opening text spells out."
    )
    recipe: int = Field(1, ge=1, le=5, description="cooking: ingredients in the recipe.")
    take: int = Field(1, ge=0, le=5, description="cooking: ingredients to find (at most `recipe`).")
    go: Literal[1, 6, 9, 12] = Field(1, description="cooking: number of rooms (1, 6, 9 or 12).")
    open: bool = Field(False, description="cooking: containers and doors must be opened.")
    cook: bool = Field(False, description="cooking: some ingredients must be cooked.")
    cut: bool = Field(False, description="cooking: some ingredients must be cut.")
    eval_unseen_items: bool = Field(
        False,
        description="Draw evaluation games from TextWorld's held-out item distributions (cooking split 'test', "
        "simple test=True); training games always use the training distribution.",
    )
    num_train_games: int = Field(20, ge=1, description="Training games, generator seeds 0..n-1.")
    num_eval_games: int = Field(5, ge=0, description="Evaluation games, generator seeds from 100000 up.")
    cache_dir: str | None = Field(
        None, description="Where generated games are kept; default $GROVE_CACHE_DIR or ~/.cache/grove."
    )
    max_steps: int = Field(50, ge=1, description="Steps before the episode is truncated.")


def challenge_settings(params: TextWorldParams, evaluation: bool = False) -> tuple[str, dict[str, Any]]:
    """TextWorld's challenge name and the settings dict its ``make`` takes (only the challenge's own knobs)."""
    unseen = evaluation and params.eval_unseen_items
    if params.challenge == "coin_collector":
        return "tw-coin_collector", {"level": params.level}
    if params.challenge == "simple":
        return "tw-simple", {"rewards": params.rewards, "goal": params.goal, "test": unseen}
    if params.take > params.recipe:
        raise ValueError(f"cooking: take={params.take} must not exceed recipe={params.recipe}")
    settings = {
        "recipe": params.recipe,
        "take": params.take,
        "go": params.go,
        "open": params.open,
        "cook": params.cook,
        "cut": params.cut,
        "drop": False,
        "recipe_seed": 0,
        "split": "test" if unseen else "train",
    }
    return "tw-cooking", settings


def _cache_root(params: TextWorldParams) -> Path:
    root = params.cache_dir or os.environ.get("GROVE_CACHE_DIR") or Path.home() / ".cache" / "grove"
    return Path(root).expanduser() / "textworld"


def game_dir(params: TextWorldParams, evaluation: bool = False) -> Path:
    """The cache folder of the games with these settings (the name hashes the settings and TextWorld's version)."""
    import textworld

    name, settings = challenge_settings(params, evaluation)
    key = json.dumps([name, settings, textworld.__version__], sort_keys=True)
    return _cache_root(params) / f"{name}-{hashlib.sha1(key.encode()).hexdigest()[:12]}"


def ensure_game(params: TextWorldParams, task_id: int) -> Path:
    """The compiled game of ``task_id`` (its generator seed), generating and caching it if needed."""
    evaluation = task_id >= EVAL_TASK_OFFSET
    folder = game_dir(params, evaluation)
    path = folder / f"{task_id}.z8"
    if path.is_file() and path.with_suffix(".json").is_file():
        return path
    import textworld
    import textworld.challenges
    import textworld.generator

    name, settings = challenge_settings(params, evaluation)
    folder.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f".{task_id}-", dir=folder))
    try:
        options = textworld.GameOptions()
        options.seeds = task_id
        options.path = str(scratch / "game.z8")
        options.force_recompile = True
        with _quiet_jericho():
            game = textworld.challenges.CHALLENGES[name][1](settings, options)
            compiled = Path(textworld.generator.compile_game(game, options))
        os.replace(compiled.with_suffix(".json"), path.with_suffix(".json"))
        os.replace(compiled, path)  # last: the .z8 existing means the game is complete
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return path


@contextlib.contextmanager
def _quiet_jericho() -> Iterator[None]:
    """Silence Jericho's "not fully supported" warning: it holds for every TextWorld game, whose score and
    state TextWorld tracks itself (Jericho's own score and change detection are not used)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"Game '.*' is not fully supported")
        yield


_BANNER_LINE = re.compile(r"[\s_|\\/$<>()-]*")
_NOISE_LINE = re.compile(r">.*|Would you like to RESTART, RESTORE a saved game, QUIT or UNDO.*")


def clean_feedback(text: str) -> str:
    """Feedback without the leading ASCII-art banner, the interpreter's prompt and status lines (``>`` ...), the
    end-of-game "RESTART, RESTORE ..." question and runs of blank lines."""
    lines = text.splitlines()
    start = 0
    while start < len(lines) and _BANNER_LINE.fullmatch(lines[start]):
        start += 1
    kept = [line.rstrip() for line in lines[start:] if not _NOISE_LINE.fullmatch(line.strip())]
    return re.sub(r"\n{3,}", "\n\n", "\n".join(kept)).strip()


def facts_anchor(facts: Sequence[Any]) -> str:
    """md5 of the sorted ``str(fact)`` of the world facts: the exact world state, independent of history."""
    return hashlib.md5("\n".join(sorted(str(f) for f in facts)).encode()).hexdigest()


class TextWorldEnvironment:
    """One copy of a TextWorld game; ``reset`` loads the game of ``task_id`` (seeds change nothing: games are
    deterministic). ``walkthrough`` is the game's solution, as TextWorld's generator wrote it; ``policy`` the
    winning commands from the current state (TextWorld's ``policy_commands``, the oracle's plan)."""

    def __init__(self, params: TextWorldParams, games: dict[int, Path]) -> None:
        self.params = params
        self.games = games
        self.walkthrough: tuple[str, ...] = ()
        self.policy: tuple[str, ...] = ()
        self._env: Any = None
        self._task: int | None = None
        self._score = 0.0
        self._steps = 0
        self._done = True

    def reset(self, task_id: int, seed: int) -> Observation:
        if task_id not in self.games:
            raise ValueError(f"textworld task {task_id} is not one of this suite's games")
        if self._env is None or self._task != task_id:
            import textworld

            self.close()
            infos = textworld.EnvInfos(
                admissible_commands=True, facts=True, score=True, max_score=True, won=True, lost=True,
                objective=True, feedback=True, extras=["walkthrough"], policy_commands=True,
            )  # fmt: skip
            with _quiet_jericho():
                self._env = textworld.start(str(self.games[task_id]), request_infos=infos)
            self._task = task_id
        state = self._env.reset()
        self.walkthrough = tuple(state.get("extra.walkthrough") or ())
        self.policy = tuple(state.get("policy_commands") or ())
        self._score, self._steps, self._done = float(state.score or 0), 0, False
        text = clean_feedback(state.feedback)
        objective = (state.objective or "").strip()
        if objective and objective not in text:
            text = f"Objective: {objective}\n\n{text}"
        return self._observe(state, text)

    def step(self, action: str) -> Transition:
        if self._done:
            raise RuntimeError("step() after the episode ended; call reset() first")
        state, _, game_over = self._env.step(action)
        self.policy = tuple(state.get("policy_commands") or ())
        self._steps += 1
        score = float(state.score or 0)
        reward, self._score = score - self._score, score
        truncated = self._steps >= self.params.max_steps and not game_over
        self._done = bool(game_over) or truncated
        info = {
            "won": bool(state.won),
            "lost": bool(state.lost),
            "truncated": truncated,
            "score": score,
            "max_score": state.max_score,
        }
        return Transition(self._observe(state, clean_feedback(state.feedback)), reward, self._done, info)

    def oracle_action(self) -> str | None:
        """The first command of TextWorld's winning policy from the current state (``policy_commands``);
        ``None`` when the episode is over, the game can no longer be won, or the policy is longer than the steps
        left."""
        if self._done or not self.policy or len(self.policy) > self.params.max_steps - self._steps:
            return None
        return self.policy[0]

    def close(self) -> None:
        if self._env is not None:
            self._env.close()
            self._env = None

    def _observe(self, state: Any, text: str) -> Observation:
        commands = tuple(sorted(state.admissible_commands or ()))
        return Observation(text, facts_anchor(state.facts), commands or None)


@ENVIRONMENTS.register("textworld", params=TextWorldParams)
def textworld_suite(params: TextWorldParams) -> EnvironmentSuite:
    """TextWorld games: generates (or finds in the cache) every training and evaluation game up front.

    A game takes 1-2 s to generate on one CPU core (the first one of a process 2-4 s: TextWorld parses its
    grammars), once; cached games load in milliseconds.
    """
    challenge_settings(params)  # validates the cooking knobs before any generation
    train = list(range(params.num_train_games))
    evaluation = list(range(EVAL_TASK_OFFSET, EVAL_TASK_OFFSET + params.num_eval_games))
    todo = [
        t for t in train + evaluation if not (game_dir(params, t >= EVAL_TASK_OFFSET) / f"{t}.z8").is_file()
    ]
    if todo:
        logger.info(
            "generating %d TextWorld %s games into %s", len(todo), params.challenge, _cache_root(params)
        )
    games = {t: ensure_game(params, t) for t in train + evaluation}
    instructions = (
        "You are playing a text adventure game. Read the observation, which describes where you are and "
        "what happened, and reach the objective given at the start. Each turn, send one command, for "
        "example 'go north', 'take coin' or 'open door'; the currently admissible commands are listed.\n"
        "Think briefly, then answer with exactly one command inside <action>...</action>, for example "
        "<action>go north</action>. You may also give the number of a listed command, for example "
        "<action>2</action>."
    )
    return EnvironmentSuite(
        name="textworld",
        make=lambda: TextWorldEnvironment(params, games),
        train_tasks=train,
        eval_tasks=evaluation,
        instructions=instructions,
        metadata={"params": params.model_dump(), "games": {t: str(p) for t, p in games.items()}},
    )
