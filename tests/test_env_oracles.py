"""Oracle actions of the built-in environments (grove.envs.oracle): following ``oracle_action()`` from reset wins the
example configs' training tasks within their ``max_turns`` (where the task allows it), its path is as short as an
independent breadth-first search says, it is admissible, it re-plans after a bad action, and it is ``None`` where
nothing can succeed any more. Reference optima come from hand-made maps (counted by hand) and from the BFS helpers
of the environment tests, which search the grid or gymnasium's table on their own."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml
from gymnasium.envs.toy_text.frozen_lake import FrozenLakeEnv
from tests.test_envs_kb_routing import KBS, QUESTIONS, make_env
from tests.test_envs_sokoban import shortest_solution
from tests.test_envs_toy_text import taxi_plan

from grove.envs import build_environment
from grove.envs.base import Transition
from grove.envs.oracle import OracleEnvironment, has_oracle
from grove.envs.transition_table_plans import plan_transition_table
from grove.wings.games import sokoban as sokoban_module
from grove.wings.games.cliffwalking import CliffWalkingEnvironment, CliffWalkingParams
from grove.wings.games.frozenlake import FrozenLakeEnvironment, FrozenLakeParams
from grove.wings.games.sokoban import SokobanEnvironment, SokobanParams
from grove.wings.games.sokoban_levels import SokobanLevel, generate_level, solve
from grove.wings.kb_routing.kb_routing_environment import KbRoutingEnv, KbRoutingParams, _Shared
from grove.wings.kb_routing.kb_routing_rewards import format_ok

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
TASKS = 20


def example_env(name: str) -> tuple[dict[str, Any], int]:
    """``env.params`` and ``env.max_turns`` of ``examples/<name>.yaml``."""
    env = yaml.safe_load((EXAMPLES / f"{name}.yaml").read_text())["env"]
    return env["params"], env["max_turns"]


def follow(env: Any, max_turns: int, actions: Sequence[str] = ()) -> tuple[list[str], list[Transition]]:
    """Play ``actions`` (already reset), then the oracle until the episode ends, it gives up or ``max_turns`` pass;
    every oracle action must be one of the listed admissible ones."""
    played: list[str] = []
    steps: list[Transition] = []
    admissible = None
    for turn in range(max_turns):
        action = actions[turn] if turn < len(actions) else env.oracle_action()
        if action is None:
            break
        if turn >= len(actions) and admissible is not None:
            assert action in admissible
        step = env.step(action)
        played.append(action)
        steps.append(step)
        admissible = step.observation.admissible_actions
        if step.done:
            break
    return played, steps


def won(steps: Sequence[Transition]) -> bool:
    return bool(steps) and steps[-1].done and bool(steps[-1].info.get("won"))


# -- the protocol ----------------------------------------------------------------------------------------------


def test_builtin_environments_offer_an_oracle_and_others_do_not():
    class NoOracle:
        oracle_action = "not a method"

    params = {"num_train_tasks": 1, "num_eval_tasks": 1}
    for env_id in ("frozenlake", "cliffwalking", "taxi", "sokoban"):
        env = build_environment(env_id, params).make()
        assert isinstance(env, OracleEnvironment) and has_oracle(env)
        assert env.oracle_action() is None  # before reset
    assert has_oracle(make_env()) and make_env().oracle_action() is None
    assert not has_oracle(object()) and not has_oracle(NoOracle())


# -- FrozenLake -------------------------------------------------------------------------------------------------

DETOUR = ["SFFFF", "HHHHF", "FFFFF", "FHHHH", "FFFFG"]
"""5×5 map whose only safe path snakes: right 4, down 2, left 4, down 2, right 4 (16 moves)."""
DETOUR_PATH = ["right"] * 4 + ["down"] * 2 + ["left"] * 4 + ["down"] * 2 + ["right"] * 4


class HandMadeLake(FrozenLakeEnvironment):
    def __init__(self, desc: list[str], slippery: bool = False, max_steps: int = 100) -> None:
        super().__init__(FrozenLakeParams(slippery=slippery, max_steps=max_steps))
        self.desc = desc

    def _make(self, task_id: int) -> Any:
        return FrozenLakeEnv(desc=self.desc, is_slippery=self.params.slippery)


def lake_shortest_path(desc: Sequence[str]) -> int:
    """Fewest moves from S to G over non-hole tiles (BFS on the grid itself)."""
    rows, cols = len(desc), len(desc[0])
    depth = {(0, 0): 0}
    frontier = [(0, 0)]
    while frontier:
        nxt = []
        for r, c in frontier:
            if desc[r][c] == "G":
                return depth[(r, c)]
            for dr, dc in ((0, 1), (1, 0), (0, -1), (-1, 0)):
                cell = (r + dr, c + dc)
                if 0 <= cell[0] < rows and 0 <= cell[1] < cols and desc[cell[0]][cell[1]] != "H" and cell not in depth:
                    depth[cell] = depth[(r, c)] + 1
                    nxt.append(cell)
        frontier = nxt
    raise AssertionError("no path")


def test_frozenlake_example_tasks_are_won_along_shortest_paths():
    params, max_turns = example_env("frozenlake_gigpo")
    suite = build_environment("frozenlake", params)
    env = suite.make()
    for task in list(suite.train_tasks)[:TASKS]:
        env.reset(task, 0)
        played, steps = follow(env, max_turns)
        assert won(steps), task
        assert len(played) == lake_shortest_path(env._env.unwrapped.desc.astype(str).tolist())


def test_frozenlake_hand_made_detour_and_recovery():
    env = HandMadeLake(DETOUR)
    env.reset(0, 0)
    played, steps = follow(env, 100)
    assert played == DETOUR_PATH and won(steps)
    env.reset(0, 0)  # two oracle moves, a step back, then 15 more
    played, steps = follow(env, 100, ["right", "right", "left"])
    assert len(played) == 2 + 1 + 15 and won(steps) and played[3:] == DETOUR_PATH[1:]
    env.reset(0, 0)
    _, steps = follow(env, 1, ["down"])  # into the hole below the start
    assert steps[-1].info["lost"] and env.oracle_action() is None


def test_frozenlake_unreachable_goal_and_too_few_steps_give_none():
    walled = HandMadeLake(["SFF", "FHH", "FHG"])
    walled.reset(0, 0)
    assert walled.oracle_action() is None
    short = HandMadeLake(DETOUR, max_steps=15)  # the goal is 16 moves away
    short.reset(0, 0)
    assert short.oracle_action() is None
    enough = HandMadeLake(DETOUR, max_steps=16)
    enough.reset(0, 0)
    assert won(follow(enough, 16)[1])


def test_slippery_frozenlake_follows_the_success_maximising_policy():
    # gymnasium's 4x4 map, slippery: the well-known optimal policy (left, up, up, up / left, -, left, - /
    # up, down, left, - / -, right, down, -), which steps away from holes since sideways slips are 1/3 each
    env = build_environment("frozenlake", {"slippery": True}).make()
    env.reset(0, 0)
    assert env.oracle_action() == "left"
    plan = env._plan[1]
    optimal = {0: 0, 1: 3, 2: 3, 3: 3, 4: 0, 6: 0, 8: 3, 9: 1, 10: 0, 13: 2, 14: 1}
    assert {s: int(plan.policy[100, s]) for s in optimal} == optimal
    # a 1x3 corridor S F G (slips up or down hit the edge and stay): on F only "right" cannot slip back to S
    # (up and down slip left with 1/3) once there is a second step to lose; on S "left" never moves
    corridor = HandMadeLake(["SFG"], slippery=True, max_steps=1)
    corridor.reset(0, 0)
    assert corridor.oracle_action() is None  # one step cannot cover two cells
    table = plan_transition_table(corridor._env.unwrapped.P, corridor._transition_kind, horizon=30)
    assert table.distance[:2].tolist() == [2, 1]
    assert set(table.policy[2:, 1].tolist()) == {2} and 0 not in table.policy[2:, 0]


# -- CliffWalking ----------------------------------------------------------------------------------------------


def test_cliffwalking_example_goes_around_the_cliff_and_recovers():
    params, max_turns = example_env("cliffwalking_gigpo")
    suite = build_environment("cliffwalking", params)
    env = suite.make()
    for task in suite.train_tasks:
        env.reset(task, 0)
        played, steps = follow(env, max_turns)
        assert played == ["up"] + ["right"] * 11 + ["down"] and won(steps)  # 13 moves, by hand
        assert all(t.reward == -1 for t in steps)
    env.reset(0, 0)
    played, steps = follow(env, 100, ["right"])  # off the cliff: -100 and back to the start
    assert steps[0].reward == -100 and len(played) == 1 + 13 and won(steps)
    assert env.oracle_action() is None  # the episode is over
    short = CliffWalkingEnvironment(CliffWalkingParams(max_steps=12))
    short.reset(0, 0)
    assert short.oracle_action() is None


# -- Taxi -------------------------------------------------------------------------------------------------------


def test_taxi_example_tasks_take_the_shortest_plan():
    params, max_turns = example_env("taxi_gigpo")
    suite = build_environment("taxi", params)
    env = suite.make()
    within = 0
    for task in list(suite.train_tasks)[:TASKS]:
        env.reset(task, 0)
        optimum = len(taxi_plan(env))
        played, steps = follow(env, params.get("max_steps", 200))
        assert won(steps) and len(played) == optimum, task
        within += optimum <= max_turns
        env.reset(task, 0)
        assert won(follow(env, max_turns)[1]) == (optimum <= max_turns)
    assert within == 8  # of these 20 start states, 8 are solvable in the example's 12 turns


def test_taxi_recovers_from_an_illegal_pickup():
    env = build_environment("taxi", {}).make()
    env.reset(3, 0)
    optimum = len(taxi_plan(env))
    assert env.oracle_action() != "pickup"  # the taxi is not at the passenger's stop
    played, steps = follow(env, 200, ["pickup"])
    assert steps[0].reward == -10 and won(steps) and len(played) == 1 + optimum


# -- Sokoban ----------------------------------------------------------------------------------------------------


def hand_level(rows: Sequence[str]) -> SokobanLevel:
    """A level from text rows in the module's legend (square, walls ``#``)."""
    floor, targets, boxes, player = set(), set(), set(), None
    for r, row in enumerate(rows):
        for c, ch in enumerate(row):
            if ch != "#":
                floor.add((r, c))
            if ch in "O*S":
                targets.add((r, c))
            if ch in "X*":
                boxes.add((r, c))
            if ch in "PS":
                player = (r, c)
    assert player is not None
    return SokobanLevel(len(rows), frozenset(floor), frozenset(targets), frozenset(boxes), player, ())


def sokoban_env(level: SokobanLevel, max_steps: int = 100) -> SokobanEnvironment:
    env = SokobanEnvironment(SokobanParams(max_steps=max_steps))
    env.reset(0, 0)
    env.level, env.boxes, env.player, env._solutions = level, set(level.boxes), level.player, {}
    return env


CORNER_TURN = hand_level(["######", "#P___#", "#_X__#", "#____#", "#___O#", "######"])
"""Box two down and two right of its target: 4 pushes, 1 move to get behind the box, 2 to turn the corner = 7."""


def test_sokoban_example_tasks_are_won_along_shortest_solutions(monkeypatch):
    params, max_turns = example_env("sokoban_gigpo")
    suite = build_environment("sokoban", {**params, "num_eval_tasks": 1})
    calls = []
    monkeypatch.setattr(sokoban_module, "solve", lambda *a, **k: calls.append(1) or solve(*a, **k))
    env = suite.make()
    for task in list(suite.train_tasks)[:TASKS]:
        env.reset(task, 0)
        played, steps = follow(env, max_turns)
        assert won(steps) and len(played) == shortest_solution(env.level) <= len(env.level.solution), task
    assert len(calls) == TASKS  # one search per episode


def test_sokoban_example_distribution_within_max_turns():
    params, max_turns = example_env("sokoban_gigpo")
    p = SokobanParams(**params)
    optimum = [
        len(solve(level, level.boxes, level.player))
        for level in (generate_level(t, p.dim_room, p.num_boxes, p.search_depth) for t in range(p.num_train_tasks))
    ]
    assert sum(n <= max_turns for n in optimum) == 997  # tasks 362, 746 and 938 need 9, 9 and 13 moves
    assert [optimum[t] for t in (362, 746, 938)] == [9, 9, 13]


def test_sokoban_hand_made_optimum_recovery_and_dead_states():
    env = sokoban_env(CORNER_TURN)
    played, steps = follow(env, 100)
    assert len(played) == 7 == shortest_solution(CORNER_TURN) and won(steps)
    env = sokoban_env(CORNER_TURN)
    played, steps = follow(env, 100, ["left", "right"])  # into the wall, then one step right
    assert won(steps) and len(played) == 2 + 6  # from (1,2) the box is one move closer
    env = sokoban_env(CORNER_TURN)
    _, steps = follow(env, 4, ["down", "down", "right", "up"])  # push the box up against the top wall
    assert steps[-1].info["moved"] and (1, 2) in env.boxes and env.oracle_action() is None
    # a box in a corner is dead; two boxes side by side along a wall freeze each other
    corner = sokoban_env(hand_level(["######", "#X___#", "#__P_#", "#____#", "#___O#", "######"]))
    assert corner.oracle_action() is None
    frozen = hand_level(["######", "#OXXO#", "#__P_#", "#____#", "#____#", "######"])
    assert solve(frozen, frozen.boxes, frozen.player) is None and sokoban_env(frozen).oracle_action() is None
    assert solve(CORNER_TURN, CORNER_TURN.boxes, CORNER_TURN.player, node_limit=5) is None
    assert sokoban_env(CORNER_TURN, max_steps=6).oracle_action() is None  # 7 moves needed, 6 left


def test_sokoban_level_that_starts_solved_is_won_by_any_keeping_move():
    env = sokoban_env(hand_level(["######", "#*___#", "#__P_#", "#____#", "#____#", "######"]))
    _, steps = follow(env, 1)
    assert won(steps) and len(steps) == 1


# -- TextWorld --------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def textworld_cache(request) -> str:
    """Games are generated once into pytest's cache dir (a rerun finds them there)."""
    pytest.importorskip("textworld")
    return str(request.config.cache.mkdir("grove-textworld"))


def textworld_suite(cache: str, games: int):
    params, _ = example_env("textworld_gigpo")
    return build_environment("textworld", {**params, "num_train_games": games, "num_eval_games": 0, "cache_dir": cache})


def test_textworld_oracle_wins_and_replans(textworld_cache):
    _, max_turns = example_env("textworld_gigpo")
    suite = textworld_suite(textworld_cache, 3)
    env = suite.make()
    for task in suite.train_tasks:
        obs = env.reset(task, 0)
        assert env.oracle_action() in obs.admissible_actions and env.policy == env.walkthrough
        played, steps = follow(env, max_turns)
        assert won(steps) and tuple(played) == env.walkthrough
        assert env.oracle_action() is None
    obs = env.reset(0, 0)
    walkthrough = env.walkthrough
    first = env.oracle_action()
    obs = env.step(first).observation
    opposite = {"east": "west", "west": "east", "north": "south", "south": "north"}
    back = f"go {opposite[first.removeprefix('go ')]}"  # back to the start room
    assert back in obs.admissible_actions
    played, steps = follow(env, max_turns, [back])
    assert played == [back, *walkthrough] and won(steps)


@pytest.mark.slow
def test_textworld_example_games_are_all_won(textworld_cache):
    _, max_turns = example_env("textworld_gigpo")
    suite = textworld_suite(textworld_cache, TASKS)
    env = suite.make()
    for task in suite.train_tasks:
        env.reset(task, 0)
        assert won(follow(env, max_turns)[1]), task


# -- kb_routing -------------------------------------------------------------------------------------------------


def test_kb_routing_gold_replies_on_hand_made_questions():
    env = make_env()
    env.reset(1, 0)  # two hops on the tables
    replies, steps = follow(env, 3)
    assert replies == [
        '<think>Search the tables knowledge base for "capital of France".</think>'
        '<query kb="tables">capital of France</query>',
        '<think>Next, search the tables knowledge base for "population of Paris".</think>'
        '<query kb="tables">population of Paris</query>',
        "<think>The results name 2,100,000.</think><answer>2,100,000</answer>",
    ]
    assert won(steps) and all(t.info["routing_correct"] and t.info["hit"] for t in steps[:2])
    assert all(format_ok(r) for r in replies) and env.oracle_action() is None
    env.reset(2, 0)  # no search needed
    assert follow(env, 3)[0] == ["<think>This needs no search.</think><answer>5</answer>"]


def test_kb_routing_replans_after_a_wrong_route_and_after_a_miss():
    env = make_env()
    env.reset(0, 0)
    replies, steps = follow(env, 3, ['<think>x</think><query kb="text">capital of France</query>'])
    assert not steps[0].info["routing_correct"] and steps[1].info["routing_correct"] and won(steps)
    assert len(replies) == 3
    empty = {"tables": type(KBS["tables"])("tables", {}), "text": KBS["text"]}  # finds nothing
    env = KbRoutingEnv(_Shared(KbRoutingParams(), QUESTIONS, None, kbs=empty))
    env.reset(0, 0)
    replies, steps = follow(env, 3)
    assert len(replies) == 2 and not steps[0].info["hit"]  # the gold search missed: answer all the same
    assert replies[1] == "<think>The searches point to the answer.</think><answer>Paris</answer>" and won(steps)


def test_kb_routing_renamed_knowledge_base():
    params = KbRoutingParams(knowledge_bases={"facts": {"id": "tables"}, "text": {"id": "wikipedia_text"}})
    env = KbRoutingEnv(_Shared(params, QUESTIONS, None, kbs={"facts": KBS["tables"], "text": KBS["text"]}))
    env.reset(0, 0)
    assert '<query kb="facts">capital of France</query>' in env.oracle_action()


@pytest.fixture(scope="module")
def knowledge_cache(request):
    """The real knowledge bases, cached where tests/test_kb_routing_training.py keeps them."""
    mp = pytest.MonkeyPatch()
    mp.setenv("GROVE_CACHE_DIR", str(request.config.cache.mkdir("grove-knowledge")))
    yield
    mp.undo()


@pytest.mark.xdist_group("hpo_ontology")  # the example's medical knowledge base loads the ontology on a fresh cache
def test_kb_routing_example_questions_follow_the_gold_route(knowledge_cache):
    params, max_turns = example_env("kb_routing_step_grpo")
    suite = build_environment("kb_routing", {**params, "max_train_questions": TASKS})
    env = suite.make()
    categories, hits = set(), []
    for task in suite.train_tasks:
        env.reset(task, 0)
        replies, steps = follow(env, max_turns)
        assert won(steps) and all(format_ok(r) for r in replies), env.question.question
        queries = [t.info for t in steps if t.info["step_type"] == "query"]
        route = [s.kb for s in env.question.steps]  # a later hop is skipped when a search already showed its answer
        assert [q["kb"] for q in queries] == route[: len(queries)] and (queries or not route)
        assert all(q["routing_correct"] for q in queries)
        hits += [q["hit"] for q in queries]
        categories.add(env.question.category)
    assert len(categories) >= 8
    # a gold search can miss: its article ranked below a longer one cut by the passage budget
    assert sum(hits) >= 0.9 * len(hits)
