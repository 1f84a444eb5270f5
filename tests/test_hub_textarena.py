"""The TextArena adapter (``textarena``) on real TextArena 0.7.4 games, offline: observations, rewards and success,
invalid moves as no-ops, board anchors shared across copies, determinism by (task, seed) with the copies' random
generators kept apart, two-player games against the random and a custom opponent, errors naming the field, and a
GiGPO run whose anchor groups hold several steps."""

from __future__ import annotations

import random
import re
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest
from tests.test_experience_environments import env_args
from tests.test_train_e2e import metric_rows, run_cli

from grove.envs import build_environment
from grove.hubs.textarena.textarena_games import random_move
from grove.resolve import load_config

HANOI = ["[A C]", "[A B]", "[C B]", "[A C]", "[B A]", "[B C]", "[A C]"]


def lowest_listed_move(text: str) -> str:
    """A custom opponent: the lowest cell of the last 'Available Moves' line."""
    line = [x for x in text.splitlines() if x.startswith("Available Moves:")][-1]
    return min(re.findall(r"\[\d\]", line))


def suite(game: str, **params):
    return build_environment("textarena", {"game": game, **params})


def test_guess_the_number_is_won_by_bisection():
    s = suite("GuessTheNumber-v0")
    assert s.metadata == {"params": s.metadata["params"], "players": 1, "anchor": "board"}
    env = s.make()
    obs = env.reset(7, 0)
    assert obs.text.startswith("You are Player 0. You are playing Guess The Number.") and obs.anchor == ()
    assert obs.admissible_actions is None
    low, high, guesses = 1, 20, []
    while True:
        guess = (low + high) // 2
        guesses.append(guess)
        t = env.step(f"My guess: [{guess}]")
        assert t.observation.anchor == tuple(sorted(guesses)) and "You are Player 0" not in t.observation.text
        if t.done:
            break
        low, high = (guess + 1, high) if "higher" in t.observation.text else (low, guess - 1)
    assert t.reward == 1.0 and t.info == {"won": True, "lost": False, "truncated": False, "invalid_action": False}
    assert t.observation.text.startswith("Game over: Congratulations")


def test_tower_of_hanoi_anchors_are_the_towers_and_shared_by_copies():
    s = suite("TowerOfHanoi-v0")
    a, b = s.make(), s.make()
    start = a.reset(0, 0).anchor
    assert start == (("A", (3, 2, 1)), ("B", ()), ("C", ())) and b.reset(0, 0).anchor == start
    a.step("[A B]")
    assert a.step("[B A]").observation.anchor == start  # moved there and back: the same state as b's
    rewards = [b.step(move) for move in HANOI]
    assert rewards[-1].done and rewards[-1].reward == 1.0 and rewards[-1].info["won"]
    assert rewards[-1].observation.anchor == (("A", ()), ("B", ()), ("C", (3, 2, 1)))
    assert not any(t.done for t in rewards[:-1]) and all(t.reward == 0 for t in rewards[:-1])


def test_an_invalid_move_is_a_no_op_and_never_ends_the_game():
    env = suite("TowerOfHanoi-v0", max_turns=5).make()
    start = env.reset(0, 0).anchor
    for _ in range(4):  # TextArena's own allowance would end the game at the second
        t = env.step("move the small disk")
        assert t.info["invalid_action"] and not t.done and t.observation.anchor == start
        assert "invalid move" in t.observation.text
    t = env.step("[A C]")
    assert t.done and t.info["truncated"] and not t.info["invalid_action"] and t.reward == 0.0
    assert "Turn limit reached" in t.observation.text


def test_determinism_by_task_and_seed_with_the_copies_generators_apart():
    s = suite("2048-v0")
    a, b, c = s.make(), s.make(), s.make()
    outer = random.getstate()
    first = a.reset(3, 1)
    assert b.reset(3, 1) == first and c.reset(3, 2).anchor == first.anchor  # the task draws the start
    assert b.reset(4, 1).anchor != first.anchor or b.reset(5, 1).anchor != first.anchor
    b.reset(3, 1)
    diverged = False
    for move in ["[up]", "[left]", "[down]", "[right]"] * 2:
        ta, tb, tc = a.step(move), b.step(move), c.step(move)  # interleaved: each copy draws its own tiles
        assert ta.observation == tb.observation
        diverged |= ta.observation.anchor != tc.observation.anchor  # the new tiles depend on the seed
    assert diverged
    assert random.getstate() == outer  # the caller's generator is untouched


def test_copies_stepped_in_threads_stay_identical():
    s = suite("2048-v0")
    copies = [s.make() for _ in range(4)]

    def play(env):
        out = [env.reset(2, 5).anchor]
        for move in ["[up]", "[left]", "[down]", "[right]"] * 3:
            out.append(env.step(move).observation.anchor)
        return out

    with ThreadPoolExecutor(4) as pool:
        runs = list(pool.map(play, copies))
    assert all(run == runs[0] for run in runs)


def test_two_player_game_against_the_random_opponent():
    s = suite("TicTacToe-v0")
    assert s.metadata["players"] == 2 and "fixed opponent" in s.instructions
    results = []
    for seed in range(2):
        env = s.make()
        obs = env.reset(0, seed)
        assert "Available Moves: '[0]'" in obs.text and obs.anchor == (("", "", ""),) * 3
        texts, rng = [obs.text], random.Random(seed)
        while True:
            t = env.step(random_move(texts[-1], rng, set()))
            texts.append(t.observation.text)
            assert not t.info["invalid_action"]
            if t.done:
                break
            marks = sum(cell != "" for row in t.observation.anchor for cell in row)
            assert marks % 2 == 0  # the opponent answered each move
        assert t.reward in (-1.0, 0.0, 1.0) and t.info["won"] == (t.reward == 1.0)
        results.append(texts)
    replay = s.make()
    obs = replay.reset(0, 0)
    rng = random.Random(0)
    again = [obs.text]
    while len(again) < len(results[0]):
        again.append(replay.step(random_move(again[-1], rng, set())).observation.text)
    assert again == results[0]  # the opponent's moves are a function of (task, seed) and the agent's moves


def test_the_opponent_may_start_and_a_custom_opponent_plays():
    env = suite("KuhnPoker-v0").make()  # player 1 opens the first round
    obs = env.reset(0, 0)
    assert "Player 1: [" in obs.text and "available actions" in obs.text
    s = suite("TicTacToe-v0", opponent="tests.test_hub_textarena:lowest_listed_move")
    env = s.make()
    env.reset(0, 0)
    t = env.step("[4]")
    assert t.observation.anchor[0][0] == "X"  # the opponent took cell 0, the lowest free one
    t = env.step("[8]")
    assert t.observation.anchor[0][1] == "X"
    second = suite("TicTacToe-v0", agent_player=1).make().reset(0, 0)
    assert "You are Player 1" in second.text and sum(c != "" for row in second.anchor for c in row) == 1


@pytest.mark.parametrize(
    ("params", "field", "says"),
    [
        ({"game": "GuessTheNumbr-v0"}, "game", "GuessTheNumber-v0"),
        ({"game": "Chekers"}, "game", "TowerOfHanoi-v0"),
        ({"game": "GuessWho-v0"}, "game", "OPENROUTER_API_KEY"),
        ({"game": "Taboo-v0"}, "game", "cannot be played offline by one player or two"),
        ({"game": "GuessTheNumber-v0", "game_kwargs": {"colours": 3}}, "game_kwargs", "colours"),
        ({"game": "GuessTheNumber-v0", "opponent": "tests.test_hub_textarena:lowest_listed_move"}, "opponent", "single-player"),
        ({"game": "GuessTheNumber-v0", "agent_player": 1}, "agent_player", "single-player"),
        ({"game": "TicTacToe-v0", "opponent": "tests.no_such_module:play"}, "opponent", "no_such_module"),
        ({"game": "TicTacToe-v0", "opponent": "greedy"}, "opponent", "package.module:function"),
        ({"game": "KuhnPoker-v0", "anchor": "board"}, "anchor", "no board"),
        ({"game": "TicTacToe-v0", "max_turns": 0}, "max_turns", "greater than or equal to 1"),
    ],
)
def test_bad_parameters_are_errors_naming_the_field(params, field, says):
    with pytest.raises(ValueError, match=field) as err:
        build_environment("textarena", params)
    assert says in str(err.value)


def test_a_game_without_a_board_gets_a_key_per_step(caplog):
    with caplog.at_level("WARNING", logger="grove.hubs.textarena.textarena_games"):
        s = suite("KuhnPoker-v0")
    assert s.metadata["anchor"] == "none" and "reduces to episode-level GRPO" in caplog.text
    env = s.make()
    keys = {env.reset(0, 0).anchor, s.make().reset(0, 0).anchor}
    assert len(keys) == 2 and None not in keys
    assert suite("TowerOfHanoi-v0", anchor="none").make().reset(0, 0).anchor[0] == "step"


def test_missing_textarena_names_the_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "textarena", None)
    with pytest.raises(ImportError, match=r"pip install textarena==0\.7\.4"):
        suite("GuessTheNumber-v0")


def test_the_example_builds():
    cfg = load_config("examples/textarena_gigpo.yaml")
    assert cfg.env.id == "textarena" and cfg.algorithm.advantage.id == "gigpo"
    s = build_environment(cfg.env.id, cfg.env.params)
    assert s.metadata["anchor"] == "board" and s.make().reset(0, 0).anchor[0] == ("A", (3, 2, 1))


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    from grove.models.tiny import create_tiny_model_dir

    return create_tiny_model_dir(tmp_path_factory.mktemp("tiny") / "model", seed=0, max_position_embeddings=1024)


def test_a_gigpo_run_pools_steps_from_shared_anchor_states(tiny_model, tmp_path):
    """Tower of Hanoi: the copies of a group start from the same towers, and the untrained model's answers (no
    bracketed move) are invalid moves that keep them, so a group's steps pool in the start's anchor group. (The
    gymnasium adapter's run checks non-zero step advantages; here every return is equal.)"""
    out = tmp_path / "run"
    env = (
        "{id: textarena, params: {game: TowerOfHanoi-v0, num_train_tasks: 4, num_eval_tasks: 2}, max_turns: 3, "
        "prompt: conversation, action_parser: {id: raw}}"
    )
    args = env_args(tiny_model, out, **{"env": env, "train.steps": 2, "eval.every": 0, "checkpoint.every": 0})
    result = run_cli(["train", *args])
    assert result.exit_code == 0, result.output
    rows = metric_rows(out)
    assert [r["step"] for r in rows] == [1, 2]
    for r in rows:
        assert r["anchor_group_size_mean"] > 1 and r["anchor_steps_in_shared_groups"] > 0.5
        assert r["anchor_group_size_hist/9+"] >= 1 and r["context_overflow_fraction"] == 0
        assert "advantage/step_nonzero_frac" in r
