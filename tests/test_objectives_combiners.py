"""Reward combiners: hand-computed values, invariants, the GDPO collapse example and the component-aware filter."""

from __future__ import annotations

import math

import pytest
import torch

import grove.builtin_components  # noqa: F401
from grove.batch import RolloutBatch
from grove.core.advantages.group_norm import NormConfig, normalize_scores
from grove.core.objectives import informative_from_signal, objective_statistics, run_combiner
from grove.registry import REWARD_COMBINERS


def reward_batch(rewards, groups, weights=None, names=None, lengths=None, dtype=torch.float64) -> RolloutBatch:
    """A batch that only carries rewards, groups and (optionally) response lengths."""
    r = torch.tensor(rewards, dtype=dtype)
    n, k = r.shape
    width = max(lengths) if lengths else 1
    lengths = lengths or [1] * n
    mask = torch.arange(width)[None, :] < torch.tensor(lengths)[:, None]
    return RolloutBatch(
        prompt_ids=torch.zeros(n, 1, dtype=torch.long),
        prompt_mask=torch.ones(n, 1, dtype=torch.bool),
        response_ids=torch.zeros(n, width, dtype=torch.long),
        response_mask=mask,
        loss_mask=mask,
        old_logprobs=torch.zeros(n, width),
        rewards=r,
        reward_names=tuple(names or [f"o{j}" for j in range(k)]),
        reward_weights=tuple(weights or [1.0] * k),
        group_index=torch.tensor(groups),
        trajectory_index=torch.arange(n),
        step_index=torch.zeros(n, dtype=torch.long),
        truncated=torch.zeros(n, dtype=torch.bool),
    )


def combine(id_, batch, **params):
    return run_combiner(REWARD_COMBINERS.get(id_), batch, REWARD_COMBINERS.validate_params(id_, params))


NAN = math.nan


# ----------------------------------------------------------------------------- the collapse example
def test_sum_then_normalize_collapses_distinct_combinations_and_gdpo_does_not():
    # two binary rewards, G = 2: group 0 = [(0,0), (1,0)], group 1 = [(0,0), (1,1)]
    batch = reward_batch([[0, 0], [1, 0], [0, 0], [1, 1]], [0, 0, 1, 1])
    summed = combine("sum_then_normalize", batch).scores
    grpo = normalize_scores(summed, batch.group_index, NormConfig())
    assert torch.allclose(grpo[:2], grpo[2:])  # identical advantages in both groups: the collapse
    assert torch.allclose(grpo, torch.tensor([-1, 1, -1, 1], dtype=torch.float64) / math.sqrt(2), atol=1e-5)
    gdpo = combine("normalize_then_sum", batch, renormalize="none", eps=0.0).scores
    r = 1 / math.sqrt(2)  # unbiased std of {0, 1} is 1/sqrt(2): z = ±(1/2)/(1/sqrt(2)) = ±0.707
    assert torch.allclose(gdpo, torch.tensor([-r, r, -2 * r, 2 * r], dtype=torch.float64))
    assert not torch.allclose(gdpo[:2], gdpo[2:])
    biased = combine("normalize_then_sum", batch, renormalize="none", eps=0.0, unbiased_std=False).scores
    assert torch.allclose(biased, torch.tensor([-1.0, 1.0, -2.0, 2.0], dtype=torch.float64))


def test_component_aware_filter_keeps_groups_whose_objectives_differ_but_sums_tie():
    # group 0: components differ, weighted sums tie (1, 1, 1); group 1: all identical; group 2: sums differ
    rows = [[1, 0, 0], [0, 1, 0], [0, 0, 1], [1, 1, 0], [1, 1, 0], [1, 1, 0], [0, 0, 0], [1, 0, 0], [1, 0, 0]]
    batch = reward_batch(rows, [0, 0, 0, 1, 1, 1, 2, 2, 2])
    by_sum = informative_from_signal(combine("sum_then_normalize", batch).signal, batch.group_index)
    by_components = informative_from_signal(combine("normalize_then_sum", batch).signal, batch.group_index)
    assert by_sum.tolist() == [False] * 6 + [True] * 3
    assert by_components.tolist() == [True] * 3 + [False] * 3 + [True] * 3
    # and GDPO indeed gives the tied group non-zero advantages (unequal stds across the three objectives)
    rows[2] = [0, 0, 1]
    uneven = reward_batch([[1, 0, 0], [0, 1, 0], [0, 0, 1], [0, 0, 1]], [0, 0, 0, 0])
    assert float(uneven.rewards.sum(1).std()) == 0.0
    assert combine("normalize_then_sum", uneven, renormalize="none").scores.abs().max() > 0.1


def test_zero_weight_objectives_are_logged_only():
    batch = reward_batch([[0, 5], [1, -5]], [0, 0], weights=[1.0, 0.0])
    for id_ in REWARD_COMBINERS.ids():
        params = {"constraints": ["o0"]} if id_ == "gated" else {}
        out = combine(id_, batch, **params)
        assert torch.all(out.contributions[:, 1] == 0), id_
    assert informative_from_signal(combine("normalize_then_sum", reward_batch([[0, 5], [0, -5]], [0, 0], weights=[1.0, 0.0])).signal, torch.tensor([0, 0])).tolist() == [False, False]


# ----------------------------------------------------------------------------- hand-computed per-sample combiners
def test_sum_then_normalize_skips_nan_and_refuses_unscorable_samples():
    batch = reward_batch([[1.0, NAN], [0.5, 2.0]], [0, 0], weights=[2.0, 0.5])
    assert combine("sum_then_normalize", batch).scores.tolist() == [2.0, 2.0]
    with pytest.raises(ValueError, match="no weighted objective applies to sample"):
        combine("sum_then_normalize", reward_batch([[NAN, NAN], [1.0, 0.0]], [0, 0]))


def test_sum_then_normalize_is_the_weighted_nansum():
    rows = [[1.0, 0.5], [0.0, NAN], [NAN, 2.0]]
    assert combine("sum_then_normalize", reward_batch(rows, [0, 0, 0], weights=[2.0, 0.5])).scores.tolist() == [2.25, 0.0, 1.0]
    logged_only = reward_batch([[1.0, 0.5], [0.0, 1.0], [NAN, 2.0]], [0, 0, 0], weights=[0.0, 1.0])
    assert combine("sum_then_normalize", logged_only).scores.tolist() == [0.5, 1.0, 2.0]
    with pytest.raises(ValueError, match=r"sample\(s\) 1 "):  # its only value has weight 0 (logged only)
        combine("sum_then_normalize", reward_batch(rows, [0, 0, 0], weights=[0.0, 1.0]))
    with pytest.raises(ValueError, match="1 reward_weights for 2 rewards"):
        reward_batch(rows, [0, 0, 0], weights=[1.0])


def test_gated_counts_behaviour_objectives_only_when_constraints_pass():
    # objectives: format (constraint), acc, style
    rows = [[1, 1, 0.5], [0, 1, 0.5], [NAN, 1, 0.5], [0.5, 0, 1]]
    batch = reward_batch(rows, [0, 0, 0, 0], weights=[0.5, 1.0, 2.0], names=["format", "acc", "style"])
    out = combine("gated", batch, constraints=["format"])
    assert out.scores.tolist() == [0.5 + 1 + 1, 0.0, 2.0, 0.25]
    no_constraint_value = combine("gated", batch, constraints=["format"], include_constraints=False)
    assert no_constraint_value.scores.tolist() == [2.0, 0.0, 2.0, 0.0]
    only_acc = combine("gated", batch, constraints=["format"], objectives=["acc"], threshold=0.5)
    assert only_acc.scores.tolist() == [1.5, 0.0, 1.0, 0.25]
    with pytest.raises(ValueError, match="constraints: 'fmt' is not an objective"):
        combine("gated", batch, constraints=["fmt"])


def test_ensemble_min_and_mean_minus_std():
    batch = reward_batch([[1.0, 3.0, NAN], [2.0, 2.0, 2.0], [0.0, 4.0, 2.0]], [0, 0, 0], weights=[1.0, 1.0, 1.0])
    assert combine("ensemble_min", batch).scores.tolist() == [1.0, 2.0, 0.0]
    out = combine("mean_minus_std", batch, coef=0.5)
    expected = [2.0 - 0.5 * 1.0, 2.0, 2.0 - 0.5 * math.sqrt(8 / 3)]
    assert torch.allclose(out.scores, torch.tensor(expected, dtype=torch.float64))
    var = combine("mean_minus_std", batch, coef=0.5, spread="variance", unbiased=True)
    assert torch.allclose(var.scores, torch.tensor([2.0 - 0.5 * 2.0, 2.0, 2.0 - 0.5 * 4.0], dtype=torch.float64))


def test_variance_weighted_reweights_each_objective_by_its_std():
    # objective 1 has 10x the scale of objective 0: after reweighting both count equally
    batch = reward_batch([[0, 0], [1, 10], [0, 10], [1, 0]], [0, 0, 0, 0])
    out = combine("variance_weighted", batch, eps=0.0)
    z0 = (torch.tensor([0, 1, 0, 1.0]) - 0.5) / torch.tensor([0, 1, 0, 1.0]).std()
    z1 = (torch.tensor([0, 10, 10, 0.0]) - 5) / torch.tensor([0, 10, 10, 0.0]).std()
    assert torch.allclose(out.scores.float(), z0 + z1, atol=1e-6)
    assert out.scores[1] > 0 > out.scores[0] and abs(out.scores[2]) < 1e-9
    batch_scope = combine("variance_weighted", reward_batch([[0, 0], [1, 10], [0, 0], [0, 0]], [0, 0, 1, 1]), scope="batch")
    assert batch_scope.scores[2] == batch_scope.scores[3]


# ----------------------------------------------------------------------------- invariants
def random_case(seed: int, n_groups: int = 5, g: int = 4, k: int = 3, nan_fraction: float = 0.15):
    gen = torch.Generator().manual_seed(seed)
    lattice = torch.randint(0, 5, (n_groups * g, k), generator=gen).double() / 4
    continuous = torch.randn(n_groups * g, k, generator=gen, dtype=torch.float64)
    use_lattice = torch.rand(k, generator=gen) < 0.5
    r = torch.where(use_lattice, lattice, continuous)
    r[torch.rand(r.shape, generator=gen) < nan_fraction] = NAN
    weights = (torch.rand(k, generator=gen) * 2).tolist()
    groups = torch.arange(n_groups).repeat_interleave(g)
    lengths = torch.randint(1, 7, (n_groups * g,), generator=gen).tolist()
    return r, groups, weights, lengths


COMBINER_PARAMS = {
    "sum_then_normalize": {},
    "normalize_then_sum": {"renormalize": "none"},
    "variance_weighted": {},
    "gated": {"constraints": ["o0"], "threshold": 0.5},
    "ensemble_min": {},
    "mean_minus_std": {"coef": 0.7},
}


@pytest.mark.parametrize("id_", sorted(COMBINER_PARAMS))
@pytest.mark.parametrize("seed", range(5))
def test_contributions_sum_to_scores_and_shares_sum_to_one(id_, seed):
    r, groups, weights, lengths = random_case(seed, nan_fraction=0.1)
    r[:, 0] = torch.where(torch.isnan(r).all(1), 1.0, r[:, 0])  # every sample scorable
    batch = reward_batch(r.tolist(), groups.tolist(), weights=weights, lengths=lengths)
    out = combine(id_, batch, **COMBINER_PARAMS[id_])
    assert torch.allclose(out.contributions.sum(1), out.scores, atol=1e-9)
    advantages = normalize_scores(out.scores, batch.group_index, NormConfig())
    stats = objective_statistics(batch, out, advantages, batch.reward_names)
    shares = [v for key, v in stats.items() if key.endswith("advantage_share")]
    if shares:
        assert sum(shares) == pytest.approx(1.0, abs=1e-6)


@pytest.mark.parametrize("seed", range(5))
def test_gdpo_advantages_sum_to_zero(seed):
    r, groups, weights, lengths = random_case(seed, nan_fraction=0.0)
    batch = reward_batch(r.tolist(), groups.tolist(), weights=weights, lengths=lengths)
    per_group = combine("normalize_then_sum", batch, renormalize="none").scores.view(5, 4).sum(1)
    assert torch.allclose(per_group, torch.zeros(5, dtype=torch.float64), atol=1e-9)
    assert abs(float(combine("normalize_then_sum", batch).scores.sum())) < 1e-9
    tokens = combine("normalize_then_sum", batch, renormalize="tokens").scores
    assert abs(float((tokens * torch.tensor(lengths, dtype=torch.float64)).sum())) < 1e-9  # token-weighted mean 0


def test_single_objective_gdpo_equals_grpo():
    r, groups, _, _ = random_case(3, k=1, nan_fraction=0.0)
    batch = reward_batch(r.tolist(), groups.tolist())
    gdpo = combine("normalize_then_sum", batch, renormalize="none", eps=1e-6)
    assert torch.allclose(gdpo.scores, normalize_scores(r[:, 0], groups, NormConfig()), atol=1e-12)


def test_objective_statistics_report_signal_and_dominance():
    # objective 0 varies in both groups; objective 1 is constant everywhere
    batch = reward_batch([[0, 1], [1, 1], [0, 0], [1, 0]], [0, 0, 1, 1], names=["acc", "fmt"])
    out = combine("sum_then_normalize", batch)
    adv = normalize_scores(out.scores, batch.group_index, NormConfig())
    stats = objective_statistics(batch, out, adv, batch.reward_names)
    assert stats["objective/acc/signal_group_fraction"] == 1.0
    assert stats["objective/fmt/signal_group_fraction"] == 0.0
    assert stats["objective/acc/advantage_share"] == pytest.approx(1.0)
    assert stats["objective/fmt/advantage_share"] == pytest.approx(0.0)
    assert stats["objective/acc/advantage_abs_mean"] == pytest.approx(1 / math.sqrt(2), rel=1e-4)
