"""``abs`` and the straight-through KL estimators: hand values, verl's ``kl_penalty``, gradients."""

from __future__ import annotations

import math

import pytest
import torch

import grove.core  # noqa: F401  (registration)
from grove.core.kl import abs_kl, k1, k1_st, k2, k3, k3_st, low_var_k3, low_var_k3_st
from grove.registry import KL_ESTIMATORS
from grove.resolve import load_config

F64 = torch.float64
ST = {"k1_st": (k1_st, k1), "k3_st": (k3_st, k3), "low_var_k3_st": (low_var_k3_st, low_var_k3)}


def t(values) -> torch.Tensor:
    return torch.tensor(values, dtype=F64)


def random_pair(seed: int, scale: float = 1.0):
    g = torch.Generator().manual_seed(seed)
    ref = -4.0 * torch.rand(4, 6, generator=g, dtype=F64)
    logp = (ref + scale * torch.randn(4, 6, generator=g, dtype=F64)).requires_grad_(True)
    return logp, ref


@pytest.mark.parametrize("name", ["abs", *ST])
def test_registered(name):
    entry = KL_ESTIMATORS.entry(name)
    assert entry.paper and entry.summary


def test_hand_values():
    logp = t([-1.0, -2.0]).requires_grad_(True)
    ref = t([-1.5, -1.0])  # logp - ref = [0.5, -1.0]; log_r = ref - logp = [-0.5, 1.0]
    torch.testing.assert_close(abs_kl(logp, ref), t([0.5, 1.0]))
    torch.testing.assert_close(k1_st(logp, ref), t([0.5, -1.0]))
    k3_values = t([math.exp(-0.5) - 1.0 + 0.5, math.exp(1.0) - 1.0 - 1.0])  # [0.10653, 0.71828]
    torch.testing.assert_close(k3_st(logp, ref), k3_values)
    torch.testing.assert_close(low_var_k3_st(logp, ref), k3_values)
    for fn in (k1_st, k3_st, low_var_k3_st):
        (grad,) = torch.autograd.grad(fn(logp, ref).sum(), logp)
        torch.testing.assert_close(grad, t([0.5, -1.0]))  # k2's gradient: logp - ref
    (grad,) = torch.autograd.grad(abs_kl(logp, ref).sum(), logp)
    torch.testing.assert_close(grad, t([1.0, -1.0]))


@pytest.mark.parametrize("name", list(ST))
@pytest.mark.parametrize("seed", range(3))
def test_straight_through_has_the_named_value_and_k2_gradient(name, seed):
    st, named = ST[name]
    logp, ref = random_pair(seed, scale=3.0)
    value = st(logp, ref)
    assert torch.equal(value, named(logp, ref))  # bit for bit
    weights = torch.rand(logp.shape, dtype=F64, generator=torch.Generator().manual_seed(seed))
    (grad,) = torch.autograd.grad((weights * value).sum(), logp)
    (k2_grad,) = torch.autograd.grad((weights * k2(logp, ref)).sum(), logp)
    assert torch.equal(grad, k2_grad)


def test_low_var_st_keeps_k2_gradient_where_the_clamp_is_active():
    logp = t([0.0, 0.0]).requires_grad_(True)
    ref = t([25.0, -30.0])  # log ratio clamped to ±20, then k3 (e^20 - 21, e^-20 + 19) clamped to 10
    value = low_var_k3_st(logp, ref)
    torch.testing.assert_close(value, t([10.0, 10.0]))
    (clamped_grad,) = torch.autograd.grad(low_var_k3(logp, ref).sum(), logp)
    assert (clamped_grad == 0).all()
    (grad,) = torch.autograd.grad(value.sum(), logp)
    torch.testing.assert_close(grad, t([-25.0, 30.0]))


def verl_kl_penalty(logp: torch.Tensor, ref: torch.Tensor, mode: str) -> torch.Tensor:
    """verl ``kl_penalty`` (with ``kl_penalty_forward``), element by element."""
    base = mode.rstrip("+")
    out = []
    for lp, rf in zip(logp.reshape(-1), ref.reshape(-1), strict=True):
        if base == "k1":
            forward = lp - rf
        elif base == "abs":
            forward = (lp - rf).abs()
        else:  # "k3" / "low_var_kl"
            kl = torch.clamp(rf - lp, min=-20, max=20)
            forward = torch.clamp(torch.exp(kl) - kl - 1, min=-10, max=10)
        if mode.endswith("+"):
            backward = 0.5 * (lp - rf) ** 2
            forward = backward - backward.detach() + forward.detach()
        out.append(forward)
    return torch.stack(out).reshape(logp.shape)


@pytest.mark.parametrize(("ours", "mode"), [(abs_kl, "abs"), (k1_st, "k1+"), (low_var_k3_st, "k3+")])
@pytest.mark.parametrize("seed", range(3))
def test_equals_verl_kl_penalty(ours, mode, seed):
    logp, ref = random_pair(seed, scale=4.0)  # large enough for some clamps to be active
    a = logp.detach().clone().requires_grad_(True)
    b = logp.detach().clone().requires_grad_(True)
    value, expected = ours(a, ref), verl_kl_penalty(b, ref, mode)
    torch.testing.assert_close(value, expected)
    weights = torch.rand(logp.shape, dtype=F64, generator=torch.Generator().manual_seed(seed))
    (weights * value).sum().backward()
    (weights * expected).sum().backward()
    torch.testing.assert_close(a.grad, b.grad)


def test_documented_config_snippet_loads(tmp_path):
    for name in ("abs", *ST):
        path = tmp_path / f"{name}.yaml"
        path.write_text(f"algorithm:\n  kl: {{estimator: {name}, coef: 0.01}}\n")
        assert load_config(path).algorithm.kl.estimator == name
