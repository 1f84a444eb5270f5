"""TextWorld games generated offline and cached (grove.wings.games.text_games).

One cooking game and one held-out game are generated per test session into a temporary cache (a few seconds).
"""

from __future__ import annotations

import time

import pytest

pytest.importorskip("textworld")

from grove.envs import build_environment  # noqa: E402
from grove.wings.games.text_games import (  # noqa: E402
    EVAL_TASK_OFFSET,
    TextWorldParams,
    challenge_settings,
    clean_feedback,
    game_dir,
)

PARAMS = {"challenge": "cooking", "num_train_games": 1, "num_eval_games": 1}


# the games are generated once, on one xdist worker (make test)
pytestmark = pytest.mark.xdist_group("textworld_games")


@pytest.fixture(scope="session")
def cache(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(tmp_path_factory.mktemp("grove-cache"))


@pytest.fixture(scope="session")
def suite(cache):
    return build_environment("textworld", {**PARAMS, "cache_dir": cache})


def test_games_are_cached_and_reused(suite, cache):
    files = {
        p: p.stat().st_mtime_ns for p in map(__import__("pathlib").Path, suite.metadata["games"].values())
    }
    assert len(files) == 2 and all(p.suffix == ".z8" and p.with_suffix(".json").is_file() for p in files)
    assert all(cache in str(p) for p in files)
    assert not [p for p in next(iter(files)).parent.iterdir() if p.name.startswith(".")]  # no scratch left
    started = time.perf_counter()
    again = build_environment("textworld", {**PARAMS, "cache_dir": cache, "max_steps": 7})
    assert time.perf_counter() - started < 1.0
    assert {p: p.stat().st_mtime_ns for p in files} == files and again.metadata["games"] == suite.metadata[
        "games"
    ]


def test_train_and_eval_games_come_from_disjoint_seeds(suite):
    assert list(suite.train_tasks) == [0] and list(suite.eval_tasks) == [EVAL_TASK_OFFSET]
    env = suite.make()
    train = env.reset(0, 0)
    held_out = env.reset(EVAL_TASK_OFFSET, 0)
    assert train.anchor != held_out.anchor and train.text != held_out.text


def test_reset_is_deterministic_and_clean(suite):
    one, two = suite.make().reset(0, 0), suite.make().reset(0, 5)
    assert one == two
    assert "$$" not in one.text and not one.text.startswith((" ", "\n"))
    assert not [line for line in one.text.splitlines() if line.startswith(">")]
    assert "cook" in one.text.lower() and "-= Kitchen =-" in one.text
    assert list(one.admissible_actions) == sorted(one.admissible_actions) and "look" in one.admissible_actions
    assert isinstance(one.anchor, str) and len(one.anchor) == 32


def test_the_walkthrough_wins(suite):
    env = suite.make()
    env.reset(0, 0)
    assert env.walkthrough
    steps = [env.step(command) for command in env.walkthrough]
    assert steps[-1].done and steps[-1].info["won"] and not steps[-1].info["lost"]
    assert sum(t.reward for t in steps) == steps[-1].info["max_score"] > 0
    assert all(not t.done for t in steps[:-1])
    with pytest.raises(RuntimeError, match="reset"):
        env.step("look")


def test_commutative_commands_reach_the_same_anchor(suite):
    env = suite.make()
    start = env.reset(0, 0)
    takes = [c for c in start.admissible_actions if c.startswith("take ") and "cookbook" not in c][:2]
    assert len(takes) == 2, start.admissible_actions
    first = [env.step(c).observation for c in takes]
    env.reset(0, 0)
    second = [env.step(c).observation for c in reversed(takes)]
    assert first[-1].anchor == second[-1].anchor != start.anchor
    assert first[0].anchor != second[0].anchor  # different intermediate states
    assert env.step("look").observation.anchor == second[-1].anchor  # looking changes nothing


def test_truncation(cache):
    env = build_environment("textworld", {**PARAMS, "cache_dir": cache, "max_steps": 2}).make()
    env.reset(0, 0)
    first, second = env.step("look"), env.step("look")
    assert not first.done and second.done and second.info["truncated"] and not second.info["won"]
    assert second.reward == 0


def test_settings_and_cache_folders(tmp_path):
    coin = TextWorldParams(level=3, cache_dir=str(tmp_path))
    assert challenge_settings(coin) == ("tw-coin_collector", {"level": 3})
    simple = TextWorldParams(
        challenge="simple", rewards="sparse", eval_unseen_items=True, cache_dir=str(tmp_path)
    )
    assert challenge_settings(simple)[1] == {"rewards": "sparse", "goal": "detailed", "test": False}
    assert challenge_settings(simple, evaluation=True)[1]["test"] is True
    assert game_dir(simple) != game_dir(simple, evaluation=True)
    cooking = TextWorldParams(challenge="cooking", cache_dir=str(tmp_path))
    assert challenge_settings(cooking)[1]["split"] == "train" == challenge_settings(cooking, True)[1]["split"]
    assert game_dir(cooking) == game_dir(cooking, evaluation=True)
    assert game_dir(coin).parent == tmp_path / "textworld" and game_dir(coin).name.startswith(
        "tw-coin_collector-"
    )
    assert game_dir(coin) != game_dir(TextWorldParams(level=4, cache_dir=str(tmp_path)))
    with pytest.raises(ValueError, match="take=3"):
        build_environment(
            "textworld", {"challenge": "cooking", "recipe": 1, "take": 3, "cache_dir": str(tmp_path)}
        )
    with pytest.raises(ValueError, match="level"):
        build_environment("textworld", {"level": 0})


def test_default_cache_dir_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("GROVE_CACHE_DIR", str(tmp_path))
    assert game_dir(TextWorldParams()).parent == tmp_path / "textworld"


def test_clean_feedback_strips_the_banner_and_prompt():
    raw = "\n\n  ____  __\n |  \\| $$\n  \\$$ $$ \n\nWelcome!\n\n\n\n-= Room =-\nHi.\n>   -= Room =-0/1\n"
    assert clean_feedback(raw) == "Welcome!\n\n-= Room =-\nHi."
