"""The generic gymnasium adapter (``gymnasium``) on real gymnasium environments, offline: text, actions, rewards and
success, anchors shared across copies and revisits, determinism by (task, seed), parameter errors naming the field,
and a GiGPO run whose anchor groups hold several steps."""

from __future__ import annotations

import logging

import pytest
from tests.test_experience_environments import env_args
from tests.test_train_e2e import metric_rows, run_cli

from grove.envs import build_environment
from grove.resolve import load_config

LAKE = {"env_id": "FrozenLake-v1", "kwargs": {"map_name": "4x4", "is_slippery": False}}
PATH_TO_GOAL = ["right", "right", "down", "down", "down", "right"]  # S F F F / F H F H / F F F H / H F F G


def lake(**extra):
    return build_environment("gymnasium", {**LAKE, **extra})


def test_frozenlake_plays_to_the_goal_with_gymnasiums_text_and_names():
    suite = lake()
    assert "Actions: left, down, right, up." in suite.instructions and suite.metadata["render"] == "ansi"
    env = suite.make()
    obs = env.reset(0, 0)
    assert obs.admissible_actions == ("left", "down", "right", "up") and obs.anchor == 0
    assert obs.text.splitlines()[0] == "[S]FFF" and obs.text.endswith("Marked: [S] red background.")
    anchors = []
    for action in PATH_TO_GOAL:
        t = env.step(action)
        anchors.append(t.observation.anchor)
    assert anchors == [1, 2, 6, 10, 14, 15]
    assert t.done and t.reward == 1.0 and t.info == {"won": True, "lost": False, "truncated": False}
    assert "(Right)" in t.observation.text
    with pytest.raises(RuntimeError, match="reset"):
        env.step("left")
    env.reset(0, 0)
    env.step("down")
    t = env.step("right")  # into the hole at row 2, column 2
    assert t.done and t.reward == 0.0 and t.info["lost"] and not t.info["won"]


def test_an_unknown_action_is_a_no_op_step_and_max_steps_truncates():
    env = lake(max_steps=2).make()
    env.reset(0, 0)
    t = env.step("jump")
    assert t.info["invalid_action"] and not t.done and t.observation.anchor == 0 and "Unknown action" in t.observation.text
    t = env.step("RIGHT")  # names compare case-insensitively
    assert t.observation.anchor == 1 and t.done and t.info["truncated"] and not t.info["won"]


def test_anchors_are_shared_across_copies_and_revisits():
    suite = lake()
    a, b = suite.make(), suite.make()
    start = a.reset(5, 1).anchor
    assert b.reset(5, 1).anchor == start
    assert a.step("right").observation.anchor == 1
    assert a.step("left").observation.anchor == start  # back where b stands
    assert b.step("left").observation.anchor == start  # the edge: b stays
    texts = {a.step("down").observation.text.splitlines()[-2], b.step("down").observation.text.splitlines()[-2]}
    assert len(texts) == 1


def test_reset_is_deterministic_in_task_and_seed():
    def play(suite, task, seed, actions):
        env = suite.make()
        out = [env.reset(task, seed).anchor]
        for action in actions:
            t = env.step(action)
            out.append(t.observation.anchor)
            if t.done:
                break
        return out

    slippery = lake(kwargs={"map_name": "4x4", "is_slippery": True})
    moves = ["right", "down"] * 5
    assert play(slippery, 3, 7, moves) == play(slippery, 3, 7, moves)
    assert len({tuple(play(slippery, 3, seed, moves)) for seed in range(6)}) > 1  # the slips depend on the seed
    blackjack = build_environment("gymnasium", {"env_id": "Blackjack-v1"})
    deals = [blackjack.make().reset(task, 0).anchor for task in range(8)]
    assert len(set(deals)) > 1  # the task id is the deal
    assert all(blackjack.make().reset(task, 99).anchor == deal for task, deal in enumerate(deals))


def test_blackjack_is_described_from_its_observation():
    suite = build_environment("gymnasium", {"env_id": "Blackjack-v1"})
    assert suite.metadata["render"] == "observation" and suite.metadata["actions"] == ("stick", "hit")
    env = suite.make()
    obs = env.reset(4, 0)
    assert obs.text == f"Observation: ({obs.anchor[0]}, {obs.anchor[1]}, {obs.anchor[2]})"
    assert all(type(x) is int for x in obs.anchor)
    t = env.step("stick")
    assert t.done and t.reward in (-1.0, 0.0, 1.0, 1.5) and t.info["won"] == (t.reward > 0)


def test_won_if_terminated_and_survived():
    cliff = {"env_id": "CliffWalking-v1"}
    path = ["up"] + ["right"] * 11 + ["down"]
    for won_if, won in (("terminated", True), ("positive_return", False)):
        env = build_environment("gymnasium", {**cliff, "won_if": won_if}).make()
        env.reset(0, 0)
        for action in path:
            t = env.step(action)
        assert t.done and t.reward == -1.0 and t.info["won"] is won
    env = build_environment("gymnasium", {"env_id": "CartPole-v1", "won_if": "survived", "max_steps": 3}).make()
    obs = env.reset(0, 0)
    assert obs.admissible_actions == ("push left", "push right") and obs.text.startswith("Observation: (")
    for action in ("push left", "push right", "push left"):
        t = env.step(action)
    assert t.done and t.info["won"] and t.info["truncated"]


def test_action_names_given_and_anchor_none(caplog):
    with caplog.at_level(logging.WARNING, logger="grove.hubs.gymnasium.gymnasium_text"):
        suite = lake(actions=["W", "S", "E", "N"], anchor="none")
    assert "reduces to episode-level GRPO" in caplog.text
    env = suite.make()
    keys = {env.reset(0, 0).anchor, env.step("e").observation.anchor, env.step("w").observation.anchor}
    keys.add(suite.make().reset(0, 0).anchor)
    assert len(keys) == 4 and None not in keys  # a key of its own per step, never a shared None


@pytest.mark.parametrize(
    ("params", "field", "says"),
    [
        ({"env_id": "FrozenLak-v1"}, "env_id", "FrozenLake-v1"),
        ({"env_id": "Taxi-v3"}, "env_id", "Taxi-v4"),
        ({"env_id": "Pendulum-v1"}, "env_id", "only Discrete action spaces"),
        ({**LAKE, "actions": ["left", "right"]}, "actions", "4 actions"),
        ({**LAKE, "actions": ["a", "A", "b", "c"]}, "actions", "distinct"),
        ({"env_id": "Blackjack-v1", "render": "ansi"}, "render", "no 'ansi' rendering"),
        ({"env_id": "FrozenLake-v1", "kwargs": {"no_such_option": 1}}, "kwargs", "no_such_option"),
        ({"env_id": "FrozenLake-v1", "kwargs": {"render_mode": "ansi"}}, "kwargs", "render"),
        ({**LAKE, "anchor": "state"}, "anchor", "observation"),
        ({**LAKE, "won_if": "goal"}, "won_if", "survived"),
        ({**LAKE, "colour": True}, "colour", "Extra inputs"),
    ],
)
def test_bad_parameters_are_errors_naming_the_field(params, field, says):
    with pytest.raises(ValueError, match=field) as err:
        build_environment("gymnasium", params)
    assert says in str(err.value)


def test_the_example_builds():
    cfg = load_config("examples/gymnasium_frozenlake_gigpo.yaml")
    assert cfg.env.id == "gymnasium" and cfg.algorithm.advantage.id == "gigpo"
    suite = build_environment(cfg.env.id, cfg.env.params)
    assert suite.make().reset(0, 0).anchor == 0


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    from grove.models.tiny import create_tiny_model_dir

    return create_tiny_model_dir(tmp_path_factory.mktemp("tiny") / "model", seed=0, max_position_embeddings=1024)


def test_a_gigpo_run_pools_steps_from_shared_anchor_states(tiny_model, tmp_path):
    """CliffWalking through the adapter: the admissible parser with cutoff 0 makes every random answer a move, the
    copies of a group start in one state and revisit it after the cliff, and their returns differ (-1 a step, -100
    for the cliff), so GiGPO's step advantages are not all 0."""
    out = tmp_path / "run"
    env = (
        "{id: gymnasium, params: {env_id: CliffWalking-v1, won_if: terminated, num_train_tasks: 4, num_eval_tasks: 2}, "
        "max_turns: 4, action_parser: {id: admissible, cutoff: 0.0}}"
    )
    args = env_args(tiny_model, out, **{"env": env, "train.steps": 2, "eval.every": 0, "checkpoint.every": 0})
    result = run_cli(["train", *args])
    assert result.exit_code == 0, result.output
    rows = metric_rows(out)
    assert [r["step"] for r in rows] == [1, 2]
    for r in rows:
        assert r["invalid_action_rate"] == 0 and r["anchor_group_size_mean"] > 1
        assert r["anchor_steps_in_shared_groups"] > 0.5
        assert sum(v for k, v in r.items() if k.startswith("anchor_group_size_hist/") and not k.endswith("/1")) >= 2
    assert any(r["advantage/step_nonzero_frac"] > 0 for r in rows)
