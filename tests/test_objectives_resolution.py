"""The resolution of a multi-reward signal (distinct advantages per distinct reward combination), by hand, and
GDPO's claim on its own example: the normalised sum merges (1, 0) and (0, 1), per-reward normalisation keeps them."""

from __future__ import annotations

import math

import pytest
import torch

from grove.core.objectives.resolution import advantage_resolution


def test_counts_by_hand():
    rewards = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [1.0, 1.0], [0.0, math.nan], [0.0, 0.0]])
    advantages = torch.tensor([0.5, 0.5, 1.0, 1.0, -1.0, -1.0])
    groups = torch.tensor([0, 0, 0, 0, 1, 1])
    out = advantage_resolution(rewards, advantages, groups)
    # group 0: combinations {(1,0), (0,1), (1,1)} = 3, advantages {0.5, 1.0} = 2; group 1: 2 combinations, 1 value
    assert out["resolution/reward_combinations"] == pytest.approx(2.5)
    assert out["resolution/advantage_values"] == pytest.approx(1.5)
    assert out["resolution/collapsed_group_fraction"] == pytest.approx(1.0)
    assert advantage_resolution(rewards[:0], advantages[:0], groups[:0]) == {}


def test_gdpo_example_sum_then_normalise_collapses_and_per_reward_normalisation_does_not():
    """Two binary rewards, four completions: (1,0), (0,1), (1,1), (0,0)."""
    rewards = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [0.0, 0.0], [1.0, 0.0], [1.0, 0.0]])
    groups = torch.tensor([0, 0, 0, 0, 1, 1])
    g = groups[:, None] == groups[None, :]

    def group_z(x):  # (x - mean) / std within each group (unbiased std; constant groups give 0)
        mean = (g * x[None, :]).sum(1) / g.sum(1)
        var = (g * (x[None, :] - mean[:, None]) ** 2).sum(1) / (g.sum(1) - 1)
        return torch.where(var > 0, (x - mean) / var.sqrt().clamp_min(1e-12), torch.zeros_like(x))

    summed = group_z(rewards.sum(1))
    decoupled = group_z(rewards[:, 0]) + group_z(rewards[:, 1])
    grpo = advantage_resolution(rewards, summed, groups)
    gdpo = advantage_resolution(rewards, decoupled, groups)
    assert grpo["resolution/reward_combinations"] == gdpo["resolution/reward_combinations"] == pytest.approx(2.5)
    assert grpo["resolution/advantage_values"] == pytest.approx(2.0)  # (1,0) and (0,1) share one advantage
    # per-reward z-scores of a group of four balanced binary rewards are symmetric: (1,0) and (0,1) still meet, but
    # (1,1) and (0,0) stay apart, as with the sum; the difference shows when the rewards are unbalanced
    unbalanced = torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.0, 1.0], [0.0, 0.0]])
    u_groups = torch.zeros(4, dtype=torch.long)
    g = u_groups[:, None] == u_groups[None, :]
    summed_u = group_z(unbalanced.sum(1))
    decoupled_u = group_z(unbalanced[:, 0]) + group_z(unbalanced[:, 1])
    assert advantage_resolution(unbalanced, summed_u, u_groups)["resolution/advantage_values"] == 2
    assert advantage_resolution(unbalanced, decoupled_u, u_groups)["resolution/advantage_values"] == 3
