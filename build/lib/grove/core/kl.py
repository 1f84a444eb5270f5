"""Per-token estimators of KL(pi_theta || pi_ref) from samples of pi_theta (``KL_ESTIMATORS``).

An estimator is ``fn(logprobs [N, R], ref_logprobs [N, R]) -> [N, R]``. With ``log_r = ref_logprobs - logprobs`` (the log of ``pi_ref / pi_theta`` at the sampled token),
Schulman, "Approximating KL Divergence" (2020, http://joschu.net/blog/kl-approx.html) gives:

* ``k1 = -log_r``              unbiased, high variance, can be negative;
* ``k2 = 0.5 * log_r ** 2``    biased, low variance, >= 0;
* ``k3 = (r - 1) - log_r``     unbiased, low variance, >= 0 (``exp(x) - 1 >= x``).

``k3`` is computed as ``expm1(log_r) - log_r``: the same value, but ``expm1`` avoids the
cancellation of ``exp(x) - 1`` for small ``x`` and keeps ``k3 >= 0`` in floating point.

``abs`` is verl's ``|logp - ref|`` penalty. ``k1`` and ``k3`` are unbiased estimators of the *value*
of the KL, but as a loss their expected gradients are not the gradient of the KL; ``k2`` has the right
expected gradient (``(logp - ref) grad(logp)``, whose expectation under pi_theta is grad KL). A
straight-through variant (``*_st``) has the value of the named estimator and the gradient of ``k2``:

    st(est) = k2 - sg(k2) + sg(est)

which is verl's ``kl_penalty`` with a ``+`` suffix (``k1+``, ``k3+``; verl's ``k3`` is our
``low_var_k3``, so verl ``k3+`` is ``low_var_k3_st``). The value is the named estimator's exactly
(``k2 - sg(k2)`` is exactly 0 in floating point for finite ``k2``).
"""

from __future__ import annotations

import torch
from torch import Tensor

from grove.core import papers
from grove.registry import KL_ESTIMATORS

ST_PAPER = f"{papers.KL_APPROX}; straight-through k2 gradient as verl's kl_penalty '+' suffix"


def _k3(log_r: Tensor) -> Tensor:
    return torch.expm1(log_r) - log_r


@KL_ESTIMATORS.register("k1", paper=papers.KL_APPROX, summary="logp - ref (unbiased, high variance).", formula="logp - ref",
    reference="verl kl / k1")
def k1(logprobs: Tensor, ref_logprobs: Tensor) -> Tensor:
    """Schulman (2020) k1: ``logp - ref``."""
    return logprobs - ref_logprobs


@KL_ESTIMATORS.register("k2", paper=papers.KL_APPROX, summary="0.5 (logp - ref)^2 (biased, low variance).",
    formula="0.5 (logp - ref)^2", reference="verl mse / k2")
def k2(logprobs: Tensor, ref_logprobs: Tensor) -> Tensor:
    """Schulman (2020) k2: ``0.5 * (logp - ref) ** 2``."""
    return 0.5 * (logprobs - ref_logprobs).square()


@KL_ESTIMATORS.register("k3", paper=papers.KL_APPROX, summary="exp(ref - logp) - (ref - logp) - 1 (unbiased, >= 0).",
    formula="exp(log_r) - log_r - 1, log_r = ref - logp (as expm1(log_r) - log_r)", reference="TRL GRPOTrainer beta term")
def k3(logprobs: Tensor, ref_logprobs: Tensor) -> Tensor:
    """Schulman (2020) k3: ``exp(ref - logp) - (ref - logp) - 1``."""
    return _k3(ref_logprobs - logprobs)


@KL_ESTIMATORS.register(
    "low_var_k3",
    paper=papers.KL_APPROX,
    summary="k3 with log-ratio clamped to [-20, 20], value to [-10, 10] (verl).",
    formula="clamp(k3(clamp(log_r, ±20)), ±10)",
    reference="verl low_var_kl / k3",
)
def low_var_k3(logprobs: Tensor, ref_logprobs: Tensor) -> Tensor:
    """k3 (Schulman 2020) made safe as verl's ``low_var_kl``.

    The log-ratio ``ref - logp`` is clamped to [-20, 20] before ``exp`` and the result to
    [-10, 10] (so in effect to [0, 10]), bounding the penalty and its gradient.
    """
    log_r = (ref_logprobs - logprobs).clamp(-20.0, 20.0)
    return _k3(log_r).clamp(-10.0, 10.0)


def straight_through(value: Tensor, logprobs: Tensor, ref_logprobs: Tensor) -> Tensor:
    """``k2 - sg(k2) + sg(value)``: the value of ``value``, the gradient of ``k2`` (verl's order)."""
    grad_carrier = k2(logprobs, ref_logprobs)
    return grad_carrier - grad_carrier.detach() + value.detach()


@KL_ESTIMATORS.register(
    "abs", paper="verl's abs penalty", summary="|logp - ref| (verl 'abs').", formula="|logp - ref|", reference="verl abs"
)
def abs_kl(logprobs: Tensor, ref_logprobs: Tensor) -> Tensor:
    """``|logp - ref|``, verl's ``abs`` penalty (a distance, not an unbiased KL estimate)."""
    return (logprobs - ref_logprobs).abs()


@KL_ESTIMATORS.register(
    "k1_st", paper=ST_PAPER, summary="Value of k1, gradient of k2 (verl 'k1+').", formula="value k1, gradient k2",
    reference="verl k1+",
)
def k1_st(logprobs: Tensor, ref_logprobs: Tensor) -> Tensor:
    """Straight-through k1: value ``logp - ref``, gradient ``(logp - ref) grad(logp)``."""
    return straight_through(k1(logprobs, ref_logprobs), logprobs, ref_logprobs)


@KL_ESTIMATORS.register(
    "k3_st",
    paper=ST_PAPER,
    summary="Value of k3 (unclamped), gradient of k2.",
    formula="value k3 (unclamped), gradient k2",
    reference="verl k3+ form, without verl's clamps",
)
def k3_st(logprobs: Tensor, ref_logprobs: Tensor) -> Tensor:
    """Straight-through k3: value ``exp(ref - logp) - (ref - logp) - 1``, gradient of ``k2``."""
    return straight_through(k3(logprobs, ref_logprobs), logprobs, ref_logprobs)


@KL_ESTIMATORS.register(
    "low_var_k3_st",
    paper=ST_PAPER,
    summary="Value of low_var_k3, gradient of k2 (verl 'k3+').",
    formula="value low_var_k3, gradient k2",
    reference="verl k3+ / low_var_kl+ (verl's k3 is low_var_k3)",
)
def low_var_k3_st(logprobs: Tensor, ref_logprobs: Tensor) -> Tensor:
    """Straight-through low_var_k3 (verl ``k3+`` / ``low_var_kl+``): clamped k3 value, ``k2`` gradient.

    The gradient is ``k2``'s everywhere, also where the clamps of ``low_var_k3`` are active.
    """
    return straight_through(low_var_k3(logprobs, ref_logprobs), logprobs, ref_logprobs)
