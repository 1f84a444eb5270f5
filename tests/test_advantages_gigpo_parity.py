"""GiGPO against an independent loop transcription of verl-agent's ``gigpo/core_gigpo.py`` (796ed31), on
random inputs: every mode, statistics and penalty placement."""

from __future__ import annotations

import random
from collections import defaultdict

import pytest
import torch

from test_advantages_gigpo import Traj, canonical_steps, make_agent_batch, per_step, random_trajs, run


def verl_agent_gigpo(rows, gamma, omega, mode, cross_steps=True, penalty="after_returns", eps=1e-6):
    """Independent loop transcription of verl-agent (796ed31) GiGPO on per-step rows in batch order.

    ``rows``: dicts with ``uid`` (env group), ``traj_uid``, ``anchor_obs``, ``reward`` (env reward of the
    step) and ``penalty`` (``coef * invalid``); a trajectory's rows come in turn order, as verl-agent's
    rollout emits them. ``penalty="in_reward"`` is grove's variant (not in verl-agent): the penalty is
    subtracted from the reward before discounting and summing.
    """
    n = len(rows)
    remove_std = {"mean_norm": True, "mean_std_norm": False}[mode]
    reward = [r["reward"] - (r["penalty"] if penalty == "in_reward" else 0.0) for r in rows]
    after = [r["penalty"] if penalty == "after_returns" else 0.0 for r in rows]
    # rollout_loop: episode_rewards accumulates the step rewards of each trajectory
    episode_reward = defaultdict(float)
    for i in range(n):
        episode_reward[rows[i]["traj_uid"]] += reward[i]
    # compute_step_discounted_returns: per traj_uid, backwards over its rows in batch order
    step_rewards = [0.0] * n
    for uid in {r["traj_uid"] for r in rows}:
        idx = [i for i in range(n) if rows[i]["traj_uid"] == uid]
        running = 0.0
        for i in reversed(idx):
            running = reward[i] + gamma * running
            step_rewards[i] = running
    # EpisodeRewardManager puts the episode reward on the last token; apply_invalid_action_penalty subtracts
    # coef * invalid from that token and from step_rewards
    scores = torch.tensor(
        [episode_reward[r["traj_uid"]] - after[i] for i, r in enumerate(rows)], dtype=torch.float64
    )
    step_rewards = torch.tensor([step_rewards[i] - after[i] for i in range(n)], dtype=torch.float64)

    # episode_norm_reward
    id2score = defaultdict(list)
    seen = set()
    for i in range(n):
        if (rows[i]["uid"], rows[i]["traj_uid"]) in seen:
            continue
        id2score[rows[i]["uid"]].append(scores[i])
        if not cross_steps:
            seen.add((rows[i]["uid"], rows[i]["traj_uid"]))
    id2mean, id2std = {}, {}
    for k, v in id2score.items():
        if len(v) == 1:
            id2mean[k], id2std[k] = (
                torch.tensor(0.0, dtype=torch.float64),
                torch.tensor(1.0, dtype=torch.float64),
            )
        else:
            id2mean[k] = torch.mean(torch.stack(v))
            id2std[k] = torch.std(torch.stack(v))
    episode = torch.empty(n, dtype=torch.float64)
    for i in range(n):
        k = rows[i]["uid"]
        episode[i] = scores[i] - id2mean[k] if remove_std else (scores[i] - id2mean[k]) / (id2std[k] + eps)

    # build_step_group: exact anchor match within each uid
    group_of = {}
    for i in range(n):
        group_of.setdefault((rows[i]["uid"], rows[i]["anchor_obs"]), len(group_of))
    step_uid = [group_of[(r["uid"], r["anchor_obs"])] for r in rows]

    # step_norm_reward: singleton -> its own value as the mean (A^S = 0), std 1
    id2score = defaultdict(list)
    for i in range(n):
        id2score[step_uid[i]].append(step_rewards[i])
    id2mean, id2std = {}, {}
    for k, v in id2score.items():
        id2mean[k] = torch.mean(torch.stack(v))
        id2std[k] = torch.tensor(1.0, dtype=torch.float64) if len(v) == 1 else torch.std(torch.stack(v))
    step = torch.empty(n, dtype=torch.float64)
    for i in range(n):
        k = step_uid[i]
        step[i] = (
            step_rewards[i] - id2mean[k] if remove_std else (step_rewards[i] - id2mean[k]) / (id2std[k] + eps)
        )
    return (episode + omega * step).tolist()


def rows_of(trajs: list[Traj]) -> list[dict]:
    return [
        {
            "uid": trajs[j].group,
            "traj_uid": j,
            "anchor_obs": f"state-{trajs[j].anchors[t]}",
            "reward": trajs[j].rewards[t],
            "penalty": trajs[j].penalty(t),
        }
        for j, t in canonical_steps(trajs)
    ]


@pytest.mark.parametrize("mode", ["mean_norm", "mean_std_norm"])
@pytest.mark.parametrize("statistics", ["steps", "trajectories"])
@pytest.mark.parametrize("penalty", ["after_returns", "in_reward"])
def test_gigpo_matches_verl_agent_semantics(mode, statistics, penalty):
    rng = random.Random(hash((mode, statistics, penalty)) % 1000)
    for _ in range(60):
        trajs = random_trajs(rng, max_groups=5, max_len=8)
        gamma = rng.choice([0.0, 0.5, 0.95, 1.0])
        omega = rng.choice([0.0, 0.5, 1.0, 2.0])
        expected = verl_agent_gigpo(
            rows_of(trajs), gamma, omega, mode, cross_steps=statistics == "steps", penalty=penalty
        )
        layout = rng.choice(["step", "trajectory"])
        batch, where = make_agent_batch(trajs, layout)
        out = run(
            "gigpo",
            batch,
            gamma=gamma,
            step_advantage_weight=omega,
            mode=mode,
            episode_statistics=statistics,
            penalty=penalty,
        )
        got = per_step(out.advantages, where)
        # where a group's values are all equal, grove gives exactly 0 and verl-agent's residue / eps may not
        # be 0 under mean_std_norm; the residue of equal float64 values is 0 or ~1e-17 / 1e-6 ~ 1e-11
        assert got == pytest.approx(expected, abs=1e-6), (layout, gamma, omega)
