"""TIS / MIS rollout-correction weights: hand cases, verl and TRL transcriptions, clamps, validation."""

from __future__ import annotations

import math

import pytest
import torch

from grove.core.importance_weights import masked_is_weights, rollout_log_ratio, truncated_is_weights

F64 = torch.float64


def t(rows) -> torch.Tensor:
    return torch.tensor(rows, dtype=F64)


# log ratios: row 0 [0, 0.5, -1.0] (sum -0.5); row 1 [0.2, pad, pad] (sum 0.2)
TRAIN = t([[0.0, -1.0, -2.0], [-0.3, -1.0, -1.0]])
ROLLOUT = t([[0.0, -1.5, -1.0], [-0.5, -7.0, 3.0]])
MASK = t([[1, 1, 1], [1, 0, 0]])
E_HALF, E_MINUS_ONE, E_MINUS_HALF, E_FIFTH = math.exp(0.5), math.exp(-1.0), math.exp(-0.5), math.exp(0.2)


def test_token_level_hand_cases():
    tis = truncated_is_weights(TRAIN, ROLLOUT, MASK, level="token", cap=1.5)
    torch.testing.assert_close(tis, t([[1.0, 1.5, E_MINUS_ONE], [E_FIFTH, 0.0, 0.0]]))
    mis = masked_is_weights(TRAIN, ROLLOUT, MASK, level="token", threshold=1.5)
    torch.testing.assert_close(mis, t([[1.0, 0.0, E_MINUS_ONE], [E_FIFTH, 0.0, 0.0]]))
    band = masked_is_weights(TRAIN, ROLLOUT, MASK, level="token", threshold=1.5, lower_threshold=0.5)
    torch.testing.assert_close(band, t([[1.0, 0.0, 0.0], [E_FIFTH, 0.0, 0.0]]))
    raw = truncated_is_weights(TRAIN, ROLLOUT, MASK, level="token", cap=100.0)
    torch.testing.assert_close(raw, t([[1.0, E_HALF, E_MINUS_ONE], [E_FIFTH, 0.0, 0.0]]))


def test_sequence_level_hand_cases():
    # the sequence weight is the product of its token ratios: exp(-0.5) and exp(0.2)
    tis = truncated_is_weights(TRAIN, ROLLOUT, MASK, level="sequence", cap=1.1)
    torch.testing.assert_close(tis, t([[E_MINUS_HALF] * 3, [1.1, 0.0, 0.0]]))
    mis = masked_is_weights(TRAIN, ROLLOUT, MASK, level="sequence", threshold=1.1)
    torch.testing.assert_close(mis, t([[E_MINUS_HALF] * 3, [0.0, 0.0, 0.0]]))
    band = masked_is_weights(TRAIN, ROLLOUT, MASK, level="sequence", threshold=2.0, lower_threshold=0.7)
    torch.testing.assert_close(band, t([[0.0] * 3, [E_FIFTH, 0.0, 0.0]]))
    torch.testing.assert_close(
        rollout_log_ratio(TRAIN, ROLLOUT, MASK, level="sequence"), t([[-0.5] * 3, [0.2, 0.0, 0.0]])
    )


def test_log_ratio_is_clamped_to_twenty_before_exp():
    train = t([[0.0, 0.0, 0.0]])
    rollout = t([[-30.0, 30.0, 0.0]])
    mask = t([[1, 1, 1]])
    torch.testing.assert_close(
        truncated_is_weights(train, rollout, mask, level="token", cap=1e12),
        t([[math.exp(20.0), math.exp(-20.0), 1.0]]),
    )
    assert truncated_is_weights(train, rollout, mask, level="token", cap=2.0)[0, 0] == 2.0
    assert masked_is_weights(train, rollout, mask, level="token", threshold=2.0)[0, 0] == 0.0
    seq = truncated_is_weights(t([[0.0, 0.0]]), t([[-15.0, -15.0]]), t([[1, 1]]), level="sequence", cap=1e12)
    torch.testing.assert_close(seq, t([[math.exp(20.0)] * 2]))  # the *sum* 30 is clamped


def test_weights_are_detached_and_ignore_padding_garbage():
    train = TRAIN.clone().requires_grad_(True)
    rollout = ROLLOUT.clone()
    rollout[1, 1] = float("nan")
    rollout[1, 2] = float("inf")
    for level in ("token", "sequence"):
        w = truncated_is_weights(train, rollout, MASK, level=level, cap=2.0)
        m = masked_is_weights(train, rollout, MASK, level=level, threshold=2.0)
        for x in (w, m):
            assert not x.requires_grad
            assert torch.isfinite(x).all() and (x[MASK == 0] == 0).all()


def test_validation():
    with pytest.raises(ValueError, match="level"):
        truncated_is_weights(TRAIN, ROLLOUT, MASK, level="seq", cap=2.0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="cap"):
        truncated_is_weights(TRAIN, ROLLOUT, MASK, level="token", cap=0.0)
    with pytest.raises(ValueError, match="threshold"):
        masked_is_weights(TRAIN, ROLLOUT, MASK, level="token", threshold=-1.0)
    with pytest.raises(ValueError, match="lower_threshold"):
        masked_is_weights(TRAIN, ROLLOUT, MASK, level="token", threshold=1.0, lower_threshold=2.0)


# --------------------------------------------------------------------------- reference transcriptions


def verl_weights(train, rollout, mask, level, upper, lower=None):
    """verl ``compute_rollout_correction_weights``, element by element."""
    n, r = train.shape
    out = torch.zeros(n, r, dtype=F64)
    for i in range(n):
        seq_sum = sum(float(train[i, j] - rollout[i, j]) * float(mask[i, j]) for j in range(r))
        for j in range(r):
            log_ratio = float(train[i, j] - rollout[i, j]) if level == "token" else seq_sum
            w = math.exp(min(max(log_ratio, -20.0), 20.0)) * float(mask[i, j])
            if lower is None:
                w = min(w, upper)
            elif not lower <= w <= upper:
                w = 0.0
            out[i, j] = w
    return out


def trl_weights(train, rollout, mask, mode, cap):
    """TRL ``vllm_importance_sampling_correction``: ``[N, 1]`` (sequence) or ``[N, R]`` (token)."""
    diff = (train - rollout) * mask
    ratio = torch.exp(diff.sum(dim=-1, keepdim=True) if mode.startswith("sequence") else diff)
    if mode.endswith("truncate"):
        return torch.clamp(ratio, max=cap)
    return ratio.masked_fill(ratio > cap, 0.0)


def random_logprobs(seed: int, n: int = 6, r: int = 9, scale: float = 0.4):
    g = torch.Generator().manual_seed(seed)
    rollout = -3.0 * torch.rand(n, r, generator=g, dtype=F64)
    train = rollout + scale * torch.randn(n, r, generator=g, dtype=F64)
    mask = (torch.arange(r)[None, :] < torch.randint(1, r + 1, (n, 1), generator=g)).to(F64)
    return train, rollout, mask


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("level", ["token", "sequence"])
def test_equals_verl_tis_and_icepop(seed, level):
    train, rollout, mask = random_logprobs(seed)
    for cap in (0.8, 1.2, 2.0):
        ours = truncated_is_weights(train, rollout, mask, level=level, cap=cap)
        torch.testing.assert_close(ours, verl_weights(train, rollout, mask, level, cap))
    for lower, upper in ((0.5, 2.0), (0.9, 1.1)):
        ours = masked_is_weights(train, rollout, mask, level=level, threshold=upper, lower_threshold=lower)
        torch.testing.assert_close(ours, verl_weights(train, rollout, mask, level, upper, lower))


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("mode", ["token_truncate", "token_mask", "sequence_truncate", "sequence_mask"])
def test_equals_trl_modes_on_loss_tokens(seed, mode):
    train, rollout, mask = random_logprobs(seed)
    level = "sequence" if mode.startswith("sequence") else "token"
    for cap in (0.9, 1.3, 3.0):
        if mode.endswith("truncate"):
            ours = truncated_is_weights(train, rollout, mask, level=level, cap=cap)
        else:
            ours = masked_is_weights(train, rollout, mask, level=level, threshold=cap)
        trl = trl_weights(train, rollout, mask, mode, cap).expand_as(train)
        torch.testing.assert_close(ours * mask, trl * mask)  # TRL leaves padding at its raw ratio
