"""More KL estimators: ``abs`` and the straight-through ``*_st`` variants.

``k1`` and ``k3`` are unbiased estimators of the *value* of KL(pi_theta || pi_ref), but as a loss
their expected gradients are not the gradient of KL; ``k2 = 0.5 (logp - ref)^2`` has the right
expected gradient (``(logp - ref) grad(logp)``, whose expectation under pi_theta is grad KL).
A straight-through variant has the value of the named estimator and the gradient of ``k2``:

    st(est) = k2 - sg(k2) + sg(est)

which is verl's ``kl_penalty`` with a ``+`` suffix (``k1+``, ``k3+``; verl's ``k3`` is our
``low_var_k3``, so verl ``k3+`` is ``low_var_k3_st``). The value is the named estimator's exactly
(``k2 - sg(k2)`` is exactly 0 in floating point for finite ``k2``).
"""

from __future__ import annotations

from torch import Tensor

from grove.core.kl import KL_PAPER, k1, k2, k3, low_var_k3
from grove.registry import KL_ESTIMATORS

ST_PAPER = f"{KL_PAPER}; straight-through k2 gradient as verl's kl_penalty '+' suffix"


def straight_through(value: Tensor, logprobs: Tensor, ref_logprobs: Tensor) -> Tensor:
    """``k2 - sg(k2) + sg(value)``: the value of ``value``, the gradient of ``k2`` (verl's order)."""
    grad_carrier = k2(logprobs, ref_logprobs)
    return grad_carrier - grad_carrier.detach() + value.detach()


@KL_ESTIMATORS.register("abs", paper=KL_PAPER, summary="|logp - ref| (verl 'abs').")
def abs_kl(logprobs: Tensor, ref_logprobs: Tensor) -> Tensor:
    """``|logp - ref|``, verl's ``abs`` penalty (a distance, not an unbiased KL estimate)."""
    return (logprobs - ref_logprobs).abs()


@KL_ESTIMATORS.register("k1_st", paper=ST_PAPER, summary="Value of k1, gradient of k2 (verl 'k1+').")
def k1_st(logprobs: Tensor, ref_logprobs: Tensor) -> Tensor:
    """Straight-through k1: value ``logp - ref``, gradient ``(logp - ref) grad(logp)``."""
    return straight_through(k1(logprobs, ref_logprobs), logprobs, ref_logprobs)


@KL_ESTIMATORS.register("k3_st", paper=ST_PAPER, summary="Value of k3 (unclamped), gradient of k2.")
def k3_st(logprobs: Tensor, ref_logprobs: Tensor) -> Tensor:
    """Straight-through k3: value ``exp(ref - logp) - (ref - logp) - 1``, gradient of ``k2``."""
    return straight_through(k3(logprobs, ref_logprobs), logprobs, ref_logprobs)


@KL_ESTIMATORS.register(
    "low_var_k3_st", paper=ST_PAPER, summary="Value of low_var_k3, gradient of k2 (verl 'k3+')."
)
def low_var_k3_st(logprobs: Tensor, ref_logprobs: Tensor) -> Tensor:
    """Straight-through low_var_k3 (verl ``k3+`` / ``low_var_kl+``): clamped k3 value, ``k2`` gradient.

    The gradient is ``k2``'s everywhere, also where the clamps of ``low_var_k3`` are active.
    """
    return straight_through(low_var_k3(logprobs, ref_logprobs), logprobs, ref_logprobs)
