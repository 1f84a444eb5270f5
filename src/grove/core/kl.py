"""Per-token estimators of KL(pi_theta || pi_ref) from samples of pi_theta.

With ``log_r = ref_logprobs - logprobs`` (the log of ``pi_ref / pi_theta`` at the sampled token),
Schulman, "Approximating KL Divergence" (2020, http://joschu.net/blog/kl-approx.html) gives:

* ``k1 = -log_r``              unbiased, high variance, can be negative;
* ``k2 = 0.5 * log_r ** 2``    biased, low variance, >= 0;
* ``k3 = (r - 1) - log_r``     unbiased, low variance, >= 0 (``exp(x) - 1 >= x``).

``k3`` is computed as ``expm1(log_r) - log_r``: the same value, but ``expm1`` avoids the
cancellation of ``exp(x) - 1`` for small ``x`` and keeps ``k3 >= 0`` in floating point.
"""

from __future__ import annotations

import torch
from torch import Tensor

from grove.registry import KL_ESTIMATORS

KL_PAPER = "Approximating KL Divergence (Schulman, 2020)"


def _k3(log_r: Tensor) -> Tensor:
    return torch.expm1(log_r) - log_r


@KL_ESTIMATORS.register("k1", paper=KL_PAPER, summary="logp - ref (unbiased, high variance).")
def k1(logprobs: Tensor, ref_logprobs: Tensor) -> Tensor:
    """Schulman (2020) k1: ``logp - ref``."""
    return logprobs - ref_logprobs


@KL_ESTIMATORS.register("k2", paper=KL_PAPER, summary="0.5 (logp - ref)^2 (biased, low variance).")
def k2(logprobs: Tensor, ref_logprobs: Tensor) -> Tensor:
    """Schulman (2020) k2: ``0.5 * (logp - ref) ** 2``."""
    return 0.5 * (logprobs - ref_logprobs).square()


@KL_ESTIMATORS.register("k3", paper=KL_PAPER, summary="exp(ref - logp) - (ref - logp) - 1 (unbiased, >= 0).")
def k3(logprobs: Tensor, ref_logprobs: Tensor) -> Tensor:
    """Schulman (2020) k3: ``exp(ref - logp) - (ref - logp) - 1``."""
    return _k3(ref_logprobs - logprobs)


@KL_ESTIMATORS.register(
    "low_var_k3", paper=KL_PAPER, summary="k3 with log-ratio clamped to [-20, 20], value to [-10, 10] (verl)."
)
def low_var_k3(logprobs: Tensor, ref_logprobs: Tensor) -> Tensor:
    """k3 (Schulman 2020) made safe as verl's ``low_var_kl``.

    The log-ratio ``ref - logp`` is clamped to [-20, 20] before ``exp`` and the result to
    [-10, 10] (so in effect to [0, 10]), bounding the penalty and its gradient.
    """
    log_r = (ref_logprobs - logprobs).clamp(-20.0, 20.0)
    return _k3(log_r).clamp(-10.0, 10.0)
