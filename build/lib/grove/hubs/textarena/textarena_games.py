"""TextArena games (``textarena==0.7.4``) as grove environments (``textarena``): single-player games, and two-player
games against a fixed opponent policy. TextArena: "TextArena" (Guertler et al., 2025).

**Observation.** The messages the agent's player received since its previous turn (its own move's echo left out;
of several boards only the latest), the game's rules (its prompt) opening the first observation (every
observation with ``repeat_rules``). The final observation adds TextArena's reason for the end. No admissible
actions are listed: TextArena reads the first bracketed move (``[3]``, ``[0 2]``) from the answer, and an answer
without brackets is bracketed whole (TextArena's ``ActionFormattingWrapper``), so the ``tag`` parser (the tag's
content) or ``full_text`` (the whole answer) fit.

**Rewards and success.** TextArena rewards only the end of a game: the agent's reward then (single-player games pay 1
for solving and a completion fraction otherwise; two-player games 1, 0 or -1) is the last transition's reward.
``info["won"]``: a single-player reward of at least 1, or a two-player reward above the opponent's. An invalid move is
a no-op step with ``info["invalid_action"] = True`` (TextArena's state is unchanged and its error allowance is never
spent by the agent); the game's own feedback is shown. After ``max_turns`` agent turns the episode is truncated with
reward 0.

**Opponent** (two-player games): ``random`` plays a uniformly random move of the last list of available/valid/legal
moves or actions the game showed it, else a random bracketed move among those its observation has shown (the
rules' examples, earlier listings); ``"package.module:function"`` is called with the opponent's whole observation so
far (every message it received, oldest first, as TextArena's LLM wrapper shows it) and returns its move. The opponent
gets 10 tries per turn; a tenth rejected move loses the game under TextArena's rule.

**Anchor** (``anchor: auto``, the default): the game's board when grove knows it (:data:`BOARD_ANCHORS`, else the
first of the game state's ``board``, ``grid``, ``towers``, ``piles`` or ``vehicles``), made hashable; for a game with
none, a key of its own per step (as ``anchor: none``), so GiGPO reduces to episode-level GRPO (logged once).

**Tasks and seeds.** Task ``i`` resets the game with TextArena's seed ``i`` (the secret number, the puzzle, the
deal); what is drawn afterwards (2048's new tiles, Minesweeper's mines, the random opponent) comes from a
generator seeded with ``(task_id, seed)``. TextArena draws from the global ``random`` and ``numpy.random``
generators; each copy keeps its own state of both, swapped in under a lock around every call into the game, so
copies do not disturb each other (or the caller's generators); what the game (or a custom opponent) prints to
stdout meanwhile is discarded (some games print debugging lines every move). Training ids ``0..n-1``, evaluation ids from 100000 up.
"""

from __future__ import annotations

import difflib
import io
import itertools
import logging
import random
import re
import sys
import threading
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager, redirect_stdout
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from grove.envs.base import EnvironmentSuite, Observation, Transition
from grove.envs.toy_text_environment import EVAL_TASK_OFFSET, reset_seed
from grove.registry import ENVIRONMENTS, import_callable
from grove.user_code import user_code

__all__ = ["BOARD_ANCHORS", "SINGLE_PLAYER_GAMES", "TextArenaEnvironment", "TextArenaParams", "textarena_suite"]

logger = logging.getLogger(__name__)


SINGLE_PLAYER_GAMES = (
    "2048-v0", "Bandit-v0", "Blackjack-v0", "Countdown-v0", "Crosswords-v0", "Cryptarithm-v0", "FifteenPuzzle-v0",
    "FrozenLake-v0", "GuessTheNumber-v0", "LightsOut-v0", "LogicPuzzle-v0", "Mastermind-v0", "Minesweeper-v0",
    "PegJump-v0", "RushHour-v0", "Secretary-v0", "Set-v0", "Slitherlink-v0", "Sokoban-v0", "Sudoku-v0",
    "ThreeCardMonte-v0", "TowerOfHanoi-v0",
)
"""Single-player games that start and play offline in textarena 0.7.4 without an API key (their ``-hard``,
``-small``... variants too). Wordle, Hangman, WordLadder and the other word games need nltk data downloaded at
reset; TwentyQuestions and GuessWho an OpenRouter key."""

BOARD_ANCHORS: dict[str, Callable[[Any], Any]] = {
    "GuessTheNumberEnv": lambda env: sorted(env.guessed_numbers),
    "MastermindEnv": lambda env: sorted(tuple(h["guess"]) for h in env.state.game_state["history"]),
    "MinesweeperEnv": lambda env: (env.grid, env.revealed, env.flags),
    "Game2048Env": lambda env: (env.state.game_state["board"], env.state.game_state["score"]),
    "SokobanEnv": lambda env: env.room_state,
    "FrozenLakeEnv": lambda env: env.state.game_state["player_pos"],
    "TowerOfHanoiEnv": lambda env: env.state.game_state["towers"],
    "PigDiceEnv": lambda env: (env.state.game_state["scores"], env.state.game_state["turn_total"]),
    "UltimateTicTacToeEnv": lambda env: tuple(env.state.game_state[k] for k in ("board", "macro_board", "next_micro_board")),
}
"""The anchor of the games whose board is not (only) the game state's ``board``, by TextArena class name."""

_BOARD_KEYS = ("board", "grid", "towers", "piles", "vehicles")
_OPPONENT_TRIES = 10
_UNIQUE_KEYS = itertools.count()
_GLOBAL_GENERATORS = threading.Lock()
_LISTING = re.compile(r"(?:available|valid|legal|possible)\s+(?:moves|actions)[^:\n]*:", re.IGNORECASE)
_BRACKETED = re.compile(r"\[[^\[\]\n]{1,40}\]")


class TextArenaParams(BaseModel):
    """Parameters of the ``textarena`` environment."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    game: str = Field(..., min_length=1, description="A TextArena game id, e.g. GuessTheNumber-v0 or TicTacToe-v0.")
    game_kwargs: dict[str, Any] = Field(default_factory=dict, description="Keyword arguments to textarena.make.")
    opponent: str = Field(
        "random",
        description="Two-player games: 'random' (a random listed valid move, else a random move the game showed) or "
        "'package.module:function' (the opponent's observation text -> its move).",
    )
    agent_player: Literal[0, 1] = Field(0, description="Two-player games: the player id the agent plays.")
    max_turns: int = Field(100, ge=1, description="Agent turns (invalid moves included) before truncation.")
    num_train_tasks: int = Field(1000, ge=1, le=EVAL_TASK_OFFSET, description="Training task ids 0..n-1 (game seeds).")
    num_eval_tasks: int = Field(100, ge=0, description="Held-out task ids from 100000 up (game seeds).")
    anchor: Literal["auto", "board", "none"] = Field(
        "auto",
        description="'board': the game's board made hashable (an error for a game without one); 'none': a key of "
        "its own per step (GiGPO reduces to episode-level GRPO); 'auto': board when the game has one, else none.",
    )
    repeat_rules: bool = Field(
        False, description="Repeat the game's rules at the top of every observation (per-step prompts without history)."
    )


def _fail(field: str, message: str) -> ValueError:
    return ValueError(f"environment 'textarena': {field}: {message}")


def _textarena() -> Any:
    try:
        import textarena
    except ImportError:
        raise ImportError("the 'textarena' environment needs TextArena: pip install textarena==0.7.4") from None
    return textarena


def freeze(value: Any) -> Hashable:
    """``value`` made hashable: lists and arrays become tuples, dicts sorted ``(key, value)`` tuples, sets frozensets,
    other objects their class name and attributes."""
    if hasattr(value, "tolist"):
        value = value.tolist()
    if isinstance(value, dict):
        return tuple(sorted((str(k), freeze(v)) for k, v in value.items()))
    if isinstance(value, list | tuple):
        return tuple(freeze(v) for v in value)
    if isinstance(value, set | frozenset):
        return frozenset(freeze(v) for v in value)
    slots = getattr(type(value), "__slots__", None)
    if slots is not None and not isinstance(value, str | bytes | int | float | bool | tuple):  # RushHour's vehicles
        return (type(value).__name__, tuple(freeze(getattr(value, n, None)) for n in slots))
    if hasattr(value, "__dict__") and not isinstance(value, type):  # a game's own objects
        return (type(value).__name__, freeze(vars(value)))
    return value


def board_anchor(env: Any) -> Hashable | None:
    """The game's board made hashable (:data:`BOARD_ANCHORS`, else a board-like key of the game state), or ``None``."""
    special = BOARD_ANCHORS.get(type(env).__name__)
    if special is not None:
        return freeze(special(env))
    game_state = getattr(env.state, "game_state", None) or {}
    key = next((k for k in _BOARD_KEYS if k in game_state), None)
    return None if key is None else freeze(game_state[key])


def _render(messages: list[tuple[int, str, Any]], roles: dict[int, str], skip_from: int | None) -> str:
    """Messages as text: the game's as they are, players' after their name; ``skip_from``'s own moves and malformed
    messages left out and, when ``skip_from`` is set, only the latest board kept."""
    parts: list[str] = []
    board = -1
    for sender, text, kind in messages:
        name = getattr(kind, "name", "")
        if not isinstance(sender, int) or not isinstance(text, str) or (name == "PLAYER_ACTION" and sender == skip_from):
            continue  # (a malformed message: Countdown-v0 passes its arguments out of order)
        if name == "GAME_BOARD" and skip_from is not None:
            if board >= 0:
                parts[board] = ""
            board = len(parts)
        parts.append(text.strip() if sender < 0 else f"{roles.get(sender, f'Player {sender}')}: {text.strip()}")
    return "\n\n".join(p for p in parts if p)


def random_move(text: str, rng: random.Random, tried: set[str]) -> str:
    """A random move of the last listing of available/valid/legal moves in ``text``, else of every bracketed move the
    text shows; moves in ``tried`` only when nothing else is left."""
    listings = list(_LISTING.finditer(text))
    candidates: list[str] = []
    if listings:
        paragraph = text[listings[-1].end() :].split("\n\n", 1)[0]
        candidates = _BRACKETED.findall(paragraph)
    if not candidates:
        candidates = _BRACKETED.findall(text)
    fresh = sorted(set(candidates) - tried) or sorted(set(candidates))
    return rng.choice(fresh) if fresh else "[0]"


class TextArenaEnvironment:
    """One copy of a TextArena game; the agent plays ``params.agent_player``, the opponent policy the other seat."""

    def __init__(self, params: TextArenaParams, num_players: int, anchored: bool, opponent: Callable[[str], str] | None):
        self.params = params
        self.num_players = num_players
        self._anchored = anchored
        self._opponent = opponent
        self._agent = params.agent_player if num_players == 2 else 0
        self._rng = random.Random()
        self._generators: tuple[Any, Any] = (random.getstate(), np.random.get_state())
        self._env: Any = None
        self._rules = ""
        self._opponent_messages: list[tuple[int, str, Any]] = []
        self._turns = 0
        self._done = True

    @contextmanager
    def _own_generators(self, seed: int | None = None) -> Iterator[None]:
        """The copy's own state of the global ``random`` and ``numpy.random`` generators (seeded anew when ``seed``
        is given), swapped in under a lock and out again afterwards; what the game prints is discarded."""
        with _GLOBAL_GENERATORS, redirect_stdout(io.StringIO()):
            outer = random.getstate(), np.random.get_state()
            if seed is None:
                random.setstate(self._generators[0])
                np.random.set_state(self._generators[1])
            else:
                random.seed(seed)
                np.random.seed(seed % 2**32)
            try:
                yield
            finally:
                self._generators = random.getstate(), np.random.get_state()
                random.setstate(outer[0])
                np.random.set_state(outer[1])

    def reset(self, task_id: int, seed: int) -> Observation:
        ta = _textarena()
        with self._own_generators(seed=task_id):
            env = ta.make(self.params.game, **self.params.game_kwargs)
            while isinstance(env, ta.Wrapper):
                env = env.env
            self._env = env
            env.reset(num_players=self.num_players, seed=task_id)
            episode = reset_seed(task_id, seed)
            random.seed(episode)
            np.random.seed(episode)
            self._rng.seed(episode + 1)
            self._opponent_messages, self._rules = [], ""
            self._play_opponent()
        self._turns, self._done = 0, False
        return self._observe(self._new_messages(), "")

    def step(self, action: str) -> Transition:
        if self._done:
            raise RuntimeError("step() after the episode ended; call reset() first")
        self._turns += 1
        state = self._env.state
        move = action if ("[" in action or "]" in action) else f"[{action}]"
        with self._own_generators():
            state.error_allowance = sys.maxsize  # the agent's invalid moves are no-ops, never a loss
            self._env.step(move)
            invalid = not state.done and getattr(state, "error_count", 0) > 0
            if not invalid:
                self._play_opponent()
        text = self._new_messages()
        truncated = not state.done and self._turns >= self.params.max_turns
        self._done = bool(state.done) or truncated
        reward, won = self._outcome()
        note = ""
        if state.done:
            note = f"Game over: {state.game_info.get(self._agent, {}).get('reason') or 'the game ended'}."
        elif truncated:
            note = f"Turn limit reached ({self.params.max_turns} turns)."
        info = {"won": won, "lost": bool(state.done) and not won, "truncated": truncated, "invalid_action": invalid}
        return Transition(self._observe(text, note), reward, self._done, info)

    def _outcome(self) -> tuple[float, bool]:
        rewards = self._env.state.rewards if self._env.state.done else None
        if not rewards:
            return 0.0, False
        mine = float(rewards.get(self._agent, 0.0))
        if self.num_players == 1:
            return mine, mine >= 1.0
        others = [float(r) for pid, r in rewards.items() if pid != self._agent]
        return mine, all(mine > r for r in others)

    def _new_messages(self) -> str:
        """The agent's messages since its previous turn, as text (the rules kept aside on the first)."""
        state = self._env.state
        messages, state.observations[self._agent] = state.observations[self._agent], []
        if not self._rules:
            self._rules = "\n".join(m[1].strip() for m in messages if getattr(m[2], "name", "") == "PROMPT")
        body = [m for m in messages if getattr(m[2], "name", "") != "PROMPT"]
        return _render(body, state.role_mapping, self._agent)

    def _play_opponent(self) -> None:
        """The opponent's turns until the agent's turn or the end (two-player games; inside ``_own_generators``)."""
        state = self._env.state
        for _ in range(10_000):
            if self.num_players == 1 or state.done or state.current_player_id == self._agent:
                return
            player, tried = state.current_player_id, set()
            for attempt in range(_OPPONENT_TRIES):
                self._opponent_messages += state.observations[player]
                state.observations[player] = []
                text = _render(self._opponent_messages, state.role_mapping, None)
                move = self._opponent_move(text, tried)
                tried.add(move)
                state.error_allowance = _OPPONENT_TRIES if attempt < _OPPONENT_TRIES - 1 else 0
                self._env.step(move)
                if state.done or state.current_player_id != player or getattr(state, "error_count", 0) == 0:
                    break
        raise RuntimeError(f"textarena {self.params.game}: the opponent played 10000 moves without the agent's turn")

    def _opponent_move(self, text: str, tried: set[str]) -> str:
        if self._opponent is None:
            return random_move(text, self._rng, tried)
        with user_code(f"textarena opponent {self.params.opponent!r}"):
            move = self._opponent(text)
        if not isinstance(move, str):
            raise TypeError(f"textarena opponent {self.params.opponent!r} returned {type(move).__name__}, not a str")
        return move

    def _observe(self, text: str, note: str) -> Observation:
        first = self._turns == 0 and not self._done
        rules = self._rules if (first or self.params.repeat_rules) else ""
        anchor = board_anchor(self._env) if self._anchored else None
        if anchor is None:
            anchor = ("step", next(_UNIQUE_KEYS))
        return Observation("\n\n".join(p for p in (rules, text, note) if p), anchor, None)


def _players(params: TextArenaParams) -> tuple[int, Any]:
    """``(players, a reset game)``: 1 for a single-player game, 2 for a two-player one; a ``ValueError`` naming the
    field when the game is unknown or cannot start offline."""
    ta = _textarena()
    from textarena.envs.registration import ENV_REGISTRY

    listing = f"Single-player games that run offline: {', '.join(SINGLE_PLAYER_GAMES)}"
    if params.game not in ENV_REGISTRY:
        close = difflib.get_close_matches(params.game, list(ENV_REGISTRY), n=5, cutoff=0.5)
        hint = f" Similar ids: {', '.join(close)}." if close else ""
        raise _fail("game", f"{params.game!r} is not a TextArena {ta.__version__} game.{hint} {listing}.")
    def reason(exc: Exception) -> str:
        return f"{type(exc).__name__}: {' '.join(str(exc).replace('*', '').split())[:160]}"

    try:
        ta.make(params.game, **params.game_kwargs)
    except TypeError as exc:
        raise _fail("game_kwargs", f"textarena.make({params.game!r}, **{params.game_kwargs!r}) failed: {exc}") from None
    except Exception as exc:  # a module that does not import, missing nltk data, an API key
        raise _fail("game", f"{params.game} cannot be made offline ({reason(exc)}). {listing}.") from None
    problems = []
    for players in (1, 2):
        copy = TextArenaEnvironment(params, players, False, None)
        try:
            copy.reset(0, 0)
        except Exception as exc:  # the wrong player count, missing nltk data
            problems.append(f"{players} player(s): {reason(exc)}")
            continue
        if players == 2 or isinstance(copy._env.state, ta.SinglePlayerState):
            return players, copy._env
        problems.append("1 player: not a single-player state")
    raise _fail("game", f"{params.game} cannot be played offline by one player or two ({'; '.join(problems)}). {listing}.")


@ENVIRONMENTS.register(
    "textarena",
    params=TextArenaParams,
)
def textarena_suite(params: TextArenaParams) -> EnvironmentSuite:
    """The suite of ``params.game``: the player's messages as observations, the end-of-game reward, task ``i`` seeded ``i``."""
    players, probe = _players(params)
    opponent = None
    if players == 1 and (params.opponent != "random" or params.agent_player != 0):
        field = "opponent" if params.opponent != "random" else "agent_player"
        raise _fail(field, f"{params.game} is a single-player game: it has no opponent and the agent is player 0")
    if params.opponent != "random":
        try:
            opponent = import_callable(params.opponent, "textarena opponent")
        except ValueError as exc:
            raise _fail("opponent", f"{exc} (or 'random')") from None
    has_board = board_anchor(probe) is not None
    if params.anchor == "board" and not has_board:
        raise _fail("anchor", f"{params.game} exposes no board grove can read; use anchor: none or auto")
    anchored = params.anchor != "none" and has_board
    if not anchored:
        logger.warning("textarena %s without a board anchor: every step is its own anchor group, so GiGPO's step "
                       "advantage is 0 and it reduces to episode-level GRPO", params.game)
    against = f" You play against a fixed opponent (player {1 - params.agent_player})." if players == 2 else ""
    instructions = (
        f"You are playing the TextArena game {params.game}.{against} The first observation states the rules. Give your "
        "move in square brackets as the rules show, for example <action>[3]</action>."
    )
    return EnvironmentSuite(
        name=f"textarena:{params.game}",
        make=lambda: TextArenaEnvironment(params, players, anchored, opponent),
        train_tasks=range(params.num_train_tasks),
        eval_tasks=range(EVAL_TASK_OFFSET, EVAL_TASK_OFFSET + params.num_eval_tasks),
        instructions=instructions,
        metadata={"params": params.model_dump(), "players": players, "anchor": "board" if anchored else "none"},
    )
