"""KL estimators: hand values, k3 >= 0, unbiasedness, low-variance clamps."""

import math

import pytest
import torch

import grove.core  # noqa: F401  (registration)
from grove.registry import KL_ESTIMATORS, UnknownComponentError

LOG2 = math.log(2.0)


def kl(name, logp, ref):
    return KL_ESTIMATORS.get(name)(
        torch.tensor(logp, dtype=torch.float64), torch.tensor(ref, dtype=torch.float64)
    )


def test_hand_values():
    # pi_theta(x) = 0.5, pi_ref(x) = 0.25: logp - ref = log 2, r = pi_ref / pi_theta = 0.5
    logp, ref = [[math.log(0.5)]], [[math.log(0.25)]]
    assert kl("k1", logp, ref).item() == pytest.approx(LOG2)
    assert kl("k2", logp, ref).item() == pytest.approx(0.5 * LOG2**2)
    assert kl("k3", logp, ref).item() == pytest.approx(0.5 - 1 + LOG2)  # r - 1 - log r
    assert kl("low_var_k3", logp, ref).item() == pytest.approx(0.5 - 1 + LOG2)
    for name in ("k1", "k2", "k3", "low_var_k3"):
        assert kl(name, [[-1.3]], [[-1.3]]).item() == 0.0


def test_low_var_k3_clamps():
    # ref - logp = 30 → clamped to 20 → exp(20) - 21 → clamped to 10
    assert kl("low_var_k3", [[-30.0]], [[0.0]]).item() == 10.0
    # ref - logp = -30 → clamped to -20 → exp(-20) + 19 → clamped to 10
    assert kl("low_var_k3", [[0.0]], [[-30.0]]).item() == 10.0
    # unclamped k3 of ref - logp = -30 is exp(-30) + 29
    assert kl("k3", [[0.0]], [[-30.0]]).item() == pytest.approx(29.0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_k3_nonnegative_on_random_inputs(dtype):
    torch.manual_seed(0)
    logp = torch.randn(64, 128) * torch.logspace(-9, 1, 128)
    ref = logp + torch.randn(64, 128) * torch.logspace(-9, 1, 128).flip(0)
    for name in ("k3", "low_var_k3", "k2"):
        assert (KL_ESTIMATORS.get(name)(logp.to(dtype), ref.to(dtype)) >= 0).all(), name


def test_k1_and_k3_are_unbiased_for_kl_theta_ref():
    # exact expectation under pi_theta over a small vocabulary equals KL(pi_theta || pi_ref)
    torch.manual_seed(1)
    logp = torch.randn(10, dtype=torch.float64).log_softmax(-1)
    ref = torch.randn(10, dtype=torch.float64).log_softmax(-1)
    p = logp.exp()
    true_kl = (p * (logp - ref)).sum()
    for name in ("k1", "k3", "low_var_k3"):
        torch.testing.assert_close((p * KL_ESTIMATORS.get(name)(logp, ref)).sum(), true_kl)


def test_registry():
    assert {"k1", "k2", "k3", "low_var_k3"} <= set(KL_ESTIMATORS.ids())
    with pytest.raises(UnknownComponentError, match="known"):
        KL_ESTIMATORS.get("k4")
