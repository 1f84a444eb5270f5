"""Sokoban by reverse play (grove.wings.games.sokoban): deterministic, solvable, exact grid anchors, gym-sokoban rewards."""

from __future__ import annotations

import itertools
from collections import deque

import pytest

from grove.envs import build_environment
from grove.wings.games.sokoban import EVAL_TASK_OFFSET
from grove.wings.games.sokoban_levels import MOVES, SokobanLevel, generate_level, render_grid


def shortest_solution(level: SokobanLevel) -> int:
    """Optimal number of moves, by breadth-first search over (player, boxes)."""
    start = (level.player, level.boxes)
    depth = {start: 0}
    queue = deque([start])
    while queue:
        player, boxes = state = queue.popleft()
        if boxes == level.targets:
            return depth[state]
        for dr, dc in MOVES.values():
            nxt = (player[0] + dr, player[1] + dc)
            if nxt not in level.floor:
                continue
            if nxt in boxes:
                beyond = (nxt[0] + dr, nxt[1] + dc)
                if beyond not in level.floor or beyond in boxes:
                    continue
                boxes = (boxes - {nxt}) | {beyond}
            new = (nxt, frozenset(boxes))
            if new not in depth:
                depth[new] = depth[state] + 1
                queue.append(new)
            boxes = state[1]
    raise AssertionError("unsolvable level")


def test_levels_are_deterministic_unsolved_and_solvable():
    a, b = generate_level(17), generate_level.__wrapped__(17)
    assert a == b
    assert len({render_grid(lv, lv.boxes, lv.player) for lv in map(generate_level, range(50))}) > 30
    for task in range(60):
        level = generate_level(task)
        assert level.boxes != level.targets and len(level.boxes) == len(level.targets) == 1
        assert level.player in level.floor and level.player not in level.boxes
        assert 2 <= shortest_solution(level) <= len(level.solution)


@pytest.mark.parametrize("params", [{}, {"dim_room": 7, "num_boxes": 2, "search_depth": 60}])
def test_the_reverse_play_solution_wins(params):
    suite = build_environment("sokoban", {"num_train_tasks": 40, "num_eval_tasks": 5, **params})
    env = suite.make()
    for task in list(suite.train_tasks) + list(suite.eval_tasks):
        env.reset(task, 0)
        steps = [env.step(a) for a in env.level.solution]
        assert [t.done for t in steps] == [False] * (len(steps) - 1) + [True]
        assert steps[-1].info["won"] and steps[-1].reward == pytest.approx(-0.1 + 1 + 10)
        assert "*" in steps[-1].observation.anchor and "X" not in steps[-1].observation.anchor


def test_reset_is_deterministic_and_the_observation_is_the_grid():
    suite = build_environment("sokoban", {"num_train_tasks": 10, "num_eval_tasks": 2})
    one, two = suite.make().reset(3, 0), suite.make().reset(3, 99)
    assert one == two
    grid = one.anchor
    assert one.text.startswith(grid) and "Legend: # wall" in one.text
    assert one.admissible_actions == ("up", "down", "left", "right")
    rows = grid.splitlines()
    assert len(rows) == 6 and all(len(r) == 6 for r in rows) and set(rows[0]) == {"#"}
    assert sum(r.count("X") for r in rows) == 1 and sum(r.count("P") + r.count("S") for r in rows) == 1


def test_same_state_by_different_move_orders_has_the_same_anchor():
    suite = build_environment("sokoban", {"num_train_tasks": 30, "num_eval_tasks": 1})
    found = 0
    for task in suite.train_tasks:
        for a, b in itertools.combinations(MOVES, 2):
            first, second = suite.make(), suite.make()
            first.reset(task, 0), second.reset(task, 0)
            ab = [first.step(a), first.step(b)]
            ba = [second.step(b), second.step(a)]
            if all(t.info["moved"] for t in ab + ba) and (first.player, first.boxes) == (
                second.player,
                second.boxes,
            ):
                assert ab[-1].observation.anchor == ba[-1].observation.anchor
                assert ab[-1].observation.anchor != ab[0].observation.anchor
                found += 1
    assert found > 10


def test_returning_to_a_state_gives_its_anchor_again():
    env = build_environment("sokoban", {"num_train_tasks": 10, "num_eval_tasks": 1}).make()
    opposite = {"up": "down", "down": "up", "left": "right", "right": "left"}
    for task in range(10):
        start = env.reset(task, 0).anchor
        for move in MOVES:
            env.reset(task, 0)
            there = env.step(move)
            if there.info["moved"] and env.boxes == set(env.level.boxes):  # a walk, not a push
                back = env.step(opposite[move])
                assert there.observation.anchor != start and back.observation.anchor == start
                return
    pytest.fail("no free first move in ten levels")


def blocked_move(env, task: int) -> str:
    for move in MOVES:
        env.reset(task, 0)
        if not env.step(move).info["moved"]:
            return move
    raise AssertionError(f"task {task} has no blocked first move")


def test_blocked_and_unknown_moves_cost_a_step_and_change_nothing():
    env = build_environment("sokoban", {"num_train_tasks": 5, "num_eval_tasks": 1, "max_steps": 3}).make()
    start = env.reset(0, 0)
    move = blocked_move(env, 0)
    env.reset(0, 0)
    t = env.step(move)
    assert t.reward == pytest.approx(-0.1) and t.observation.anchor == start.anchor and not t.done
    assert "cannot move" in t.observation.text
    unknown = env.step("jump")
    assert (
        unknown.info["invalid_action"] and unknown.reward == 0 and unknown.observation.anchor == start.anchor
    )
    last = env.step(move)
    assert last.done and last.info["truncated"] and not last.info["won"]
    with pytest.raises(RuntimeError, match="reset"):
        env.step(move)


def test_pushing_onto_and_off_a_target():
    env = build_environment("sokoban", {"num_train_tasks": 1, "num_eval_tasks": 0}).make()
    env.reset(0, 0)
    floor = frozenset((r, c) for r in (1, 3) for c in range(1, 5))
    env.level = SokobanLevel(6, floor, frozenset({(1, 3), (3, 4)}), frozenset({(1, 2), (3, 2)}), (1, 1), ())
    env.boxes, env.player = set(env.level.boxes), env.level.player
    assert env.grid().splitlines()[1] == "#PXO_#"
    on, off = env.step("right"), env.step("right")
    assert on.reward == pytest.approx(0.9) and on.observation.anchor.splitlines()[1] == "#_P*_#"
    assert off.reward == pytest.approx(-1.1) and off.observation.anchor.splitlines()[1] == "#__SX#"
    assert not off.done and not off.info["won"]


def test_eval_levels_are_disjoint_from_training_levels():
    suite = build_environment("sokoban", {"num_train_tasks": 300, "num_eval_tasks": 30})
    assert min(suite.eval_tasks) >= EVAL_TASK_OFFSET and len(suite.eval_tasks) == 30
    env = suite.make()
    train = {env.reset(t, 0).anchor for t in suite.train_tasks}
    assert not {env.reset(t, 0).anchor for t in suite.eval_tasks} & train


def test_params_are_checked():
    with pytest.raises(ValueError, match="num_boxes"):
        build_environment("sokoban", {"num_boxes": 4})
    with pytest.raises(ValueError, match="dim_room"):
        build_environment("sokoban", {"dim_room": 3})
