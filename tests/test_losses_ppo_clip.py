"""PPO clipped surrogate: hand cases, asymmetric and dual clip, on-policy gradient."""

import math

import pytest
import torch
from pydantic import ValidationError

import grove.core  # noqa: F401  (registration)
from grove.core.losses import PolicyLossInput, PolicyLossOutput
from grove.core.losses.ppo_clip import PPOClipParams, ppo_clip
from grove.registry import POLICY_LOSSES, UnknownComponentError


def run(ratios, advantages, mask=None, **params):
    ratios = torch.tensor([ratios], dtype=torch.float64)
    old = torch.zeros_like(ratios)
    logp = ratios.log().requires_grad_(True)
    adv = torch.tensor([advantages], dtype=torch.float64)
    mask = torch.ones_like(adv) if mask is None else torch.tensor([mask], dtype=torch.float64)
    out = ppo_clip(PolicyLossInput(logp, old, adv, mask), PPOClipParams(**params))
    return out, logp


def test_asymmetric_clip_hand_cases():
    # clip range [0.8, 1.28] (DAPO clip-higher)
    out, logp = run(
        ratios=[1.5, 1.25, 0.5, 1.5, 0.5, 0.9],
        advantages=[1.0, 1.0, -1.0, -1.0, 1.0, 2.0],
        clip_low=0.2,
        clip_high=0.28,
    )
    # 1.5*A clipped to 1.28; 1.25 inside; 0.5 with A<0 clipped up to 0.8; 1.5 with A<0 unclipped;
    # 0.5 with A>0 unclipped (min picks the unclipped 0.5); 0.9*2 inside.
    expected = [-1.28, -1.25, 0.8, 1.5, -0.5, -1.8]
    torch.testing.assert_close(out.token_loss[0], torch.tensor(expected, dtype=torch.float64))
    stats = out.token_stats
    assert stats["clip_high"][0].tolist() == [1, 0, 0, 0, 0, 0]
    assert stats["clip_low"][0].tolist() == [0, 0, 1, 0, 0, 0]
    assert stats["clip"][0].tolist() == [1, 0, 1, 0, 0, 0]
    assert stats["dual_clip"][0].tolist() == [0] * 6
    torch.testing.assert_close(
        stats["ratio"][0], torch.tensor([1.5, 1.25, 0.5, 1.5, 0.5, 0.9], dtype=torch.float64)
    )
    # clipped tokens carry no gradient; unclipped ones d(-r*A)/dlogp = -r*A
    out.token_loss.sum().backward()
    torch.testing.assert_close(
        logp.grad[0], torch.tensor([0.0, -1.25, 0.0, 1.5, -0.5, -1.8], dtype=torch.float64)
    )


def test_symmetric_clip_differs_from_clip_higher():
    out, _ = run(ratios=[1.25], advantages=[1.0])  # default 0.2 / 0.2
    assert out.token_loss.item() == pytest.approx(-1.2)
    assert out.token_stats["clip_high"].item() == 1.0


def test_dual_clip_hand_cases():
    # c = 3: A<0 tokens have loss capped at -c*A = 3|A|
    out, logp = run(ratios=[4.0, 1.5, 4.0, 0.5], advantages=[-2.0, -1.0, 2.0, -1.0], dual_clip_c=3.0)
    # r=4, A=-2: PPO loss 8 → capped at 6; r=1.5, A=-1: 1.5 < 3 unchanged;
    # A>0 never dual-clipped (r=4 clipped to 1.2 → -2.4); r=0.5, A=-1 lower-clipped → 0.8
    expected = [6.0, 1.5, -2.4, 0.8]
    torch.testing.assert_close(out.token_loss[0], torch.tensor(expected, dtype=torch.float64))
    assert out.token_stats["dual_clip"][0].tolist() == [1, 0, 0, 0]
    assert out.token_stats["clip_high"][0].tolist() == [0, 0, 1, 0]
    assert out.token_stats["clip_low"][0].tolist() == [0, 0, 0, 1]
    out.token_loss.sum().backward()
    torch.testing.assert_close(logp.grad[0], torch.tensor([0.0, 1.5, 0.0, 0.0], dtype=torch.float64))


def test_on_policy_ratio_one_no_clip_gradient_is_minus_a_grad_logp():
    torch.manual_seed(0)
    logits = torch.randn(3, 5, 7, requires_grad=True)
    tokens = torch.randint(0, 7, (3, 5))
    logp = logits.log_softmax(-1).gather(-1, tokens[..., None]).squeeze(-1)
    adv = torch.randn(3, 5)
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0], [0, 1, 1, 1, 0]])
    out = ppo_clip(
        PolicyLossInput(logp, logp.detach(), adv, mask), PPOClipParams(clip_low=0.1, clip_high=0.1, dual_clip_c=2.0)
    )
    m = mask.float()
    torch.testing.assert_close(out.token_stats["ratio"], m)
    for key in ("clip", "clip_low", "clip_high", "dual_clip"):
        assert out.token_stats[key].sum().item() == 0.0
    torch.testing.assert_close(out.token_loss, -adv * m)
    (grad_loss,) = torch.autograd.grad(out.token_loss.sum(), logits, retain_graph=True)
    (grad_ref,) = torch.autograd.grad((-adv * m * logp).sum(), logits)
    torch.testing.assert_close(grad_loss, grad_ref)


def test_masked_tokens_are_zero_even_with_garbage():
    logp = torch.tensor([[0.0, -math.inf, float("nan")]])
    old = torch.tensor([[0.0, 0.0, 0.0]])
    adv = torch.tensor([[1.0, 1.0, 1.0]])
    out = ppo_clip(PolicyLossInput(logp, old, adv, torch.tensor([[1, 0, 0]])), PPOClipParams())
    assert out.token_loss.tolist() == [[-1.0, 0.0, 0.0]]
    for value in out.token_stats.values():
        assert value[0, 1:].tolist() == [0.0, 0.0]
        assert value.dtype == torch.float32 and not value.requires_grad


def test_log_ratio_clamp_prevents_overflow():
    out = ppo_clip(
        PolicyLossInput(torch.tensor([[100.0]]), torch.tensor([[0.0]]), torch.tensor([[-1.0]]), torch.ones(1, 1)),
        PPOClipParams(),
    )
    assert torch.isfinite(out.token_loss).all()
    assert out.token_loss.item() == pytest.approx(math.exp(20.0), rel=1e-5)


def test_params_validation_and_registry():
    with pytest.raises(ValidationError):
        PPOClipParams(dual_clip_c=1.0)
    with pytest.raises(ValidationError):
        PPOClipParams(clip_low=1.0)
    with pytest.raises(ValidationError):
        PPOClipParams(clip=0.2)
    params = POLICY_LOSSES.validate_params("ppo_clip", {"clip_high": 0.28, "dual_clip_c": 3})
    assert params == PPOClipParams(clip_low=0.2, clip_high=0.28, dual_clip_c=3.0)
    assert POLICY_LOSSES.get("ppo_clip") is ppo_clip
    assert isinstance(
        ppo_clip(PolicyLossInput(torch.zeros(1, 1), torch.zeros(1, 1), torch.zeros(1, 1), torch.ones(1, 1)), params),
        PolicyLossOutput,
    )
    with pytest.raises(UnknownComponentError):
        POLICY_LOSSES.get("nope")
