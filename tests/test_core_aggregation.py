"""Loss aggregations: hand values and exact micro-batching under a global scale."""

import pytest
import torch

import grove.core  # noqa: F401  (registration)
from grove.core.aggregation import AggregationScale
from grove.registry import LOSS_AGGREGATIONS, UnknownComponentError

MODES = ["token_mean", "seq_mean_token_sum", "seq_mean_token_mean", "seq_mean_token_sum_norm"]

VALUES = torch.tensor([[1.0, 2.0, 3.0, 100.0], [4.0, 100.0, 100.0, 100.0], [100.0, 100.0, 100.0, 100.0]])
MASK = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0], [0, 0, 0, 0]])


def test_scale_from_mask():
    scale = AggregationScale.from_mask(MASK, max_response_length=8)
    assert scale == AggregationScale(num_tokens=4.0, num_sequences=3.0, max_response_length=8)
    assert AggregationScale.from_mask(MASK).max_response_length == 4
    assert AggregationScale.from_mask(torch.zeros(2, 3)).num_tokens == 1.0  # all-masked: no 0/0


@pytest.mark.parametrize(
    "mode, expected",
    [
        ("token_mean", 10 / 4),  # (1+2+3+4) / 4 tokens
        ("seq_mean_token_sum", 10 / 3),  # (6 + 4 + 0) / 3 sequences
        ("seq_mean_token_mean", 2.0),  # (6/3 + 4/1 + 0) / 3
        ("seq_mean_token_sum_norm", 10 / 24),  # 10 / (3 sequences * 8 max length)
    ],
)
def test_hand_values(mode, expected):
    scale = AggregationScale.from_mask(MASK, max_response_length=8)
    assert LOSS_AGGREGATIONS.get(mode)(VALUES, MASK, scale).item() == pytest.approx(expected)


@pytest.mark.parametrize("mode", MODES)
def test_micro_batches_sum_to_full_batch(mode):
    torch.manual_seed(0)
    n, r = 11, 9
    values = torch.randn(n, r, requires_grad=True)
    lengths = torch.tensor([9, 0, 3, 1, 7, 5, 0, 2, 8, 4, 6])
    mask = (torch.arange(r)[None, :] < lengths[:, None]).float()
    scale = AggregationScale.from_mask(mask, max_response_length=16)
    fn = LOSS_AGGREGATIONS.get(mode)
    full = fn(values, mask, scale)
    (grad_full,) = torch.autograd.grad(full, values)
    for splits in ([11], [1] * 11, [4, 4, 3], [2, 9], [5, 1, 5]):
        parts = torch.split(torch.randperm(n), splits)
        total = sum(fn(values[idx], mask[idx], scale) for idx in parts)
        torch.testing.assert_close(total, full)
        (grad_micro,) = torch.autograd.grad(total, values)
        torch.testing.assert_close(grad_micro, grad_full)


def test_local_scale_would_break_micro_batching():
    # sanity: the property needs the *global* scale; micro-batch-local token counts differ
    fn = LOSS_AGGREGATIONS.get("token_mean")
    full = fn(VALUES, MASK, AggregationScale.from_mask(MASK))
    local = sum(
        fn(VALUES[i : i + 1], MASK[i : i + 1], AggregationScale.from_mask(MASK[i : i + 1])) for i in range(3)
    )
    assert local.item() != pytest.approx(full.item())


def test_registry():
    assert set(MODES) <= set(LOSS_AGGREGATIONS.ids())
    assert "Critical Perspective" in LOSS_AGGREGATIONS.entry("seq_mean_token_sum_norm").paper
    with pytest.raises(UnknownComponentError):
        LOSS_AGGREGATIONS.get("token_median")


def test_micro_token_mean_reproduces_trl_bnpo():
    """TRL bnpo: mean over each micro-batch's tokens, averaged over equal-size micro-batches."""
    from grove.core.aggregation import AggregationScale, micro_token_mean, token_mean

    x = torch.tensor([[1.0, 2.0, 3.0], [4.0, 0.0, 0.0], [5.0, 6.0, 0.0], [7.0, 0.0, 0.0]])
    m = torch.tensor([[1, 1, 1], [1, 0, 0], [1, 1, 0], [1, 0, 0]])
    scale = AggregationScale.from_mask(m, 3)
    # micro-batch A = rows 0,1: (1+2+3+4)/4 = 2.5; B = rows 2,3: (5+6+7)/3 = 6; TRL: (2.5 + 6) / 2 = 4.25
    total = micro_token_mean(x[:2], m[:2], scale) + micro_token_mean(x[2:], m[2:], scale)
    torch.testing.assert_close(total, torch.tensor(4.25))
    # one micro-batch: equals token_mean = 28 / 7
    torch.testing.assert_close(micro_token_mean(x, m, scale), token_mean(x, m, scale))
