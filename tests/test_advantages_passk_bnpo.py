"""Pass@k-style and BNPO advantage estimators (grove.core.advantages.passk) against hand values and
loop transcriptions of verl's and the BNPO authors' code. Shared helpers live in test_advantages_family.py."""


from __future__ import annotations

import math

import pytest
import torch
from pydantic import ValidationError

import grove.core  # noqa: F401  (registration)
from grove.core.advantages import NormConfig, normalize_scores
from grove.core.advantages.bnpo import BNPOParams, beta_parameters
from grove.core.advantages.passk import GRPOPassKParams, PassKAnalyticParams
from test_advantages_family import EPS, SEEDS, estimator, first_token, random_case, ref_groups
from test_advantages_group_norm import make_test_batch


def ref_grpo_passk(scores, mask, index, norm=True, eps=1e-6):
    """verl compute_grpo_passk_outcome_advantage."""
    adv = torch.zeros_like(scores)
    for members in ref_groups(index).values():
        rewards = torch.stack([scores[i] for i in members])
        top, top_idx = torch.topk(rewards, 2)
        value = top[0] - top[1]
        if norm:
            value = value / (torch.std(rewards) + eps)
        adv[members[int(top_idx[0])]] = value
    return adv.unsqueeze(-1) * mask


def ref_bnpo(scores, mask, index, min_value=0.0, max_value=1.0):
    """The BNPO authors' compute_bnpo_outcome_advantage (changyi7231/BNPO)."""
    s = (scores - min_value) / (max_value - min_value)
    groups = ref_groups(index)
    p_of = {}
    for g, members in groups.items():
        p_of[g] = torch.stack([s[i] for i in members]).mean() if len(members) > 1 else torch.tensor(0.0, dtype=s.dtype)
    all_p = torch.stack(list(p_of.values()))
    p_mean = all_p.mean() if all_p.shape[0] > 1 else torch.tensor(0.0, dtype=s.dtype)
    p_var = all_p.var() if all_p.shape[0] > 1 else torch.tensor(1.0, dtype=s.dtype)
    a = (p_mean * (1 - p_mean) / p_var - 1) * p_mean
    b = (p_mean * (1 - p_mean) / p_var - 1) * (1 - p_mean)
    alpha = torch.clamp(1 + a / 3, min=1.0)
    beta = torch.clamp(1 + b / 3, min=1.0)
    adv = s.clone()
    for i, g in enumerate(index.tolist()):
        p = p_of[g]
        weight = torch.distributions.Beta(alpha, beta).log_prob(p).exp()
        weight = torch.clamp(1 / weight, min=0, max=1e6)
        adv[i] = weight * (s[i] - p)
    return adv.unsqueeze(-1) * mask


# ====================================================================== random cases


def test_grpo_passk_hand_values():
    # group 0: max 0.9, second 0.5 → 0.4 / (unbiased std of [0.2, 0.9, 0.5, 0.1] + eps);
    # group 1: tie for the max → all 0; group 2: [0, 1] → 1 / (sqrt(1/2) + eps) on the 1
    batch = make_test_batch([0, 0, 0, 0, 1, 1, 1, 2, 2], [1] * 9)
    scores = torch.tensor([0.2, 0.9, 0.5, 0.1, 1.0, 1.0, 0.0, 0.0, 1.0])
    std0 = math.sqrt((0.225**2 + 0.475**2 + 0.075**2 + 0.325**2) / 3)
    adv = first_token(estimator("grpo_passk")(batch, scores, GRPOPassKParams()))
    expected = torch.tensor([0.0, 0.4 / (std0 + EPS), 0, 0, 0, 0, 0, 0, 1 / (math.sqrt(0.5) + EPS)])
    torch.testing.assert_close(adv, expected)
    adv = first_token(estimator("grpo_passk")(batch, scores, GRPOPassKParams(norm_by_std=False)))
    torch.testing.assert_close(adv, torch.tensor([0.0, 0.4, 0, 0, 0, 0, 0, 0, 1.0]))


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("norm", [True, False])
def test_grpo_passk_matches_verl(seed, norm):
    batch, scores = random_case(seed, min_group=2)
    adv = estimator("grpo_passk")(batch, scores, GRPOPassKParams(norm_by_std=norm))
    torch.testing.assert_close(adv, ref_grpo_passk(scores, batch.response_mask, batch.group_index, norm))


def test_grpo_passk_rejects_single_sample_groups():
    batch = make_test_batch([0, 0, 1], [1, 1, 1])
    with pytest.raises(ValueError, match="at least 2"):
        estimator("grpo_passk")(batch, torch.tensor([1.0, 0.0, 1.0]), GRPOPassKParams())


# ====================================================================== passk_analytic
def test_passk_analytic_hand_values():
    # k = 2, N = 4. One correct: R = 1 - C(3,2)/C(4,2) = 1/2, sigma = 1/2, A+ = 1,
    # A- = (1/2 - C(2,1)/C(3,1)) / (1/2) = -1/3. Two correct: R = 5/6, A± = ±1/sqrt(5).
    # All wrong, and N_neg = 1 < k: 0.
    batch = make_test_batch([0] * 4 + [1] * 4 + [2] * 4 + [3] * 4, [1] * 16)
    scores = torch.tensor([1.0, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0, 0, 1, 1, 1, 0])
    adv = first_token(estimator("passk_analytic")(batch, scores, PassKAnalyticParams(k=2)))
    r5 = 1 / math.sqrt(5)
    expected = torch.tensor([1.0, -1 / 3, -1 / 3, -1 / 3, r5, r5, -r5, -r5] + [0.0] * 8)
    torch.testing.assert_close(adv, expected)


def test_passk_analytic_k1_is_grpo_with_biased_std():
    for seed in SEEDS:
        batch, scores = random_case(seed, min_group=2, binary=True)
        batch = batch.replace(response_mask=torch.ones_like(batch.response_mask))
        adv = first_token(estimator("passk_analytic")(batch, scores, PassKAnalyticParams(k=1)))
        grpo = normalize_scores(scores, batch.group_index, NormConfig(unbiased_std=False, eps=0.0))
        torch.testing.assert_close(adv, grpo)


def test_passk_analytic_rejects_small_groups():
    batch = make_test_batch([0, 0, 1, 1, 1], [1] * 5)
    with pytest.raises(ValueError, match="at least k"):
        estimator("passk_analytic")(batch, torch.ones(5), PassKAnalyticParams(k=3))


# ====================================================================== bnpo
def beta_pdf(p, a, b):
    return p ** (a - 1) * (1 - p) ** (b - 1) * math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b))


def test_bnpo_hand_values():
    # p = 0.5 and 0.75; m = 0.625, v = 2 * 0.125^2 = 0.03125, m(1-m)/v - 1 = 6.5
    # → a = 4.0625, b = 2.4375, alpha = 1 + a/3, beta = 1 + b/3
    batch = make_test_batch([0, 0, 1, 1, 1, 1], [1] * 6)
    scores = torch.tensor([1.0, 0.0, 1.0, 1.0, 1.0, 0.0], dtype=torch.float64)
    alpha, beta = 1 + 4.0625 / 3, 1 + 2.4375 / 3
    a_, b_ = beta_parameters(torch.tensor([0.5, 0.75], dtype=torch.float64))
    assert (a_.item(), b_.item()) == pytest.approx((alpha, beta))
    w1, w2 = 1 / beta_pdf(0.5, alpha, beta), 1 / beta_pdf(0.75, alpha, beta)
    expected = torch.tensor([0.5 * w1, -0.5 * w1, 0.25 * w2, 0.25 * w2, 0.25 * w2, -0.75 * w2], dtype=torch.float64)
    adv = first_token(estimator("bnpo")(batch, scores, BNPOParams()))
    torch.testing.assert_close(adv, expected)


def test_bnpo_degenerate_fits_are_uniform():
    # one group: the authors' m = 0, v = 1 fallback → Beta(1, 1) → A = s - p
    batch = make_test_batch([0, 0, 0, 0], [1] * 4)
    adv = estimator("bnpo")(batch, torch.tensor([1.0, 0.0, 0.0, 1.0]), BNPOParams())
    assert first_token(adv).tolist() == pytest.approx([0.5, -0.5, -0.5, 0.5])
    # two groups with equal p: v = 0 (NaN in the authors' code) → Beta(1, 1) here
    batch = make_test_batch([0, 0, 1, 1], [1] * 4)
    adv = estimator("bnpo")(batch, torch.tensor([1.0, 0.0, 0.0, 1.0]), BNPOParams())
    assert first_token(adv).tolist() == pytest.approx([0.5, -0.5, -0.5, 0.5])


def test_bnpo_affine_score_range():
    batch = make_test_batch([0, 0, 1, 1, 1], [1] * 5)
    scores = torch.tensor([1.0, 0.0, 1.0, 0.0, 0.0])
    params = BNPOParams(min_value=-2.0, max_value=3.0)
    torch.testing.assert_close(
        estimator("bnpo")(batch, scores * 5 - 2, params), estimator("bnpo")(batch, scores, BNPOParams())
    )
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        estimator("bnpo")(batch, scores * 5 - 2, BNPOParams())
    with pytest.raises(ValidationError):
        BNPOParams(min_value=1.0, max_value=1.0)


@pytest.mark.parametrize("seed", SEEDS)
def test_bnpo_matches_authors_code(seed):
    batch, scores = random_case(seed, constant_group=False)
    groups = ref_groups(batch.group_index).values()
    p = {scores[m].mean().item() if len(m) > 1 else 0.0 for m in groups}
    assert len(p) > 1  # a non-degenerate Beta fit (the reference is NaN otherwise)
    adv = estimator("bnpo")(batch, scores, BNPOParams())
    torch.testing.assert_close(adv, ref_bnpo(scores, batch.response_mask, batch.group_index))


# ====================================================================== 2-GRPO (documented)
