"""The GRPO-family advantage estimators: hand values, reference transcriptions, invariants.

Each estimator is checked three ways: (1) a small example whose numbers are written out by hand;
(2) against an independent, loop-based transcription of the reference implementation (verl's
``core_algos``/``torch_functional``, TRL's ``GRPOTrainer``, the BNPO authors' code) on random inputs:
several seeds, groups of different sizes with arbitrary interleaved ids, ragged response masks;
(3) invariants (group sums, zero-variance groups, whitened statistics, masking).
"""

from __future__ import annotations

import math
from collections import defaultdict

import pytest
import torch
from pydantic import ValidationError

import grove.core  # noqa: F401  (registration)
from grove.core.advantages.bnpo import BNPOParams
from grove.core.advantages.gpg import GPGParams
from grove.core.advantages.group_norm import GRPOParams, LitePPOParams
from grove.core.advantages.passk import GRPOPassKParams, PassKAnalyticParams
from grove.core.advantages.reinforce_pp import (
    ReinforcePPBaselineParams,
    ReinforcePPParams,
    masked_whiten,
    outcome_returns,
)
from grove.registry import ADVANTAGE_ESTIMATORS, NoParams
from test_advantages_group_norm import make_test_batch

EPS = 1e-6
SEEDS = [0, 1, 2, 3, 4, 5]


def estimator(name):
    return ADVANTAGE_ESTIMATORS.get(name)


def first_token(adv):
    return adv[:, 0]


# ====================================================================== reference transcriptions
# Straightforward loop versions of the reference code's semantics (not our segment ops).
def ref_masked_whiten(values, mask):
    """verl torch_functional.masked_whiten: unbiased masked var, rsqrt(var + 1e-8), shift_mean=True."""
    mask = mask.to(values.dtype)
    mean = (values * mask).sum() / mask.sum()
    var = (((values - mean) ** 2) * mask).sum() / mask.sum()
    var = var * mask.sum() / (mask.sum() - 1)
    return (values - mean) * torch.rsqrt(var + 1e-8)


def ref_token_level_rewards(scores, mask):
    """The outcome score on the last response token (verl's reward managers)."""
    rewards = torch.zeros(mask.shape, dtype=scores.dtype)
    for i in range(mask.shape[0]):
        on = mask[i].nonzero()
        if len(on):
            rewards[i, int(on[-1])] = scores[i]
    return rewards


def ref_reinforce_pp(scores, mask, gamma):
    """verl compute_reinforce_plus_plus_outcome_advantage."""
    rewards = ref_token_level_rewards(scores, mask)
    mask = mask.to(scores.dtype)
    returns = torch.zeros_like(rewards)
    running = torch.zeros(rewards.shape[0], dtype=scores.dtype)
    for t in reversed(range(rewards.shape[1])):
        running = rewards[:, t] + gamma * running
        returns[:, t] = running
        running = running * mask[:, t]
    return ref_masked_whiten(returns, mask) * mask, returns


def ref_groups(index):
    groups = defaultdict(list)
    for i, g in enumerate(index.tolist()):
        groups[g].append(i)
    return groups


def ref_group_means(scores, index):
    """verl's id2mean: torch.mean per group, 0 for a single-sample group."""
    means = {}
    for g, members in ref_groups(index).items():
        means[g] = torch.stack([scores[i] for i in members]).mean() if len(members) > 1 else torch.tensor(0.0)
    return means


def ref_reinforce_pp_baseline(scores, mask, index):
    """verl compute_reinforce_plus_plus_baseline_outcome_advantage."""
    means = ref_group_means(scores, index)
    centered = scores.clone()
    for i, g in enumerate(index.tolist()):
        centered[i] = scores[i] - means[g]
    mask = mask.to(scores.dtype)
    values = centered.unsqueeze(-1).tile([1, mask.shape[1]]) * mask
    return ref_masked_whiten(values, mask) * mask


def ref_gpg(scores, mask, index, f_norm=1.0):
    """verl compute_gpg_outcome_advantage."""
    bsz = scores.shape[0]
    alpha = bsz / torch.count_nonzero(scores).clamp(min=1)
    means = ref_group_means(scores, index)
    adv = scores.clone()
    for i, g in enumerate(index.tolist()):
        adv[i] = alpha * (scores[i] - means[g]) / f_norm
    return adv.unsqueeze(-1) * mask


def ref_opo(scores, mask, index):
    """verl compute_opo_outcome_advantage."""
    lengths = mask.sum(dim=-1).to(scores.dtype)
    baseline = {}
    for g, members in ref_groups(index).items():
        if len(members) == 1:
            baseline[g] = torch.tensor(0.0)
        else:
            s = torch.stack([scores[i] for i in members])
            l_ = torch.stack([lengths[i] for i in members])
            baseline[g] = (l_ * s).sum() / l_.sum()
    adv = scores.clone()
    for i, g in enumerate(index.tolist()):
        adv[i] = scores[i] - baseline[g]
    return adv.unsqueeze(-1) * mask


def ref_trl_batch_scale(rewards, num_generations):
    """TRL GRPOTrainer, scale_rewards="batch" (contiguous groups of num_generations)."""
    mean = rewards.view(-1, num_generations).mean(dim=1).repeat_interleave(num_generations, dim=0)
    std = rewards.std().expand_as(rewards)
    return (rewards - mean) / (std + 1e-4)


def random_case(seed, *, min_group=1, binary=None, width=7, constant_group=True):
    """Groups of sizes min_group..5 with arbitrary interleaved ids, ragged masks, float64 scores."""
    gen = torch.Generator().manual_seed(seed)
    sizes = [int(x) for x in torch.randint(min_group, 6, (5,), generator=gen)]
    ids = torch.tensor([7 * k + 3 for k, size in enumerate(sizes) for _ in range(size)])
    perm = torch.randperm(len(ids), generator=gen)
    ids = ids[perm]
    n = len(ids)
    lengths = torch.randint(0, width + 1, (n,), generator=gen)
    lengths[0], lengths[-1] = width, 1  # at least two tokens in the batch
    binary = seed % 2 == 0 if binary is None else binary
    if binary:
        scores = torch.randint(0, 2, (n,), generator=gen).to(torch.float64)
    else:
        scores = torch.rand(n, generator=gen, dtype=torch.float64)
    if constant_group:
        scores[ids == ids[0]] = 0.3 if not binary else 1.0
    batch = make_test_batch(ids.tolist(), lengths.tolist(), width=width)
    return batch, scores


def with_mask(batch, mask):
    return batch.replace(response_mask=mask.long(), loss_mask=mask.long())


# ====================================================================== masked_whiten / returns
def test_masked_whiten_hand_values():
    values = torch.tensor([[1.0, 2.0, 3.0, 100.0]])
    mask = torch.tensor([[1, 1, 1, 0]])
    # mean 2, unbiased var ((1 + 0 + 1) / 2) = 1 → [-1, 0, 1], padding 0
    expected = torch.tensor([[-1.0, 0.0, 1.0, 0.0]]) / math.sqrt(1 + 1e-8)
    torch.testing.assert_close(masked_whiten(values, mask), expected)
    # shift_mean=False adds the mean back on the masked positions
    torch.testing.assert_close(masked_whiten(values, mask, shift_mean=False), (expected + 2.0) * mask)
    # biased variance: 2 / 3
    torch.testing.assert_close(
        masked_whiten(values, mask, unbiased=False),
        torch.tensor([[-1.0, 0.0, 1.0, 0.0]]) / math.sqrt(2 / 3 + 1e-8),
    )


def test_masked_whiten_matches_verl_and_is_nan_safe():
    for seed in SEEDS:
        gen = torch.Generator().manual_seed(seed)
        values = torch.randn(6, 9, generator=gen, dtype=torch.float64) * 3 + 1
        mask = torch.rand(6, 9, generator=gen) < 0.6
        mask[0, 0] = mask[1, 1] = True
        torch.testing.assert_close(masked_whiten(values, mask), ref_masked_whiten(values, mask) * mask)
        poisoned = torch.where(mask, values, torch.full_like(values, float("nan")))
        torch.testing.assert_close(masked_whiten(poisoned, mask), ref_masked_whiten(values, mask) * mask)


def test_masked_whiten_degenerate_masks():
    values = torch.tensor([[5.0, 7.0]])
    assert masked_whiten(values, torch.tensor([[0, 0]])).tolist() == [[0.0, 0.0]]
    assert masked_whiten(values, torch.tensor([[1, 0]])).tolist() == [[0.0, 0.0]]  # verl raises here


def test_outcome_returns_hand_values():
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0], [0, 0, 0, 0]])
    returns = outcome_returns(torch.tensor([1.0, 2.0, 3.0]), mask, gamma=0.5)
    assert returns.tolist() == [[0.25, 0.5, 1.0, 0.0], [1.0, 2.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]]


def test_outcome_returns_match_verl_loop_on_gappy_masks():
    # a masked-out position inside the response breaks the return chain, as in verl's loop
    for seed in SEEDS:
        gen = torch.Generator().manual_seed(seed)
        mask = torch.rand(8, 10, generator=gen) < 0.7
        mask[0] = False
        mask[1, 1] = True
        scores = torch.randn(8, generator=gen, dtype=torch.float64)
        for gamma in (1.0, 0.9, 0.0):
            _, expected = ref_reinforce_pp(scores, mask.long(), gamma)
            got = outcome_returns(scores, mask, gamma)
            torch.testing.assert_close(got * mask, expected * mask)


# ====================================================================== reinforce_pp
def test_reinforce_pp_hand_values():
    # gamma 1, lengths [2, 1], scores [1, 0]: masked returns [1, 1 | 0]; mean 2/3, unbiased var 1/3
    batch = make_test_batch([0, 1], [2, 1], width=3)
    adv = estimator("reinforce_pp")(batch, torch.tensor([1.0, 0.0]), ReinforcePPParams())
    s = math.sqrt(1 / 3 + 1e-8)
    torch.testing.assert_close(adv, torch.tensor([[(1 / 3) / s, (1 / 3) / s, 0.0], [(-2 / 3) / s, 0.0, 0.0]]))


def test_reinforce_pp_discounted_hand_values():
    # gamma 0.5, lengths [3, 2], scores [1, 2]: returns [0.25, 0.5, 1 | 1, 2]; mean 0.95;
    # squared deviations 0.49 + 0.2025 + 0.0025 + 0.0025 + 1.1025 = 1.8 → unbiased var 0.45
    batch = make_test_batch([0, 0], [3, 2], width=3)
    adv = estimator("reinforce_pp")(batch, torch.tensor([1.0, 2.0]), ReinforcePPParams(gamma=0.5))
    s = math.sqrt(0.45 + 1e-8)
    expected = torch.tensor([[-0.7, -0.45, 0.05], [0.05, 1.05, 0.0]]) / s
    expected[1, 2] = 0.0
    torch.testing.assert_close(adv, expected)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("gamma", [1.0, 0.95, 0.5])
def test_reinforce_pp_matches_verl(seed, gamma):
    batch, scores = random_case(seed)
    adv = estimator("reinforce_pp")(batch, scores, ReinforcePPParams(gamma=gamma))
    expected, _ = ref_reinforce_pp(scores, batch.response_mask, gamma)
    torch.testing.assert_close(adv, expected)


# ====================================================================== reinforce_pp_baseline
def test_reinforce_pp_baseline_hand_values():
    # group means 0.5 and 1 → centred [0.5, -0.5, 0, 0]; tokens [0.5 | -0.5, -0.5 | 0 | 0]:
    # mean -0.1, deviations [0.6, -0.4, -0.4, 0.1, 0.1], unbiased var 0.7 / 4 = 0.175
    batch = make_test_batch([0, 0, 1, 1], [1, 2, 1, 1], width=2)
    adv = estimator("reinforce_pp_baseline")(batch, torch.tensor([1.0, 0.0, 1.0, 1.0]), ReinforcePPBaselineParams())
    s = math.sqrt(0.175 + 1e-8)
    expected = torch.tensor([[0.6, 0.0], [-0.4, -0.4], [0.1, 0.0], [0.1, 0.0]]) / s
    torch.testing.assert_close(adv, expected)


@pytest.mark.parametrize("seed", SEEDS)
def test_reinforce_pp_baseline_matches_verl(seed):
    batch, scores = random_case(seed)
    adv = estimator("reinforce_pp_baseline")(batch, scores, ReinforcePPBaselineParams())
    torch.testing.assert_close(adv, ref_reinforce_pp_baseline(scores, batch.response_mask, batch.group_index))


@pytest.mark.parametrize("name", ["reinforce_pp", "reinforce_pp_baseline"])
def test_whitened_statistics(name):
    for seed in SEEDS:
        batch, scores = random_case(seed, binary=False)
        params = ADVANTAGE_ESTIMATORS.entry(name).params()
        adv = estimator(name)(batch, scores, params)
        on = adv[batch.response_mask.bool()]
        assert abs(on.mean().item()) < 1e-9
        assert on.std().item() == pytest.approx(1.0, abs=1e-6)
        assert (adv[~batch.response_mask.bool()] == 0).all()


# ====================================================================== gpg
def test_gpg_hand_values():
    batch = make_test_batch([0, 0, 0, 1, 1], [1, 1, 1, 1, 1])
    scores = torch.tensor([1.0, 0.0, 0.0, 0.0, 0.0])
    # verl: one non-zero reward → alpha = 5 / 1; group means 1/3 and 0
    adv = first_token(estimator("gpg")(batch, scores, GPGParams()))
    torch.testing.assert_close(adv, 5 * torch.tensor([2 / 3, -1 / 3, -1 / 3, 0.0, 0.0]))
    # paper reading: three samples with a non-zero advantage → alpha = 5 / 3
    adv = first_token(estimator("gpg")(batch, scores, GPGParams(alpha="nonzero_advantage")))
    torch.testing.assert_close(adv, torch.tensor([10 / 9, -5 / 9, -5 / 9, 0.0, 0.0]))
    adv = first_token(estimator("gpg")(batch, scores, GPGParams(alpha="none", f_norm=2.0)))
    torch.testing.assert_close(adv, torch.tensor([1 / 3, -1 / 6, -1 / 6, 0.0, 0.0]))


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("f_norm", [1.0, 0.5])
def test_gpg_matches_verl(seed, f_norm):
    batch, scores = random_case(seed)
    adv = estimator("gpg")(batch, scores, GPGParams(f_norm=f_norm))
    torch.testing.assert_close(adv, ref_gpg(scores, batch.response_mask, batch.group_index, f_norm))


def test_gpg_all_zero_rewards():
    batch = make_test_batch([0, 0, 1, 1], [1, 1, 1, 1])
    adv = estimator("gpg")(batch, torch.zeros(4), GPGParams())
    assert adv.abs().sum() == 0 and not adv.isnan().any()


# ====================================================================== opo
def test_opo_hand_values():
    # lengths [1, 2, 3], scores [1, 0, 1] → b = (1 + 0 + 3) / 6 = 2/3; singleton group keeps 0.7
    batch = make_test_batch([0, 0, 0, 5], [1, 2, 3, 2])
    adv = estimator("opo")(batch, torch.tensor([1.0, 0.0, 1.0, 0.7]), NoParams())
    torch.testing.assert_close(first_token(adv), torch.tensor([1 / 3, -2 / 3, 1 / 3, 0.7]))
    assert adv[1].tolist() == pytest.approx([-2 / 3, -2 / 3, 0.0, 0.0])


@pytest.mark.parametrize("seed", SEEDS)
def test_opo_matches_verl(seed):
    batch, scores = random_case(seed)
    lengths = batch.response_mask.sum(-1)
    keep = torch.ones_like(lengths, dtype=torch.bool)
    for members in ref_groups(batch.group_index).values():  # verl gives NaN for all-empty groups
        if len(members) > 1 and lengths[members].sum() == 0:
            keep[members] = False
    adv = estimator("opo")(batch, scores, NoParams())
    torch.testing.assert_close(adv[keep], ref_opo(scores, batch.response_mask, batch.group_index)[keep])
    assert not adv.isnan().any()


def test_opo_length_weighted_sum_is_zero():
    for seed in SEEDS:
        batch, scores = random_case(seed, min_group=2, binary=False)
        adv = first_token(estimator("opo")(batch, scores, NoParams()))
        lengths = batch.response_mask.sum(-1).to(scores.dtype)
        for members in ref_groups(batch.group_index).values():
            m = torch.tensor(members)
            assert (lengths[m] * adv[m]).sum().item() == pytest.approx(0.0, abs=1e-9)


# ====================================================================== lite_ppo
def test_lite_ppo_hand_values():
    # group means 0.5 and 1.5; unbiased batch std of [1, 0, 0, 3] = sqrt(2); TRL eps 1e-4
    batch = make_test_batch([0, 0, 1, 1], [1, 1, 1, 1])
    adv = estimator("lite_ppo")(batch, torch.tensor([1.0, 0.0, 0.0, 3.0]), LitePPOParams())
    expected = torch.tensor([0.5, -0.5, -1.5, 1.5]) / (math.sqrt(2.0) + 1e-4)
    torch.testing.assert_close(first_token(adv), expected)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("num_generations", [2, 4, 8])
def test_lite_ppo_matches_trl_batch_scale(seed, num_generations):
    gen = torch.Generator().manual_seed(seed)
    n = 4 * num_generations
    rewards = torch.rand(n, generator=gen, dtype=torch.float64).round(decimals=1)
    rewards[:num_generations] = 0.5  # a zero-variance group
    expected = ref_trl_batch_scale(rewards, num_generations)
    groups = (torch.arange(n) // num_generations).tolist()
    lengths = torch.randint(1, 5, (n,), generator=gen).tolist()
    batch = make_test_batch(groups, lengths)
    adv = estimator("lite_ppo")(batch, rewards, LitePPOParams())
    torch.testing.assert_close(first_token(adv), expected, atol=1e-12, rtol=1e-9)
    # interleaved arbitrary ids: the same advantages per sample
    perm = torch.randperm(n, generator=gen)
    shuffled = batch.select(perm).replace(group_index=(torch.tensor(groups) * 11 + 5)[perm])
    adv = estimator("lite_ppo")(shuffled, rewards[perm], LitePPOParams())
    torch.testing.assert_close(first_token(adv), expected[perm], atol=1e-12, rtol=1e-9)


def test_lite_ppo_is_the_group_norm_setting():
    batch, scores = random_case(3)
    gn = ADVANTAGE_ESTIMATORS.validate_params(
        "group_norm", {"mean_level": "group", "std_level": "batch", "eps": 1e-4}
    )
    torch.testing.assert_close(
        estimator("lite_ppo")(batch, scores, LitePPOParams()), estimator("group_norm")(batch, scores, gn)
    )


# ====================================================================== grpo_passk
def test_two_grpo_group_of_two():
    # G = 2, distinct rewards: |r - mean| = |a - b| / 2, unbiased std = |a - b| / sqrt(2) → |A| = 1/sqrt(2)
    batch = make_test_batch([0, 0, 1, 1, 2, 2], [1] * 6)
    scores = torch.tensor([1.0, 0.0, 0.3, 0.9, 0.4, 0.4])
    adv = first_token(estimator("grpo")(batch, scores, GRPOParams()))
    expected = torch.tensor([0.5 / (math.sqrt(0.5) + EPS), -0.5 / (math.sqrt(0.5) + EPS)])
    torch.testing.assert_close(adv[:2], expected)
    torch.testing.assert_close(adv[2:4], torch.tensor([-1.0, 1.0]) / math.sqrt(2), atol=1e-5, rtol=0)
    assert adv[4:].tolist() == [0.0, 0.0]  # ties give 0
    # biased std: std = |a - b| / 2 → |A| = 1 (up to eps)
    adv = first_token(estimator("grpo")(batch, scores, GRPOParams(unbiased_std=False)))
    torch.testing.assert_close(adv[:4], torch.tensor([1.0, -1.0, -1.0, 1.0]), atol=1e-4, rtol=0)


# ====================================================================== invariants
GROUP_CENTRED = {
    "gpg": GPGParams(),
    "lite_ppo": LitePPOParams(),
    "passk_analytic": PassKAnalyticParams(k=2),
}


@pytest.mark.parametrize("name", sorted(GROUP_CENTRED))
def test_group_sums_are_zero(name):
    for seed in SEEDS:
        batch, scores = random_case(seed, min_group=2, binary=name == "passk_analytic")
        full = batch.replace(response_mask=torch.ones_like(batch.response_mask))
        adv = first_token(estimator(name)(full, scores, GROUP_CENTRED[name]))
        for members in ref_groups(batch.group_index).values():
            assert adv[members].sum().item() == pytest.approx(0.0, abs=1e-9)


ALL_NEW = {
    "reinforce_pp_baseline": ReinforcePPBaselineParams(),
    "gpg": GPGParams(),
    "opo": NoParams(),
    "lite_ppo": LitePPOParams(),
    "grpo_passk": GRPOPassKParams(),
    "passk_analytic": PassKAnalyticParams(k=2),
    "bnpo": BNPOParams(),
}


@pytest.mark.parametrize("name", sorted(set(ALL_NEW) - {"reinforce_pp_baseline"}))
def test_zero_variance_group_is_exactly_zero(name):
    # 0.1 * 3 / 3 != 0.1 in float32: constant groups must still give exactly 0
    batch = make_test_batch([0, 0, 0, 1, 1, 2, 2], [2, 1, 3, 1, 2, 2, 2])
    scores = torch.tensor([0.1, 0.1, 0.1, 1.0, 0.0, 0.3, 0.3])
    if name == "passk_analytic":
        scores = torch.tensor([1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0])
    adv = estimator(name)(batch, scores, ALL_NEW[name])
    assert adv[[0, 1, 2, 5, 6]].abs().sum().item() == 0.0
    assert not adv.isnan().any()


@pytest.mark.parametrize("name", sorted(ALL_NEW) + ["reinforce_pp"])
def test_masked_positions_are_zero_and_shapes(name):
    params = ALL_NEW.get(name, ReinforcePPParams())
    for seed in SEEDS:
        batch, scores = random_case(seed, min_group=2, binary=True)
        adv = estimator(name)(batch, scores, params)
        assert adv.shape == batch.response_mask.shape
        assert (adv[~batch.response_mask.bool()] == 0).all()
        assert torch.isfinite(adv).all()
        with pytest.raises(ValueError):
            estimator(name)(batch, scores[:-1], params)


def test_registry_entries():
    expected = {
        "reinforce_pp": (ReinforcePPParams, "REINFORCE++"),
        "reinforce_pp_baseline": (ReinforcePPBaselineParams, "REINFORCE++"),
        "gpg": (GPGParams, "GPG"),
        "opo": (NoParams, "Optimal Reward Baseline"),
        "lite_ppo": (LitePPOParams, "Tricks or Traps"),
        "grpo_passk": (GRPOPassKParams, "Inference Time Objectives"),
        "passk_analytic": (PassKAnalyticParams, "Pass@k Training"),
        "bnpo": (BNPOParams, "BNPO"),
    }
    for name, (params, paper) in expected.items():
        entry = ADVANTAGE_ESTIMATORS.entry(name)
        assert entry.params is params and paper in entry.paper, name
        assert entry.summary
        if params is not NoParams:
            with pytest.raises(ValidationError):
                ADVANTAGE_ESTIMATORS.validate_params(name, {"not_a_knob": 1})
    assert ADVANTAGE_ESTIMATORS.validate_params("reinforce_pp", {"gamma": 0.9}).gamma == 0.9
    with pytest.raises(ValidationError):
        ReinforcePPParams(gamma=1.5)
    with pytest.raises(ValidationError):
        GPGParams(alpha="batch")
    params = GPGParams()
    with pytest.raises(ValidationError):
        params.f_norm = 2.0  # frozen
