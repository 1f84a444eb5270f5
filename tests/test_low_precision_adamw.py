"""AdamW with bfloat16 moments: the arithmetic equals torch's AdamW, stochastic rounding is unbiased, the second
moment does not stall, the state is half the size, and a config run with it resumes exactly."""

from __future__ import annotations

import pytest
import torch

from grove.training.low_precision_adamw import CHUNK_ELEMENTS, LowPrecisionAdamW, stochastic_round_to_bf16


def _problem(seed: int = 0):
    torch.manual_seed(seed)
    target = torch.randn(300)
    return torch.nn.Parameter(torch.zeros(300)), target


def _run(opt_factory, steps: int = 50):
    param, target = _problem()
    opt = opt_factory([param])
    for _ in range(steps):
        opt.zero_grad()
        ((param - target) ** 2).sum().backward()
        opt.step()
    return param.detach(), opt


@pytest.mark.parametrize("decay", [0.0, 0.1])
def test_float32_state_equals_torch_adamw(decay):
    hyper = dict(lr=1e-2, betas=(0.8, 0.95), eps=1e-6, weight_decay=decay)
    ours, _ = _run(lambda p: LowPrecisionAdamW(p, **hyper, state_dtype=torch.float32))
    ref, _ = _run(lambda p: torch.optim.AdamW(p, **hyper, foreach=False))
    torch.testing.assert_close(ours, ref, rtol=1e-6, atol=1e-7)


def test_bf16_state_tracks_adamw_and_halves_the_state():
    hyper = dict(lr=1e-2, weight_decay=0.01)
    ours, opt = _run(lambda p: LowPrecisionAdamW(p, **hyper, seed=3), steps=200)
    ref, _ = _run(lambda p: torch.optim.AdamW(p, **hyper), steps=200)
    state = next(iter(opt.state.values()))
    assert state["exp_avg"].dtype == state["exp_avg_sq"].dtype == torch.bfloat16
    assert (ours - ref).abs().max() < 0.02 * ref.abs().max()


def test_stochastic_rounding_is_unbiased_and_lands_on_neighbours():
    x = torch.full((200_000,), 1.0 + 2**-10)  # between the bf16 neighbours 1 and 1 + 2^-7, 1/8 of the way up
    rounded = stochastic_round_to_bf16(x.clone(), torch.Generator().manual_seed(0)).float()
    assert set(rounded.unique().tolist()) == {1.0, 1.0 + 2**-7}
    assert rounded.mean().item() == pytest.approx(1.0 + 2**-10, abs=2e-5)
    special = torch.tensor([float("inf"), float("-inf"), 0.0, -2.5])
    out = stochastic_round_to_bf16(special.clone(), torch.Generator().manual_seed(0)).float()
    assert out[:3].tolist() == [float("inf"), float("-inf"), 0.0] and out[3].item() == -2.5


def test_second_moment_does_not_stall():
    """β₂ = 0.999 with a constant gradient: v_t = (1 − 0.999^t) g²; round-to-nearest would freeze v at its
    first value, stochastic rounding follows the float32 trajectory on average."""
    param = torch.nn.Parameter(torch.zeros(4096))
    opt = LowPrecisionAdamW([param], lr=0.0, seed=1)
    for _ in range(1000):
        param.grad = torch.ones(4096)
        opt.step()
    v = opt.state[param]["exp_avg_sq"].float().mean().item()
    assert v == pytest.approx(1 - 0.999**1000, rel=0.01)


def test_large_parameters_are_updated_in_chunks_like_small_ones():
    big = torch.nn.Parameter(torch.zeros(CHUNK_ELEMENTS + 5))
    opt = LowPrecisionAdamW([big], lr=0.1, state_dtype=torch.float32)
    big.grad = torch.ones_like(big)
    opt.step()
    torch.testing.assert_close(big.detach(), torch.full_like(big, -0.1), rtol=1e-5, atol=1e-6)


def test_fsdp2_is_refused_by_the_config():
    from grove.config import ConfigError
    from grove.resolve import load_config

    with pytest.raises(ConfigError, match="optim.state_dtype: bf16"):
        load_config("examples/arithmetic.yaml", ["optim.state_dtype=bf16", "distributed.strategy=fsdp2"])
