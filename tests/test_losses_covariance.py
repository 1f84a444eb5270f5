"""Clip-Cov and KL-Cov ("The Entropy Mechanism of Reinforcement Learning for Reasoning Language Models")
against hand cases and loop transcriptions of verl's code. Shared helpers live in
test_losses_family.py."""

from __future__ import annotations

import math

import pytest
import torch

import grove.core  # noqa: F401  (registration)
from grove.core.losses import PolicyLossInput
from grove.core.losses.covariance import ClipCovParams, KLCovParams, clip_cov, clip_cov_loss, kl_cov
from test_losses_family import aggregate, leaf, random_inputs, t, verl_token_mean


def ref_clip_cov(logp, old, adv, mask, lo, hi, ratio, lb, ub):
    """verl Clip-Cov; returns (loss, candidates) and draws the permutation from the global RNG."""
    n_rows, width = logp.shape
    lp = logp.detach()
    n_tok = float(mask.sum())
    mean_a = sum(float(adv[i, j] * mask[i, j]) for i in range(n_rows) for j in range(width)) / (n_tok + 1e-8)
    mean_l = sum(float(lp[i, j] * mask[i, j]) for i in range(n_rows) for j in range(width)) / (n_tok + 1e-8)
    surrogate, candidates = {}, []
    for i in range(n_rows):
        for j in range(width):
            r = torch.exp(logp[i, j] - old[i, j])
            l1, l2 = -adv[i, j] * r, -adv[i, j] * torch.clamp(r, 1 - lo, 1 + hi)
            surrogate[i, j] = torch.maximum(l1, l2)
            cov = (float(adv[i, j]) - mean_a) * (float(lp[i, j]) - mean_l)
            if mask[i, j] > 0 and not float(l2.detach()) > float(l1.detach()) and lb < cov < ub:
                candidates.append((i, j))
    chosen = set()
    if candidates:
        perm = torch.randperm(len(candidates))
        num = min(max(int(ratio * n_tok), 1), len(candidates))
        chosen = {candidates[k] for k in perm[:num].tolist()}
    rows = [
        [surrogate[i, j] * (0.0 if (i, j) in chosen else 1.0) for j in range(width)] for i in range(n_rows)
    ]
    return verl_token_mean(rows, mask), candidates, chosen


def ref_kl_cov(logp, old, adv, mask, ratio, coef):
    n_rows, width = logp.shape
    lp = logp.detach()
    valid = [(i, j) for i in range(n_rows) for j in range(width) if mask[i, j] > 0]
    mean_a = sum(float(adv[i, j]) for i, j in valid) / len(valid)
    mean_l = sum(float(lp[i, j]) for i, j in valid) / len(valid)
    cov = [(float(adv[i, j]) - mean_a) * (float(lp[i, j]) - mean_l) for i, j in valid]
    k = max(1, int(len(valid) * ratio))
    chosen = {valid[q] for q in sorted(range(len(valid)), key=lambda q: cov[q], reverse=True)[:k]}
    rows = []
    for i in range(n_rows):
        row = []
        for j in range(width):
            lr = logp[i, j] - old[i, j]
            loss = -adv[i, j] * torch.exp(lr)
            row.append(loss + coef * lr.abs() if (i, j) in chosen else loss)
        rows.append(row)
    return verl_token_mean(rows, mask), chosen


# --------------------------------------------------------------------------- Clip-Cov and KL-Cov


def test_clip_cov_hand_case():
    # mean A = 0, mean logp = -2.5: covariances [3, -3, -3, 3]; tokens 0 and 3 lie in (1, 5)
    logp = t([[-1.0, -4.0, -1.0, -4.0]]).requires_grad_(True)
    adv = t([[2.0, 2.0, -2.0, -2.0]])
    mask = t([[1, 1, 1, 1]])
    out = clip_cov(PolicyLossInput(logp, logp.detach(), adv, mask), ClipCovParams(clip_cov_ratio=0.5))  # 2 tokens: both
    torch.testing.assert_close(out.token_loss, t([[0.0, -2.0, 2.0, 0.0]]))
    assert out.token_stats["clip_cov"].tolist() == [[1, 0, 0, 1]]
    out.token_loss.sum().backward()
    torch.testing.assert_close(logp.grad, t([[0.0, -2.0, 2.0, 0.0]]))
    # default ratio: max(int(2e-4 * 4), 1) = 1 of the two candidates, chosen at random
    gen = torch.Generator().manual_seed(0)
    out = clip_cov_loss(PolicyLossInput(logp, logp.detach(), adv, mask), ClipCovParams(), generator=gen)
    picked = out.token_stats["clip_cov"][0].tolist()
    assert sum(picked) == 1 and picked[1] == picked[2] == 0


def test_clip_cov_skips_ppo_clipped_tokens():
    logp = t([[-1.0, -4.0, -1.0, -4.0]]).requires_grad_(True)
    adv = t([[2.0, 2.0, -2.0, -2.0]])
    old = logp.detach() - t([[0.5, 0.0, 0.0, 0.0]])  # token 0 is PPO-clipped (ratio e^.5, A > 0)
    out = clip_cov(PolicyLossInput(logp, old, adv, t([[1, 1, 1, 1]])), ClipCovParams(clip_cov_ratio=0.5))
    assert out.token_stats["clip_cov"].tolist() == [[0, 0, 0, 1]]
    assert out.token_stats["clip_high"].tolist() == [[1, 0, 0, 0]]
    torch.testing.assert_close(out.token_loss, t([[-2.4, -2.0, 2.0, 0.0]]))


def cov_inputs(seed: int):
    logp, old, adv, mask = random_inputs(seed, n=6, r=8, scale=0.15, token_adv=seed % 2 == 1)
    return logp, old, 3.0 * adv, mask  # wide advantages: many covariances in (1, 5)


@pytest.mark.parametrize("seed", range(6))
def test_clip_cov_equals_verl_reference_under_the_same_global_seed(seed):
    logp, old, adv, mask = cov_inputs(seed)
    params = ClipCovParams(
        clip_low=0.2, clip_high=0.28, clip_cov_ratio=0.08, clip_cov_lb=1.0, clip_cov_ub=5.0
    )
    a, b = leaf(logp), leaf(logp)
    torch.manual_seed(1000 + seed)
    ref, candidates, chosen = ref_clip_cov(b, old, adv, mask, 0.2, 0.28, 0.08, 1.0, 5.0)
    torch.manual_seed(1000 + seed)
    out = clip_cov(PolicyLossInput(a, old, adv, mask), params)
    assert len(candidates) > len(chosen) >= 1  # the random choice matters
    selected = {tuple(ix) for ix in out.token_stats["clip_cov"].nonzero().tolist()}
    assert selected == chosen
    ours = aggregate("token_mean", out.token_loss, mask)
    ours.backward()
    ref.backward()
    torch.testing.assert_close(ours, ref)
    torch.testing.assert_close(a.grad, b.grad)


def test_clip_cov_generator_makes_the_choice_reproducible_and_independent_of_global_rng():
    logp, old, adv, mask = cov_inputs(0)
    params = ClipCovParams(clip_cov_ratio=0.1)

    def picked(seed):
        torch.manual_seed(seed)  # global state differs; the explicit generator decides
        out = clip_cov_loss(PolicyLossInput(logp, old, adv, mask), params, generator=torch.Generator().manual_seed(7))
        return out.token_stats["clip_cov"]

    assert torch.equal(picked(1), picked(2))
    choices = {
        tuple(
            clip_cov_loss(PolicyLossInput(logp, old, adv, mask), params, generator=torch.Generator().manual_seed(s))
            .token_stats["clip_cov"]
            .flatten()
            .tolist()
        )
        for s in range(8)
    }
    assert len(choices) > 1


def test_kl_cov_hand_case():
    # mean A = 0, mean logp = -2: covariances [1, -1, -1, 1]; k = int(4 * 0.5) = 2 → tokens 0 and 3
    logp = t([[-1.0, -3.0, -1.0, -3.0]]).requires_grad_(True)
    old = logp.detach() - t([[0.1, 0.0, 0.0, -0.2]])
    adv = t([[1.0, 1.0, -1.0, -1.0]])
    out = kl_cov(PolicyLossInput(logp, old, adv, t([[1, 1, 1, 1]])), KLCovParams(kl_cov_ratio=0.5, ppo_kl_coef=1.0))
    r0, r3 = math.exp(0.1), math.exp(-0.2)
    torch.testing.assert_close(out.token_loss, t([[-r0 + 0.1, -1.0, 1.0, r3 + 0.2]]))
    assert out.token_stats["kl_cov"].tolist() == [[1, 0, 0, 1]]
    out.token_loss.sum().backward()
    torch.testing.assert_close(logp.grad, t([[-r0 + 1.0, -1.0, 1.0, r3 - 1.0]]))


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize(("ratio", "coef"), [(2e-4, 1.0), (0.2, 1.0), (0.5, 0.3)])
def test_kl_cov_equals_verl_reference(seed, ratio, coef):
    logp, old, adv, mask = cov_inputs(seed)
    a, b = leaf(logp), leaf(logp)
    ref, chosen = ref_kl_cov(b, old, adv, mask, ratio, coef)
    out = kl_cov(PolicyLossInput(a, old, adv, mask), KLCovParams(kl_cov_ratio=ratio, ppo_kl_coef=coef))
    assert {tuple(ix) for ix in out.token_stats["kl_cov"].nonzero().tolist()} == chosen
    ours = aggregate("token_mean", out.token_loss, mask)
    ours.backward()
    ref.backward()
    torch.testing.assert_close(ours, ref)
    torch.testing.assert_close(a.grad, b.grad)
