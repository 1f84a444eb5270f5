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


# ----------------------------------------------------------------- which rows count as sequences
@pytest.mark.parametrize(
    "mode, all_rows, rows_with_loss_tokens",
    [
        # row 2 of MASK has no loss token: it counts in N under all_rows (N = 3), not under rows_with_loss_tokens (N = 2)
        ("token_mean", 10 / 4, 10 / 4),
        ("seq_mean_token_sum", 10 / 3, 10 / 2),
        ("seq_mean_token_mean", (6 / 3 + 4 / 1) / 3, (6 / 3 + 4 / 1) / 2),
        ("seq_mean_token_sum_norm", 10 / (3 * 8), 10 / (2 * 8)),
    ],
)
def test_sequence_count_hand_values_with_a_fully_masked_row(mode, all_rows, rows_with_loss_tokens):
    fn = LOSS_AGGREGATIONS.get(mode)
    scale = AggregationScale.from_mask(MASK, 8, sequence_count="all_rows")
    assert fn(VALUES, MASK, scale).item() == pytest.approx(all_rows)
    scale = AggregationScale.from_mask(MASK, 8, sequence_count="rows_with_loss_tokens")
    assert scale.num_sequences == 2.0 and not scale.count_empty_rows
    assert fn(VALUES, MASK, scale).item() == pytest.approx(rows_with_loss_tokens)


def test_sequence_count_default_and_bad_value():
    assert AggregationScale.from_mask(MASK) == AggregationScale.from_mask(MASK, sequence_count="all_rows")
    assert AggregationScale.from_mask(torch.zeros(2, 3), sequence_count="rows_with_loss_tokens").num_sequences == 1.0
    with pytest.raises(ValueError, match="sequence_count"):
        AggregationScale.from_mask(MASK, sequence_count="nonempty")


def verl_091_agg_loss(loss_mat, loss_mask, mode, global_batch_size=None, loss_scale_factor=None):
    """An independent loop transcription of verl 0.9.1 ``core_algos.agg_loss`` with ``dp_size = 1``.

    Without ``global_batch_size`` it divides the seq-mean modes by the rows with a loss token; verl's
    PPO trainer passes ``global_batch_size = ppo_mini_batch_size * n`` (every row of the mini-batch).
    """
    rows = []
    for values, mask in zip(loss_mat.tolist(), loss_mask.tolist(), strict=True):
        tokens = sum(mask)
        total = sum(v * m for v, m in zip(values, mask, strict=True))
        rows.append((total, tokens))
    if mode == "token-mean":
        return sum(t for t, _ in rows) / sum(n for _, n in rows)
    nonempty = [(t, n) for t, n in rows if n > 0]
    denominator = len(nonempty) if global_batch_size is None else global_batch_size
    if mode == "seq-mean-token-mean":
        return sum(t / (n + 1e-8) for t, n in nonempty) / denominator
    loss = sum(t for t, _ in nonempty) / denominator
    if mode == "seq-mean-token-sum-norm":
        loss /= loss_scale_factor if loss_scale_factor is not None else loss_mask.shape[-1]
    return loss


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("mode", ["token_mean", "seq_mean_token_sum", "seq_mean_token_mean", "seq_mean_token_sum_norm"])
def test_sequence_count_matches_verl_091_agg_loss(seed, mode):
    g = torch.Generator().manual_seed(seed)
    values = torch.randn(7, 5, generator=g, dtype=torch.float64)
    mask = (torch.rand(7, 5, generator=g) > 0.4).to(torch.float64)
    mask[[1, 4]] = 0  # two fully masked rows
    verl_mode = mode.replace("_", "-")
    fn = LOSS_AGGREGATIONS.get(mode)
    # verl divides a sequence's token sum by n_i + 1e-8, grove by n_i: a relative 1e-8 / n_i, below float32's
    # resolution; every other mode is equal to rounding
    rel = 1.01e-8 if mode == "seq_mean_token_mean" else 1e-12
    # verl's agg_loss on one batch without global batch info = rows_with_loss_tokens
    ours = fn(values, mask, AggregationScale.from_mask(mask, 5, sequence_count="rows_with_loss_tokens")).item()
    assert ours == pytest.approx(verl_091_agg_loss(values, mask, verl_mode), rel=rel)
    # verl's trainer (global_batch_size = every row of the mini-batch) = all_rows
    ours = fn(values, mask, AggregationScale.from_mask(mask, 9, sequence_count="all_rows")).item()
    ref = verl_091_agg_loss(values, mask, verl_mode, global_batch_size=7, loss_scale_factor=9)
    assert ours == pytest.approx(ref, rel=rel)
    # and the two conventions really differ here (two of seven rows are fully masked)
    assert fn(values, mask, AggregationScale.from_mask(mask, 9)).item() != pytest.approx(
        fn(values, mask, AggregationScale.from_mask(mask, 9, sequence_count="rows_with_loss_tokens")).item()
    ) or mode == "token_mean"


@pytest.mark.parametrize("mode", MODES)
def test_rows_with_loss_tokens_is_micro_batch_invariant(mode):
    torch.manual_seed(1)
    values = torch.randn(8, 6)
    lengths = torch.tensor([6, 0, 3, 0, 1, 5, 0, 2])
    mask = (torch.arange(6)[None, :] < lengths[:, None]).float()
    scale = AggregationScale.from_mask(mask, 6, sequence_count="rows_with_loss_tokens")
    fn = LOSS_AGGREGATIONS.get(mode)
    full = fn(values, mask, scale)
    for splits in ([8], [1] * 8, [3, 5], [2, 2, 4]):
        total = sum(fn(values[idx], mask[idx], scale) for idx in torch.split(torch.randperm(8), splits))
        torch.testing.assert_close(total, full)


def test_micro_token_mean_counts_rows_like_the_scale():
    from grove.core.aggregation import micro_token_mean

    x = torch.tensor([[1.0, 2.0], [9.0, 9.0], [3.0, 0.0], [5.0, 7.0]])
    m = torch.tensor([[1, 1], [0, 0], [1, 0], [1, 1]])
    scale = AggregationScale.from_mask(m, 2, sequence_count="rows_with_loss_tokens")
    # micro-batch A = rows 0,1 (one row with tokens): (1+2)/2 * 1/3; B = rows 2,3: (3+5+7)/3 * 2/3
    total = micro_token_mean(x[:2], m[:2], scale) + micro_token_mean(x[2:], m[2:], scale)
    torch.testing.assert_close(total, torch.tensor(1.5 / 3 + 5.0 * 2 / 3))
