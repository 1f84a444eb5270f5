"""GiGPO estimators (gigpo, episode_grpo, step_discounted_return) and the discounted-return scan.

Hand-computed values and invariants (permutations, both sample layouts, constant groups). Parity with
verl-agent's ``gigpo/core_gigpo.py`` on random inputs is in ``test_advantages_gigpo_parity.py``; the batch
builders here are shared with it.
"""

from __future__ import annotations

import math
import random
from collections import defaultdict
from dataclasses import dataclass

import pytest
import torch
from pydantic import ValidationError

import grove.core  # noqa: F401  (registration)
from grove.batch import RolloutBatch, StepTable
from grove.core.advantages.common import AdvantageOutput, run_estimator
from grove.core.advantages.gigpo import EpisodeGRPOParams, GiGPOParams, StepReturnParams
from grove.core.advantages.group_norm import GRPOParams
from grove.core.segments import segment_discounted_returns
from grove.experience.episode_metrics import anchor_metrics
from grove.registry import ADVANTAGE_ESTIMATORS, Requires

EPS = 1e-6


# ------------------------------------------------------------------ building batches
@dataclass
class Traj:
    """One trajectory: its env group, and per turn the anchor key (local to the group), reward, penalty."""

    group: int
    anchors: list[int]
    rewards: list[float]
    penalties: list[float] | None = None

    def penalty(self, t: int) -> float:
        return self.penalties[t] if self.penalties else 0.0


def canonical_steps(trajs: list[Traj]) -> list[tuple[int, int]]:
    """(trajectory, turn) of every step, trajectory-major, turn-minor: the canonical step order."""
    return [(j, t) for j, tr in enumerate(trajs) for t in range(len(tr.rewards))]


def make_agent_batch(
    trajs: list[Traj],
    layout: str = "step",
    sample_order: list[int] | None = None,
    step_order: list[int] | None = None,
    turn_stride: int = 1,
) -> tuple[RolloutBatch, list[tuple[int, int]]]:
    """A RolloutBatch with its StepTable, and for every canonical step (row, column) of one of its tokens.

    ``layout="step"``: one sample per step (per-step prompts), samples in ``sample_order`` (of canonical
    steps). ``layout="trajectory"``: one sample per trajectory (in ``sample_order`` of trajectories), its
    response the steps' action tokens (1-3 each) with two environment tokens (``token_steps = -1``) after
    each. ``step_order`` permutes the rows of the step table. Turn numbers are ``turn_stride * t``.
    """
    canon = canonical_steps(trajs)
    keys = sorted({(tr.group, a) for tr in trajs for a in tr.anchors})
    anchor_id = {k: i for i, k in enumerate(keys)}
    n_steps = len(canon)
    step_order = list(range(n_steps)) if step_order is None else step_order
    table_row = {c: r for r, c in enumerate(step_order)}  # canonical step -> step table row

    if layout == "step":
        sample_order = list(range(n_steps)) if sample_order is None else sample_order
        members = [[c] for c in sample_order]
    else:
        sample_order = list(range(len(trajs))) if sample_order is None else sample_order
        by_traj = defaultdict(list)
        for c, (j, _) in enumerate(canon):
            by_traj[j].append(c)
        members = [by_traj[j] for j in sample_order]
    n = len(members)
    sample_of = {c: i for i, cs in enumerate(members) for c in cs}

    rows_tokens: list[list[int]] = []
    where: dict[int, tuple[int, int]] = {}
    for i, cs in enumerate(members):
        tokens: list[int] = []
        for c in cs:
            where[c] = (i, len(tokens))
            tokens += [table_row[c]] * (1 + c % 3)
            if layout == "trajectory":
                tokens += [-1, -1]
        rows_tokens.append(tokens)
    width = max([len(t) for t in rows_tokens] + [1]) + 1  # at least one pad column
    token_steps = torch.full((n, width), -1, dtype=torch.long)
    response_mask = torch.zeros(n, width, dtype=torch.long)
    for i, tokens in enumerate(rows_tokens):
        token_steps[i, : len(tokens)] = torch.tensor(tokens, dtype=torch.long)
        response_mask[i, : len(tokens)] = 1
    loss_mask = (token_steps >= 0).long()

    def col(values):
        return [values[c] for c in step_order]

    group = [trajs[j].group for j, _ in canon]
    steps = StepTable(
        sample=torch.tensor(col([sample_of[c] for c in range(n_steps)]), dtype=torch.long),
        group=torch.tensor(col(group), dtype=torch.long),
        trajectory=torch.tensor(col([j for j, _ in canon]), dtype=torch.long),
        index=torch.tensor(col([turn_stride * t for _, t in canon]), dtype=torch.long),
        anchor=torch.tensor(
            col([anchor_id[(trajs[j].group, trajs[j].anchors[t])] for j, t in canon]), dtype=torch.long
        ),
        reward=torch.tensor(col([trajs[j].rewards[t] for j, t in canon]), dtype=torch.float64),
        penalty=torch.tensor(col([trajs[j].penalty(t) for j, t in canon]), dtype=torch.float64),
        terminal=torch.tensor(col([t == len(trajs[j].rewards) - 1 for j, t in canon]), dtype=torch.bool),
        # what the built-in annotators give steps with no step_type and no outcome in their info
        columns={"kind": torch.zeros(n_steps, dtype=torch.long), "outcome": torch.zeros(n_steps, dtype=torch.float32)},
    )
    first = [cs[0] for cs in members]
    batch = RolloutBatch(
        prompt_ids=torch.ones(n, 2, dtype=torch.long),
        prompt_mask=torch.ones(n, 2, dtype=torch.long),
        response_ids=torch.ones(n, width, dtype=torch.long),
        response_mask=response_mask,
        loss_mask=loss_mask,
        old_logprobs=torch.zeros(n, width),
        rewards=torch.zeros(n, 1),
        reward_names=("env",),
        group_index=torch.tensor([group[c] for c in first], dtype=torch.long),
        trajectory_index=torch.tensor([canon[c][0] for c in first], dtype=torch.long),
        step_index=torch.tensor([canon[c][1] if layout == "step" else 0 for c in first], dtype=torch.long),
        truncated=torch.zeros(n, dtype=torch.bool),
        steps=steps,
        token_steps=token_steps,
    )
    return batch, [where[c] for c in range(n_steps)]


def run(id: str, batch: RolloutBatch, **params) -> AdvantageOutput:
    fn = ADVANTAGE_ESTIMATORS.get(id)
    scores = torch.zeros(batch.num_samples, dtype=torch.float64)
    return run_estimator(fn, batch, scores, ADVANTAGE_ESTIMATORS.validate_params(id, params))


def per_step(adv: torch.Tensor, where: list[tuple[int, int]]) -> list[float]:
    """The advantage of every canonical step, read at one of its tokens."""
    return [float(adv[i, k]) for i, k in where]


def random_trajs(rng: random.Random, max_groups: int = 4, max_len: int = 6) -> list[Traj]:
    """Random groups of random trajectories with repeated anchor states, rewards and invalid-action penalties."""
    trajs = []
    for g in rng.sample(range(100), rng.randint(1, max_groups)):
        n_anchor_keys = rng.randint(1, 4)
        for _ in range(rng.randint(1, 4)):
            length = rng.randint(1, max_len)
            rewards = [rng.choice([0.0, 0.0, 1.0, 0.5, rng.gauss(0, 1)]) for _ in range(length)]
            anchors = [rng.randrange(n_anchor_keys) if t < 3 else rng.randrange(10) for t in range(length)]
            penalties = [0.1 if rng.random() < 0.3 else 0.0 for _ in range(length)]
            trajs.append(Traj(g, anchors, rewards, penalties))
    rng.shuffle(trajs)
    return trajs


# ------------------------------------------------------------------ (1) the discounted scan
def loop_returns(values, segment, key, gamma):
    out = [0.0] * len(values)
    for s in set(segment):
        idx = sorted((i for i in range(len(values)) if segment[i] == s), key=lambda i: key[i])
        running = 0.0
        for i in reversed(idx):
            running = values[i] + gamma * running
            out[i] = running
    return out


@pytest.mark.parametrize("gamma", [0.0, 0.5, 0.95, 1.0])
def test_discounted_returns_match_a_python_loop(gamma):
    rng = random.Random(int(gamma * 100))
    for _ in range(20):
        lengths = [rng.randint(1, 40) for _ in range(rng.randint(1, 8))]
        segment = [rng.randint(0, 10**6) for _ in lengths]  # arbitrary ids
        seg, key, val = [], [], []
        for s, length in zip(segment, lengths, strict=True):
            turns = sorted(rng.sample(range(3 * length), length))  # gaps in the turn numbers
            seg += [s] * length
            key += turns
            val += [rng.gauss(0, 1) for _ in range(length)]
        order = list(range(len(val)))
        rng.shuffle(order)
        seg, key, val = ([x[i] for i in order] for x in (seg, key, val))
        got = segment_discounted_returns(
            torch.tensor(val, dtype=torch.float64), torch.tensor(seg), torch.tensor(key), gamma=gamma
        )
        expected = loop_returns(val, seg, key, gamma)
        assert got.dtype == torch.float64
        torch.testing.assert_close(got, torch.tensor(expected, dtype=torch.float64), rtol=0, atol=1e-12)
        if gamma == 0.0:
            assert got.tolist() == val  # exact


def test_discounted_returns_long_trajectories_and_dtype():
    torch.manual_seed(0)
    r = torch.rand(100, dtype=torch.float32)
    seg = torch.zeros(100, dtype=torch.long)
    key = torch.arange(100)
    for gamma in (0.0, 0.3, 0.99, 1.0):
        got = segment_discounted_returns(r, seg, key, gamma=gamma)
        assert got.dtype == torch.float32
        expected = loop_returns(r.double().tolist(), seg.tolist(), key.tolist(), gamma)
        torch.testing.assert_close(
            got.double(), torch.tensor(expected, dtype=torch.float64), rtol=1e-6, atol=1e-6
        )
    # gamma = 1: suffix sums; sparse terminal reward: R_t = gamma^(T-1-t)
    r = torch.zeros(100, dtype=torch.float64)
    r[-1] = 1.0
    assert segment_discounted_returns(r, seg, key, gamma=1.0).tolist() == [1.0] * 100
    got = segment_discounted_returns(r, seg, key, gamma=0.95)
    torch.testing.assert_close(got, 0.95 ** (99 - key.double()), rtol=1e-13, atol=0)


def test_discounted_returns_edge_cases():
    empty = segment_discounted_returns(torch.zeros(0), torch.zeros(0, dtype=torch.long), torch.zeros(0), gamma=0.9)
    assert empty.shape == (0,)
    one = segment_discounted_returns(torch.tensor([2.0]), torch.tensor([5]), torch.tensor([3]), gamma=0.9)
    assert one.tolist() == [2.0]
    with pytest.raises(ValueError, match="repeats"):
        segment_discounted_returns(torch.ones(3), torch.tensor([0, 0, 1]), torch.tensor([1, 1, 1]), gamma=0.9)
    with pytest.raises(ValueError, match="gamma"):
        segment_discounted_returns(torch.ones(2), torch.tensor([0, 0]), torch.tensor([0, 1]), gamma=1.5)
    with pytest.raises(ValueError, match=r"\[S\]"):
        segment_discounted_returns(torch.ones(2, 2), torch.tensor([0, 0]), torch.tensor([0, 1]), gamma=0.5)


# ------------------------------------------------------------------ (2) a hand-worked example
# One env group, two trajectories, gamma = 0.5, omega = 1:
#   A: anchors s0, s1, s2; rewards 0, 0, 1; penalty 0.1 at turn 1 (an invalid action)
#   B: anchors s0, s3;     rewards 0, 0
HAND = [Traj(0, [0, 1, 2], [0.0, 0.0, 1.0], [0.0, 0.1, 0.0]), Traj(0, [0, 3], [0.0, 0.0])]


def test_gigpo_hand_values_mean_norm():
    # episode scores (after_returns): A0 = 1, A1 = 1 - 0.1 = 0.9, A2 = 1, B0 = B1 = 0
    # mean over the 5 steps = 2.9 / 5 = 0.58 -> A^E = 0.42, 0.32, 0.42, -0.58, -0.58
    # returns: A2 = 1, A1 = 0 + 0.5 * 1 = 0.5 then - 0.1 = 0.4, A0 = 0 + 0.5 * 0.5 = 0.25 (the penalty is
    #   not discounted backwards); B1 = 0, B0 = 0
    # anchor s0 = {A0: 0.25, B0: 0}, mean 0.125 -> A^S = +0.125, -0.125; s1, s2, s3 are singletons -> 0
    # A = 0.545, 0.32, 0.42, -0.705, -0.58
    for layout in ("step", "trajectory"):
        batch, where = make_agent_batch(HAND, layout)
        out = run("gigpo", batch, gamma=0.5)
        assert per_step(out.advantages, where) == pytest.approx([0.545, 0.32, 0.42, -0.705, -0.58], abs=1e-12)
        # episode_grpo: A^E only
        out = run("episode_grpo", batch)
        assert per_step(out.advantages, where) == pytest.approx([0.42, 0.32, 0.42, -0.58, -0.58], abs=1e-12)
        # step_discounted_return: returns 0.25, 0.4, 1, 0, 0; mean 1.65 / 5 = 0.33
        out = run("step_discounted_return", batch, gamma=0.5)
        assert per_step(out.advantages, where) == pytest.approx([-0.08, 0.07, 0.67, -0.33, -0.33], abs=1e-12)


def test_gigpo_hand_values_mean_std_norm():
    # episode: deviations 0.42, 0.32, 0.42, -0.58, -0.58; squares sum 1.128; unbiased std sqrt(1.128 / 4)
    # anchor s0: {0.25, 0}, deviations +-0.125, unbiased std sqrt(2 * 0.125^2 / 1) = 0.125 sqrt(2)
    batch, where = make_agent_batch(HAND, "step")
    out = run("gigpo", batch, gamma=0.5, mode="mean_std_norm")
    se = math.sqrt(1.128 / 4) + EPS
    ss = 0.125 * math.sqrt(2) + EPS
    expected = [0.42 / se + 0.125 / ss, 0.32 / se, 0.42 / se, -0.58 / se - 0.125 / ss, -0.58 / se]
    assert per_step(out.advantages, where) == pytest.approx(expected, abs=1e-9)
    assert 0.125 / ss == pytest.approx(1 / math.sqrt(2), abs=1e-5)


def test_gigpo_hand_values_penalty_in_reward():
    # in_reward: r' = 0, -0.1, 1 for A. Episode score of every A step: 0.9; B: 0.
    # mean over 5 steps = 2.7 / 5 = 0.54 -> A^E = 0.36 (A), -0.54 (B)
    # returns: A2 = 1, A1 = -0.1 + 0.5 * 1 = 0.4, A0 = 0 + 0.5 * 0.4 = 0.2; anchor s0 = {0.2, 0} -> +-0.1
    batch, where = make_agent_batch(HAND, "step")
    out = run("gigpo", batch, gamma=0.5, penalty="in_reward")
    assert per_step(out.advantages, where) == pytest.approx([0.46, 0.36, 0.36, -0.64, -0.54], abs=1e-12)


def test_gigpo_hand_values_trajectory_statistics():
    # 'trajectories': A enters once with its first step's score 1, B with 0 -> mean 0.5
    # A^E = 0.5, 0.4, 0.5, -0.5, -0.5; plus A^S = +0.125 (A0), -0.125 (B0)
    batch, where = make_agent_batch(HAND, "trajectory")
    out = run("gigpo", batch, gamma=0.5, episode_statistics="trajectories")
    assert per_step(out.advantages, where) == pytest.approx([0.625, 0.4, 0.5, -0.625, -0.5], abs=1e-12)


def test_stats_and_token_scatter():
    batch, where = make_agent_batch(HAND, "trajectory")
    out = run("gigpo", batch, gamma=0.5)
    assert set(out.stats) == {
        "episode_mean",
        "episode_std",
        "step_mean",
        "step_std",
        "step_nonzero_frac",
        "step_episode_corr",  # the step-credit diagnostics (tests/test_step_credit_diagnostics.py)
        *(f"advantage_rms_turn/{k}" for k in sorted({int(i) for i in batch.steps.index})),
    }
    assert out.stats["step_nonzero_frac"] == pytest.approx(2 / 5)  # A0 and B0
    anchors = anchor_metrics(batch)  # the anchor-group sizes are the experience source's metrics
    assert anchors["anchor_group_size_mean"] == pytest.approx(5 / 4)  # s0: 2, s1, s2, s3: 1
    assert anchors["anchor_group_size_hist/1"] / anchors["anchor_groups"] == pytest.approx(3 / 4)
    assert out.stats["episode_mean"] == pytest.approx(0.0, abs=1e-12)  # steps statistics: centred over steps
    # environment tokens and pads are 0; every token of a step carries the step's advantage
    ts = batch.token_steps
    assert (out.advantages[ts < 0] == 0).all()
    step_values = torch.zeros(batch.steps.num_steps, dtype=out.advantages.dtype)
    step_values[ts[ts >= 0]] = out.advantages[ts >= 0]
    torch.testing.assert_close(out.advantages[ts >= 0], step_values[ts[ts >= 0]])
    assert out.advantages.dtype == torch.float64


# ------------------------------------------------------------------ (3) invariants
def test_no_repeated_anchors_or_zero_weight_equals_episode_grpo():
    rng = random.Random(3)
    for _ in range(20):
        trajs = random_trajs(rng)
        batch, _ = make_agent_batch(trajs)
        for mode in ("mean_norm", "mean_std_norm"):
            episode = run("episode_grpo", batch, mode=mode).advantages
            torch.testing.assert_close(
                run("gigpo", batch, mode=mode, step_advantage_weight=0.0).advantages, episode
            )
        # every step its own anchor state: all anchor groups are singletons
        unique = [
            Traj(t.group, [1000 * j + k for k in range(len(t.rewards))], t.rewards, t.penalties)
            for j, t in enumerate(trajs)
        ]
        batch, _ = make_agent_batch(unique)
        out = run("gigpo", batch, gamma=0.9)
        torch.testing.assert_close(out.advantages, run("episode_grpo", batch).advantages, rtol=0, atol=0)
        assert out.stats["step_nonzero_frac"] == 0.0 and anchor_metrics(batch)["anchor_steps_in_shared_groups"] == 0


def test_permuting_samples_and_steps_permutes_advantages():
    rng = random.Random(4)
    for _ in range(20):
        trajs = random_trajs(rng)
        n_steps = len(canonical_steps(trajs))
        params = {"gamma": rng.choice([0.5, 0.95, 1.0]), "mode": rng.choice(["mean_norm", "mean_std_norm"])}
        base, where = make_agent_batch(trajs)
        expected = per_step(run("gigpo", base, **params).advantages, where)
        for layout, n in (("step", n_steps), ("trajectory", len(trajs))):
            sample_order = rng.sample(range(n), n)
            step_order = rng.sample(range(n_steps), n_steps)
            batch, where2 = make_agent_batch(trajs, layout, sample_order=sample_order, step_order=step_order)
            assert per_step(run("gigpo", batch, **params).advantages, where2) == pytest.approx(
                expected, abs=1e-12
            )
        # RolloutBatch.select reorders rows and renumbers the step table: advantages follow the rows
        perm = torch.randperm(base.num_samples)
        torch.testing.assert_close(
            run("gigpo", base.select(perm), **params).advantages,
            run("gigpo", base, **params).advantages[perm],
        )


@pytest.mark.parametrize("id", ["gigpo", "episode_grpo", "step_discounted_return"])
def test_both_layouts_give_the_same_step_advantages(id):
    rng = random.Random(5)
    for _ in range(20):
        trajs = random_trajs(rng)
        params = {
            "mode": rng.choice(["mean_norm", "mean_std_norm"]),
            "penalty": rng.choice(["after_returns", "in_reward"]),
        }
        if id != "episode_grpo":
            params["gamma"] = rng.choice([0.0, 0.7, 1.0])
        by_step, where_s = make_agent_batch(trajs, "step")
        by_traj, where_t = make_agent_batch(trajs, "trajectory", turn_stride=2)  # turn numbers with gaps
        a = per_step(run(id, by_step, **params).advantages, where_s)
        b = per_step(run(id, by_traj, **params).advantages, where_t)
        assert a == pytest.approx(b, abs=1e-12)


def test_constant_groups_give_exactly_zero():
    # identical trajectories in every group (rewards 0.1: 0.1 * 3 / 3 != 0.1 in floating point)
    trajs = [Traj(0, [0, 1, 2], [0.1, 0.1, 0.1]) for _ in range(3)] + [Traj(1, [5], [0.3]) for _ in range(2)]
    for layout in ("step", "trajectory"):
        batch, _ = make_agent_batch(trajs, layout)
        for id in ("gigpo", "episode_grpo", "step_discounted_return"):
            for mode in ("mean_norm", "mean_std_norm"):
                # step_discounted_return pools every turn of a group: equal returns need gamma = 0 here
                extra = {
                    "episode_grpo": {},
                    "gigpo": {"gamma": 0.95},
                    "step_discounted_return": {"gamma": 0.0},
                }[id]
                for stats in ("steps", "trajectories") if id != "step_discounted_return" else ("steps",):
                    kw = {"episode_statistics": stats} if id != "step_discounted_return" else {}
                    adv = run(id, batch, mode=mode, eps=0.0, **extra, **kw).advantages
                    assert (adv == 0).all(), (id, mode, layout, stats)


def test_singleton_conventions():
    # group 7 has one single-step trajectory: episode mean 0, std 1 -> A^E = score (/ (1 + eps))
    trajs = [Traj(7, [0], [2.0]), Traj(8, [0, 1], [0.0, 1.0]), Traj(8, [0, 2], [0.0, 0.0])]
    batch, where = make_agent_batch(trajs)
    got = per_step(run("episode_grpo", batch, mode="mean_std_norm").advantages, where)
    assert got[0] == pytest.approx(2.0 / (1 + EPS), abs=1e-12)
    assert per_step(run("episode_grpo", batch).advantages, where)[0] == 2.0
    # a group with one trajectory of two steps is not a singleton under 'steps' statistics (counted twice)
    trajs = [Traj(3, [0, 1], [0.0, 1.0])]
    batch, where = make_agent_batch(trajs)
    assert per_step(run("episode_grpo", batch).advantages, where) == [0.0, 0.0]
    # ... but is one under 'trajectories' statistics: mean 0 -> A^E = score = 1
    assert per_step(run("episode_grpo", batch, episode_statistics="trajectories").advantages, where) == [
        1.0,
        1.0,
    ]
    # singleton anchor groups give A^S = 0: gigpo equals episode_grpo here (anchors 0 and 1 differ)
    torch.testing.assert_close(run("gigpo", batch).advantages, run("episode_grpo", batch).advantages)


def test_single_step_episodes_reduce_to_grpo():
    # one-step trajectories without penalties: episode_grpo with mean_std_norm is grpo on the episode rewards
    rng = random.Random(6)
    trajs = [Traj(g, [0], [rng.choice([0.0, 1.0, 0.5])]) for g in (0, 0, 0, 1, 1, 2, 3, 3, 3, 3)]
    batch, _ = make_agent_batch(trajs)
    scores = torch.tensor([t.rewards[0] for t in trajs], dtype=torch.float64)
    grpo = ADVANTAGE_ESTIMATORS.get("grpo")(batch, scores, GRPOParams())
    torch.testing.assert_close(run("episode_grpo", batch, mode="mean_std_norm").advantages, grpo)


def test_degenerate_batches():
    # empty batch
    batch, _ = make_agent_batch([])
    for id in ("gigpo", "episode_grpo", "step_discounted_return"):
        out = run(id, batch)
        assert out.advantages.shape == (0, batch.response_ids.shape[1])
        assert all(v == 0.0 for v in out.stats.values())
    # a batch without a step table
    n = 2
    plain = RolloutBatch(
        prompt_ids=torch.ones(n, 2, dtype=torch.long),
        prompt_mask=torch.ones(n, 2, dtype=torch.long),
        response_ids=torch.ones(n, 3, dtype=torch.long),
        response_mask=torch.ones(n, 3, dtype=torch.long),
        loss_mask=torch.ones(n, 3, dtype=torch.long),
        old_logprobs=torch.zeros(n, 3),
        rewards=torch.zeros(n, 1),
        reward_names=("r",),
        group_index=torch.zeros(n, dtype=torch.long),
        trajectory_index=torch.arange(n),
        step_index=torch.zeros(n, dtype=torch.long),
        truncated=torch.zeros(n, dtype=torch.bool),
    )
    for id in ("gigpo", "episode_grpo", "step_discounted_return"):
        with pytest.raises(ValueError, match="environment experience source"):
            run(id, plain)
    # scores of the wrong shape
    batch, _ = make_agent_batch(HAND)
    with pytest.raises(ValueError, match="scores shape"):
        ADVANTAGE_ESTIMATORS.get("gigpo")(batch, torch.zeros(2), GiGPOParams())


def test_registration_and_params():
    # episode_grpo compares an episode only with the others of its group; gigpo's anchor groups and the
    # discounted-return baseline also pool the steps of one trajectory, so they do not need several copies
    for id, model, requires in (
        ("gigpo", GiGPOParams, {Requires.STEPS}),
        ("episode_grpo", EpisodeGRPOParams, {Requires.STEPS, Requires.GROUPS}),
        ("step_discounted_return", StepReturnParams, {Requires.STEPS}),
    ):
        entry = ADVANTAGE_ESTIMATORS.entry(id)
        assert entry.params is model and entry.requires == frozenset(requires)
        assert "Group-in-Group Policy Optimization" in entry.paper and entry.formula and entry.reference
        assert all(f.description for f in model.model_fields.values())
    p = GiGPOParams()
    assert (
        p.gamma,
        p.step_advantage_weight,
        p.mode,
        p.episode_statistics,
        p.penalty,
        p.eps,
        p.unbiased_std,
    ) == (0.95, 1.0, "mean_norm", "steps", "after_returns", 1e-6, True)
    for bad in ({"gamma": 1.5}, {"mode": "std"}, {"penalty": "never"}, {"step_advantage_w": 1.0}):
        with pytest.raises(ValidationError):
            ADVANTAGE_ESTIMATORS.validate_params("gigpo", bad)
