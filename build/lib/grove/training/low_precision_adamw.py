"""AdamW whose two moments are stored in bfloat16, rounded stochastically (``optim.state_dtype: bf16``).

**Why.** Full fine-tuning keeps per parameter a float32 weight, its float32 gradient and AdamW's two float32
moments: 16 bytes, of which the moments are 8. Storing the moments in bfloat16 saves 4 bytes per parameter
(0.54 GB for the 135M default), the largest single cut of a bf16 step's peak memory (docs/benchmarks.md).

**The update** is torch's AdamW (Loshchilov & Hutter, *Decoupled Weight Decay Regularization*, 2019), computed
in float32 on a float32 copy of each moment chunk:

    θ ← θ·(1 − lr·λ);   m ← β₁m + (1 − β₁)g;   v ← β₂v + (1 − β₂)g²
    θ ← θ − (lr / (1 − β₁ᵗ)) · m / (√v / √(1 − β₂ᵗ) + ε)

then ``m`` and ``v`` are written back to bfloat16 with **stochastic rounding**: the float32 bit pattern gets
a uniform random integer in ``[0, 2¹⁶)`` added to its low half, which is then cleared, so a value rounds up
with probability equal to its distance from the lower bfloat16 neighbour, and ``E[round(x)] = x``.
Round-to-nearest would stall the second moment: with β₂ = 0.999 an update changes ``v`` by 0.1%, below
bfloat16's 0.4% resolution, so ``v`` would never move from its first values (Zamirai et al., *Revisiting
BFloat16 Training*, 2020, show the same stall for weights; stochastic rounding removes the bias).

**Reproducible and resumable.** The rounding bits come from a generator seeded by ``(seed, step, parameter,
chunk)``, so a run resumed from a checkpoint rounds exactly as the uninterrupted one; no generator state is
saved. Parameters are processed in chunks of :data:`CHUNK_ELEMENTS` so the float32 temporaries stay small.

Not for FSDP2 (sharded parameters): the config refuses the combination.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch
from torch import Tensor

__all__ = ["CHUNK_ELEMENTS", "LowPrecisionAdamW", "stochastic_round_to_bf16"]

CHUNK_ELEMENTS = 1 << 22  # 4M elements: ≤ 48 MB of float32 temporaries per chunk
_HIGH_HALF = -(1 << 16)  # 0xFFFF0000 as an int32 mask


def stochastic_round_to_bf16(x: Tensor, generator: torch.Generator | None = None, noise: Tensor | None = None) -> Tensor:
    """Round float32 ``x`` to bfloat16, up or down with probabilities proportional to the distance (unbiased).

    ``noise``: int32 values uniform in ``[0, 2¹⁶)`` (drawn from ``generator`` when not given). ``x`` is used as
    scratch (its contents are destroyed). Infinities and NaNs stay what they are."""
    if noise is None:
        noise = torch.randint(0, 1 << 16, x.shape, dtype=torch.int32, generator=generator, device=x.device)
    x.view(torch.int32).add_(noise).bitwise_and_(_HIGH_HALF)
    return x.to(torch.bfloat16)  # exact: the low 16 bits are zero


class LowPrecisionAdamW(torch.optim.Optimizer):
    """AdamW with moments stored in ``state_dtype`` (bfloat16: stochastically rounded; float32: plain AdamW, used
    to check the arithmetic against ``torch.optim.AdamW``)."""

    def __init__(
        self,
        params: Iterable[Tensor],
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        state_dtype: torch.dtype = torch.bfloat16,
        seed: int = 0,
    ) -> None:
        if state_dtype not in (torch.bfloat16, torch.float32):
            raise ValueError(f"state_dtype must be bfloat16 or float32, got {state_dtype}")
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)
        super().__init__(params, defaults)
        self.state_dtype = state_dtype
        self.seed = seed

    @torch.no_grad()
    def step(self, closure=None):  # noqa: ANN001 - torch's signature
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        index = 0
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            lr, eps, decay = group["lr"], group["eps"], group["weight_decay"]
            for param in group["params"]:
                index += 1
                if param.grad is None:
                    continue
                if hasattr(param, "to_local"):
                    raise RuntimeError("optim.state_dtype: bf16 does not support FSDP2-sharded parameters")
                state = self.state[param]
                if not state:
                    state["step"] = torch.zeros((), dtype=torch.float32)
                    state["exp_avg"] = torch.zeros_like(param, dtype=self.state_dtype)
                    state["exp_avg_sq"] = torch.zeros_like(param, dtype=self.state_dtype)
                state["step"] += 1
                step = int(state["step"].item())
                step_size = lr / (1 - beta1**step)
                root_correction = math.sqrt(1 - beta2**step)
                flat = (param.view(-1), param.grad.view(-1), state["exp_avg"].view(-1), state["exp_avg_sq"].view(-1))
                for chunk, start in enumerate(range(0, param.numel(), CHUNK_ELEMENTS)):
                    p, g, m_store, v_store = (t[start : start + CHUNK_ELEMENTS] for t in flat)
                    m = m_store.float()  # float32 state: the stored chunk itself, updated in place
                    v = v_store.float()
                    m.lerp_(g, 1 - beta1)
                    v.mul_(beta2).addcmul_(g, g, value=1 - beta2)
                    if decay:
                        p.mul_(1 - lr * decay)
                    p.addcdiv_(m, v.sqrt().div_(root_correction).add_(eps), value=-step_size)
                    if self.state_dtype == torch.bfloat16:
                        rounding = torch.Generator(device=p.device)
                        rounding.manual_seed(hash((self.seed, step, index, chunk)) & ((1 << 63) - 1))
                        # one draw of 31 random bits rounds both moments: bits 0-15 for m, bits 15-30 for v
                        bits = torch.empty(m.shape, dtype=torch.int32, device=p.device).random_(generator=rounding)
                        v_store.copy_(stochastic_round_to_bf16(v, noise=bits >> 15))
                        m_store.copy_(stochastic_round_to_bf16(m, noise=bits.bitwise_and_(0xFFFF)))
        return loss
