"""Step-GRPO (``step_grpo``): the hand-worked example of docs/step-grpo.md, the ordinal rule, and invariants
(zero-sum corresponding groups, layout independence, equality with GiGPO for anchor grouping of returns)."""

from __future__ import annotations

import dataclasses
import math
import random

import pytest
import torch

import grove.core  # noqa: F401  (registration)
from grove.batch import RolloutBatch, StepTable, step_kind_id
from grove.core.advantages.step_grpo import corresponding_steps, step_type_ordinal
from grove.core.segments import dense_index
from test_advantages_gigpo import make_agent_batch, per_step, random_trajs, run

QUERY, ANSWER = step_kind_id("query"), step_kind_id("answer")


def hand_batch() -> RolloutBatch:
    """One question, G = 3 (one sample per step). Rewards: a query step scores its routing, the answer step
    its correctness.

    * A answers at once, correctly:            answer(1)
    * B queries the right KB, answers wrongly: query(1), answer(0)
    * C queries a wrong KB, then the right one, then answers correctly: query(0), query(1), answer(1)
    """
    traj = [0, 1, 1, 2, 2, 2]
    index = [0, 0, 1, 0, 1, 2]
    kind = [ANSWER, QUERY, ANSWER, QUERY, QUERY, ANSWER]
    reward = [1.0, 1.0, 0.0, 0.0, 1.0, 1.0]
    n = len(traj)
    steps = StepTable(
        sample=torch.arange(n),
        group=torch.zeros(n, dtype=torch.long),
        trajectory=torch.tensor(traj),
        index=torch.tensor(index),
        anchor=torch.arange(n),
        reward=torch.tensor(reward, dtype=torch.float64),
        penalty=torch.zeros(n, dtype=torch.float64),
        terminal=torch.tensor([True, False, True, False, False, True]),
        columns={"kind": torch.tensor(kind)},
    )
    return RolloutBatch(
        prompt_ids=torch.ones(n, 1, dtype=torch.long),
        prompt_mask=torch.ones(n, 1, dtype=torch.bool),
        response_ids=torch.ones(n, 2, dtype=torch.long),
        response_mask=torch.tensor([[True, False]] * n),
        loss_mask=torch.tensor([[True, False]] * n),
        old_logprobs=torch.zeros(n, 2),
        rewards=torch.zeros(n, 1),
        reward_names=("env",),
        group_index=torch.zeros(n, dtype=torch.long),
        trajectory_index=torch.tensor(traj),
        step_index=torch.tensor(index),
        truncated=torch.zeros(n, dtype=torch.bool),
        steps=steps,
        token_steps=torch.tensor([[i, -1] for i in range(n)]),
    )


R3 = 1 / math.sqrt(3)  # (1 - 2/3) / std of {1, 1, 0} (n - 1 divisor: sqrt(1/3))
R2 = 1 / math.sqrt(2)  # (1 - 1/2) / std of {1, 0} (sqrt(1/2))

#: step order: A.answer, B.query, B.answer, C.query, C.query, C.answer
HAND = {
    # turn 0 = {A.answer 1, B.query 1, C.query 0}; turn 1 = {B.answer 0, C.query 1}; turn 2 = {C.answer} alone
    "index": [R3, R3, -R2, -2 * R3, R2, 0.0],
    # queries {1, 0, 1}, answers {1, 0, 1}
    "type": [R3, R3, -2 * R3, -2 * R3, R3, R3],
    # 1st queries {B 1, C 0}; 2nd queries {C} alone; answers {1, 0, 1}
    "type_and_ordinal": [R3, R2, -2 * R3, -R2, 0.0, R3],
}


@pytest.mark.parametrize("grouping", sorted(HAND))
def test_hand_worked_example(grouping):
    batch = hand_batch()
    out = run("step_grpo", batch, grouping=grouping, eps=0.0)
    assert out.advantages[:, 0].tolist() == pytest.approx(HAND[grouping], abs=1e-12)
    assert (out.advantages[:, 1] == 0).all()  # pads get nothing


def test_index_grouping_bias_in_the_example():
    """The documented bias: under turn-number grouping C's correct answer gets 0 (alone at turn 2) and B's wrong
    answer is judged against C's query; under type grouping every answer is judged against the answers."""
    adv = {g: run("step_grpo", hand_batch(), grouping=g, eps=0.0).advantages[:, 0] for g in HAND}
    assert adv["index"][5] == 0 and adv["type_and_ordinal"][5] > 0
    assert adv["type_and_ordinal"][0] == pytest.approx(adv["type_and_ordinal"][5])  # both right answers alike


def test_lone_raw_and_mean_norm():
    out = run("step_grpo", hand_batch(), grouping="type_and_ordinal", lone="raw", mode="mean_norm")
    # 2nd query of C alone: raw value 1; first queries 1 - 0.5, 0 - 0.5; answers minus 2/3
    expected = [1 / 3, 0.5, -2 / 3, -0.5, 1.0, 1 / 3]
    assert out.advantages[:, 0].tolist() == pytest.approx(expected, abs=1e-12)


def test_penalty_is_subtracted_from_the_step_value():
    batch = hand_batch()
    steps = batch.steps
    penalised = dataclasses.replace(steps, penalty=torch.tensor([0.0, 0.0, 0.0, 0.5, 0.0, 0.0], dtype=torch.float64))
    batch = dataclasses.replace(batch, steps=penalised)
    out = run("step_grpo", batch, grouping="type_and_ordinal", mode="mean_norm")
    # first queries {1, 0 - 0.5}: mean 0.25
    assert out.advantages[1, 0].item() == pytest.approx(0.75)
    assert out.advantages[3, 0].item() == pytest.approx(-0.75)


def test_outcome_weight_adds_the_episode_advantage():
    batch = hand_batch()
    base = run("step_grpo", batch, eps=0.0).advantages[:, 0]
    both = run("step_grpo", batch, eps=0.0, outcome_weight=0.5).advantages[:, 0]
    # episode scores: A 1, B 1, C 2 -> mean 4/3, std sqrt(1/3) over the three trajectories
    episode = {0: -R3, 1: -R3, 2: 2 * R3}
    traj = batch.steps.trajectory.tolist()
    assert (both - base).tolist() == pytest.approx([0.5 * episode[t] for t in traj], abs=1e-12)


def test_type_ordinal():
    steps = hand_batch().steps
    assert step_type_ordinal(steps).tolist() == [0, 0, 0, 0, 1, 0]
    perm = torch.tensor([5, 2, 0, 4, 1, 3])
    shuffled = steps.select(perm)
    assert step_type_ordinal(shuffled).tolist() == [[0, 0, 0, 0, 1, 0][i] for i in perm.tolist()]


@pytest.mark.parametrize("grouping", ["type_and_ordinal", "type", "index", "anchor"])
def test_corresponding_groups_sum_to_zero_and_stay_in_their_env_group(grouping):
    rng = random.Random(3)
    for _ in range(20):
        trajs = random_trajs(rng)
        batch, where = make_agent_batch(trajs)
        kinds = torch.tensor([rng.choice([QUERY, ANSWER]) for _ in range(batch.steps.num_steps)])
        batch = dataclasses.replace(batch, steps=batch.steps.with_columns(kind=kinds))
        segment, num = corresponding_steps(batch.steps, grouping)
        group, _ = dense_index(batch.steps.group)
        for s in range(num):
            assert len(set(group[segment == s].tolist())) == 1
        adv = torch.tensor(per_step(run("step_grpo", batch, grouping=grouping, mode="mean_norm").advantages, where),
                           dtype=torch.float64)
        step_adv = torch.zeros(batch.steps.num_steps, dtype=torch.float64)
        # canonical step c sits at step-table row c (no step_order given)
        step_adv[:] = adv
        sums = torch.zeros(num, dtype=torch.float64).index_add(0, segment, step_adv)
        assert sums.abs().max() < 1e-9


def test_layouts_agree():
    """Per-step prompts and whole-trajectory samples give every step the same advantage."""
    rng = random.Random(5)
    for _ in range(10):
        trajs = random_trajs(rng)
        a, where_a = make_agent_batch(trajs, layout="step")
        b, where_b = make_agent_batch(trajs, layout="trajectory")
        for grouping in ("type_and_ordinal", "index", "anchor"):
            pa = per_step(run("step_grpo", a, grouping=grouping, outcome_weight=0.3).advantages, where_a)
            pb = per_step(run("step_grpo", b, grouping=grouping, outcome_weight=0.3).advantages, where_b)
            assert pa == pytest.approx(pb, abs=1e-9)


def test_anchor_grouping_of_returns_is_gigpo():
    """GiGPO = episode part + omega * anchor-state part; Step-GRPO with anchor grouping of discounted returns plus
    the episode advantage (weight 1) is the same estimator (episode statistics over trajectories)."""
    rng = random.Random(7)
    for _ in range(20):
        trajs = random_trajs(rng)
        batch, where = make_agent_batch(trajs)
        for mode in ("mean_norm", "mean_std_norm"):
            ours = run("step_grpo", batch, grouping="anchor", value="return", gamma=0.9, mode=mode,
                       outcome_weight=1.0).advantages
            gigpo = run("gigpo", batch, gamma=0.9, mode=mode, episode_statistics="trajectories").advantages
            assert per_step(ours, where) == pytest.approx(per_step(gigpo, where), abs=1e-9)


def test_needs_a_step_table():
    batch = hand_batch()
    with pytest.raises(ValueError, match="step table"):
        run("step_grpo", dataclasses.replace(batch, steps=None, token_steps=None))


def test_stats_report_groups():
    out = run("step_grpo", hand_batch(), grouping="type_and_ordinal")
    assert out.stats["step_groups"] == 3
    assert out.stats["lone_step_fraction"] == pytest.approx(1 / 6)


def test_episode_grpo_can_score_the_reported_outcome():
    """episode_score: outcome scores each trajectory by the outcomes the environment reported (the answer's
    correctness), not by the summed step rewards: outcome-only GRPO on step-rewarded experience."""
    batch = hand_batch()
    outcome = torch.tensor([1.0, 0.0, 0.0, 0.0, 0.0, 1.0], dtype=torch.float64)  # on the answer steps: A 1, B 0, C 1
    batch = dataclasses.replace(batch, steps=batch.steps.with_columns(outcome=outcome))
    out = run("episode_grpo", batch, episode_score="outcome", episode_statistics="trajectories",
              mode="mean_std_norm", eps=0.0)
    # outcomes A 1, B 0, C 1: mean 2/3, std sqrt(1/3) -> A, C +1/sqrt(3), B -2/sqrt(3), on every step
    expected = {0: R3, 1: -2 * R3, 2: R3}
    traj = batch.steps.trajectory.tolist()
    assert out.advantages[:, 0].tolist() == pytest.approx([expected[t] for t in traj], abs=1e-12)
    summed = run("episode_grpo", batch, episode_statistics="trajectories", mode="mean_std_norm", eps=0.0)
    assert not torch.allclose(summed.advantages, out.advantages)  # the returns (1, 1, 2) rank differently
