"""Gymnasium toy-text environments as text (grove.wings.games.frozenlake, cliffwalking, taxi) and build_environment (grove.envs.factory)."""

from __future__ import annotations

from collections import deque

import pytest
from pydantic import BaseModel, ConfigDict, Field

from grove.envs import EnvironmentSuite, Observation, Transition, build_environment
from grove.envs.toy_text_environment import EVAL_TASK_OFFSET
from grove.registry import ENVIRONMENTS
from grove.wings.games.frozenlake import _frozenlake_map
from grove.wings.games.taxi import TAXI_START_STATES


def play(env, actions) -> list[Transition]:
    return [env.step(a) for a in actions]


# -- FrozenLake --------------------------------------------------------------------------------------------


def test_frozenlake_renders_the_standard_map_and_reaches_the_goal():
    suite = build_environment("frozenlake", {})
    env = suite.make()
    obs = env.reset(0, 0)
    assert obs.anchor == 0 and obs.admissible_actions == ("left", "down", "right", "up")
    assert obs.text.splitlines()[1:5] == ["P . . .", ". H . H", ". . . H", "H . . G"]
    assert "row 1, column 1" in obs.text
    steps = play(env, ["right", "right", "down", "down", "down", "right"])
    assert [t.reward for t in steps] == [0, 0, 0, 0, 0, 1.0]
    assert [t.done for t in steps] == [False] * 5 + [True]
    assert steps[-1].info["won"] and not steps[-1].info["lost"] and steps[-1].observation.anchor == 15
    assert "reached the goal" in steps[-1].observation.text
    with pytest.raises(RuntimeError, match="reset"):
        env.step("left")


def test_frozenlake_compact_rendering_is_the_grid_and_position_with_the_legend_in_the_instructions():
    full, compact = build_environment("frozenlake", {}), build_environment("frozenlake", {"render": "compact"})
    a, b = full.make(), compact.make()
    obs_a, obs_b = a.reset(0, 0), b.reset(0, 0)
    assert obs_b.text.splitlines() == ["P . . .", ". H . H", ". . . H", "H . . G", "You are at row 1, column 1."]
    assert obs_b.anchor == obs_a.anchor and obs_b.admissible_actions == obs_a.admissible_actions
    assert "Legend" in obs_a.text and "Legend" in compact.instructions and "Legend" not in full.instructions
    assert compact.instructions.startswith(full.instructions)
    ta, tb = play(a, ["right", "right", "down"])[-1], play(b, ["right", "right", "down"])[-1]
    assert ta.observation.anchor == tb.observation.anchor == 6 and (ta.reward, ta.done) == (tb.reward, tb.done)
    assert tb.observation.text.splitlines()[-1] == "You are at row 2, column 3."
    hole = play(b, ["left"])[-1].observation.text  # the step's note still comes first
    assert hole.splitlines()[0] == "You fell into a hole. The episode is over." and len(hole) < len(ta.observation.text) + 40


def test_frozenlake_local_rendering_says_what_each_move_leads_to():
    compact, local = (
        build_environment("frozenlake", {"render": "compact"}),
        build_environment("frozenlake", {"render": "local"}),
    )
    assert local.instructions == compact.instructions
    env = local.make()
    first = env.reset(0, 0).text.splitlines()  # gymnasium's 4x4 map: SFFF / FHFH / FFFH / HFFG
    assert first[:4] == ["P . . .", ". H . H", ". . . H", "H . . G"]
    assert first[4] == "You are at row 1, column 1. Left: edge. Down: ice. Right: ice. Up: edge."
    at_6 = play(env, ["right", "right", "down"])[-1].observation.text.splitlines()[-1]
    assert at_6 == "You are at row 2, column 3. Left: hole. Down: ice. Right: hole. Up: ice."
    at_14 = play(env, ["down", "down"])[-1].observation.text.splitlines()[-1]
    assert at_14 == "You are at row 4, column 3. Left: ice. Down: edge. Right: goal. Up: ice."
    compact_env = compact.make()
    compact_env.reset(0, 0)
    assert compact_env.reset(0, 0).anchor == env.reset(0, 0).anchor


def test_frozenlake_hole_loses():
    env = build_environment("frozenlake", {}).make()
    env.reset(3, 1)
    last = play(env, ["down", "right"])[-1]
    assert last.done and last.reward == 0 and last.info["lost"] and not last.info["won"]


def test_frozenlake_same_state_by_different_paths_has_the_same_anchor_and_text():
    suite = build_environment("frozenlake", {})
    a, b = suite.make(), suite.make()
    a.reset(0, 0), b.reset(0, 0)
    ta = play(a, ["right", "right", "down"])[-1].observation
    tb = play(b, ["down", "down", "right", "right", "up"])[-1].observation
    assert ta.anchor == tb.anchor == 6 and ta.text == tb.text
    c = suite.make()
    c.reset(0, 0)
    assert play(c, ["down"])[-1].observation.anchor != ta.anchor


def test_frozenlake_random_maps_are_per_task_and_eval_maps_are_unseen():
    suite = build_environment("frozenlake", {"maps": "random", "num_train_tasks": 300, "num_eval_tasks": 20})
    train_maps = {_frozenlake_map(4, "random", 0.8, t) for t in suite.train_tasks}
    assert len(train_maps) > 50  # the id seeds the map
    assert list(suite.eval_tasks) == list(range(EVAL_TASK_OFFSET, EVAL_TASK_OFFSET + 20))  # the generator's draws
    assert len(suite.train_tasks) == 300 and len(set(suite.train_tasks)) == 300
    assert not {_frozenlake_map(4, "random", 0.8, t) for t in suite.eval_tasks} & train_maps
    skipped = sorted(set(range(max(suite.train_tasks) + 1)) - set(suite.train_tasks))
    assert skipped and all(  # training gives way: exactly the ids whose map is a held-out one are skipped
        _frozenlake_map(4, "random", 0.8, t) in {_frozenlake_map(4, "random", 0.8, e) for e in suite.eval_tasks}
        for t in skipped
    )
    env = suite.make()
    first = env.reset(7, 0).text
    env.reset(8, 0)
    assert env.reset(7, 5).text == first  # the map depends on the task only


def _holes(tasks) -> float:
    return sum("".join(_frozenlake_map(4, "random", 0.8, t)).count("H") for t in tasks) / len(tasks)


def test_frozenlake_novel_held_out_maps_keep_the_training_ids_and_are_harder():
    params = {"maps": "random", "num_train_tasks": 500, "num_eval_tasks": 50}
    novel = build_environment("frozenlake", {**params, "held_out": "novel"})
    fair = build_environment("frozenlake", params)
    assert list(novel.train_tasks) == list(range(500))
    assert min(novel.eval_tasks) >= EVAL_TASK_OFFSET and len(novel.eval_tasks) == 50
    train_maps = {_frozenlake_map(4, "random", 0.8, t) for t in novel.train_tasks}
    assert not {_frozenlake_map(4, "random", 0.8, t) for t in novel.eval_tasks} & train_maps
    # the common maps (few holes) are all in training, so 'novel' held-out maps have more holes than a fair draw
    # (3.7 against 2.6); the representative ones are close to the training maps (2.6 against 2.8)
    assert _holes(novel.eval_tasks) > _holes(fair.eval_tasks) + 0.5
    assert abs(_holes(fair.eval_tasks) - _holes(fair.train_tasks)) < 0.5
    assert _holes(novel.eval_tasks) - _holes(novel.train_tasks) > 2 * abs(_holes(fair.eval_tasks) - _holes(fair.train_tasks))


def test_frozenlake_slippery_is_deterministic_in_task_and_seed():
    suite = build_environment("frozenlake", {"slippery": True, "size": 8})
    moves = ["right", "down"] * 10

    def trace(task, seed):
        env = suite.make()
        env.reset(task, seed)
        out = []
        for m in moves:
            t = env.step(m)
            out.append(t.observation.anchor)
            if t.done:
                break
        return out

    assert trace(2, 11) == trace(2, 11)
    assert len({tuple(trace(2, s)) for s in range(8)}) > 1  # the seed matters


def test_unknown_actions_are_no_ops_and_episodes_truncate():
    env = build_environment("frozenlake", {"max_steps": 2}).make()
    env.reset(0, 0)
    t = env.step("jump")
    assert (
        t.info["invalid_action"]
        and t.observation.anchor == 0
        and not t.done
        and "Unknown action" in t.observation.text
    )
    t = env.step("Right")  # case-insensitive
    assert t.observation.anchor == 1 and t.done and t.info["truncated"] and not t.info["won"]


# -- CliffWalking -------------------------------------------------------------------------------------------


def test_cliffwalking_cliff_and_goal():
    suite = build_environment("cliffwalking", {"num_train_tasks": 5, "num_eval_tasks": 2})
    assert list(suite.train_tasks) == list(range(5)) and list(suite.eval_tasks) == [
        EVAL_TASK_OFFSET,
        EVAL_TASK_OFFSET + 1,
    ]
    env = suite.make()
    obs = env.reset(0, 0)
    assert obs.anchor == 36 and obs.text.splitlines()[4] == "P C C C C C C C C C C G"
    fall = env.step("right")
    assert fall.reward == -100 and fall.observation.anchor == 36 and not fall.done
    steps = play(env, ["up"] + ["right"] * 11 + ["down"])
    assert all(t.reward == -1 for t in steps) and steps[-1].done and steps[-1].info["won"]


# -- Taxi ------------------------------------------------------------------------------------------------------


def taxi_plan(env) -> list[str]:
    """Shortest action sequence to a successful dropoff, by BFS over gymnasium's transition table."""
    table = env._env.unwrapped.P
    start = env.state
    parent = {start: None}
    queue = deque([start])
    while queue:
        s = queue.popleft()
        for a, outcomes in table[s].items():
            _, nxt, _, done = outcomes[0]
            if done:
                plan = [env.actions[a]]
                while parent[s] is not None:
                    s, prev_a = parent[s]
                    plan.append(env.actions[prev_a])
                return plan[::-1]
            if nxt not in parent:
                parent[nxt] = (s, a)
                queue.append(nxt)
    raise AssertionError("no plan")


def test_taxi_tasks_are_distinct_start_states_and_a_plan_wins():
    suite = build_environment("taxi", {"num_train_tasks": 250, "num_eval_tasks": 50})
    env = suite.make()
    train = {env.reset(t, 0).anchor for t in suite.train_tasks}
    held_out = {env.reset(t, 0).anchor for t in suite.eval_tasks}
    assert len(train) == 250 and len(held_out) == 50 and not train & held_out
    obs = env.reset(4, 0)
    assert obs.admissible_actions == ("south", "north", "east", "west", "pickup", "dropoff")
    assert "Passenger: waiting at" in obs.text and "Destination:" in obs.text and "T" in obs.text
    assert env.reset(4, 9).anchor == obs.anchor  # the task fixes the start state
    steps = play(env, taxi_plan(env))
    assert steps[-1].done and steps[-1].info["won"] and steps[-1].reward == 20
    assert all(t.reward == -1 for t in steps[:-1])
    assert any("Passenger: in the taxi." in t.observation.text for t in steps)


def test_taxi_illegal_pickup_and_task_limits():
    env = build_environment("taxi", {}).make()
    obs = env.reset(0, 0)
    t = env.step("dropoff")  # no passenger aboard: always illegal
    assert t.reward == -10 and "Illegal" in t.observation.text and t.observation.anchor == obs.anchor
    with pytest.raises(ValueError, match="not in 0..299"):
        env.reset(TAXI_START_STATES, 0)
    with pytest.raises(ValueError, match="at most 300"):
        build_environment("taxi", {"num_train_tasks": 290, "num_eval_tasks": 20})


# -- build_environment -----------------------------------------------------------------------------------------


class Line:
    def reset(self, task_id: int, seed: int) -> Observation:
        self.pos = 0
        return Observation(str(self.pos), self.pos, ("step",))

    def step(self, action: str) -> Transition:
        self.pos += 1
        return Transition(
            Observation(str(self.pos), self.pos, ("step",)), 1.0, self.pos >= 2, {"won": self.pos >= 2}
        )


def tiny_suite(params: dict) -> EnvironmentSuite:
    """A user factory taking the plain params dict."""
    return EnvironmentSuite("line", Line, range(int(params.get("tasks", 2))), [99], "Say step.")


class TinyParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    tasks: int = Field(2, ge=1, description="training tasks")


def typed_suite(params: TinyParams) -> EnvironmentSuite:
    """A registered-style factory: its params model is validated first."""
    return EnvironmentSuite("line", Line, range(params.tasks), [99], "Say step.")


def not_a_suite(params: dict) -> dict:
    return {"name": "line"}


def test_every_environment_is_registered_with_documented_params():
    for id in ("frozenlake", "cliffwalking", "taxi", "sokoban", "textworld"):
        entry = ENVIRONMENTS.entry(id)
        assert entry.summary and entry.paper, id
        assert all(f.description for f in entry.params.model_fields.values()), id


def test_build_environment_by_id_validates_params():
    with pytest.raises(ValueError, match=r"size: .*Parameters it takes: size"):
        build_environment("frozenlake", {"size": 13})
    with pytest.raises(ValueError, match="maps_typo"):
        build_environment("frozenlake", {"maps_typo": "random"})
    with pytest.raises(ValueError, match="Did you mean 'sokoban'"):
        build_environment("sokoban2", {})


def test_build_environment_by_import_path():
    suite = build_environment(f"{__name__}:tiny_suite", {"tasks": 3})
    assert suite.name == "line" and list(suite.train_tasks) == [0, 1, 2]
    assert list(build_environment(f"{__name__}:typed_suite", {"tasks": 4}).train_tasks) == [0, 1, 2, 3]
    with pytest.raises(ValueError, match="tasks"):
        build_environment(f"{__name__}:typed_suite", {"tasks": 0})
    registered = build_environment("grove.wings.games.cliffwalking:cliffwalking_suite", {"num_train_tasks": 3})
    assert registered.name == "cliffwalking" and len(registered.train_tasks) == 3
    with pytest.raises(ValueError, match="num_train_task"):
        build_environment("grove.wings.games.cliffwalking:cliffwalking_suite", {"num_train_task": 3})
    with pytest.raises(ValueError, match="cannot import"):
        build_environment("no_such_module_xyz:f", {})
    with pytest.raises(ValueError, match="no attribute"):
        build_environment(f"{__name__}:missing", {})
    with pytest.raises(ValueError, match="not an EnvironmentSuite"):
        build_environment(f"{__name__}:not_a_suite", {})


def test_frozenlake_random_maps_of_other_sizes_and_fixed_sizes_checked():
    from grove.envs import build_environment

    suite = build_environment("frozenlake", {"size": 3, "maps": "random", "num_train_tasks": 20, "num_eval_tasks": 5})
    env = suite.make()
    obs = env.reset(suite.train_tasks[0], 0)
    assert obs.anchor == 0 and obs.text.count("\n") >= 3
    with pytest.raises(ValueError, match="fixed maps"):
        build_environment("frozenlake", {"size": 3})
