"""Segment reductions against hand-computed values."""

import math

import torch

from grove.core.segments import (
    broadcast,
    dense_index,
    segment_count,
    segment_max,
    segment_mean,
    segment_min,
    segment_std,
    segment_sum,
)


def test_dense_index_maps_arbitrary_ids():
    inverse, num = dense_index(torch.tensor([7, 7, 3, 9, 3]))
    assert num == 3
    assert inverse.dtype == torch.long
    assert inverse.tolist() == [1, 1, 0, 2, 0]


def test_sum_count_mean():
    values = torch.tensor([1.0, 2.0, 3.0, 4.0, 10.0])
    index = torch.tensor([0, 0, 1, 1, 2])
    assert segment_sum(values, index, 3).tolist() == [3.0, 7.0, 10.0]
    assert segment_count(index, 3).tolist() == [2, 2, 1]
    assert segment_mean(values, index, 3).tolist() == [1.5, 3.5, 10.0]


def test_empty_segment_is_zero():
    values = torch.tensor([1.0, 3.0])
    index = torch.tensor([0, 0])
    assert segment_sum(values, index, 2).tolist() == [4.0, 0.0]
    assert segment_count(index, 2).tolist() == [2, 0]
    assert segment_mean(values, index, 2).tolist() == [2.0, 0.0]
    torch.testing.assert_close(
        segment_std(values, index, 2, unbiased=True), torch.tensor([math.sqrt(2.0), 0.0])
    )


def test_std_unbiased_and_biased_hand_values():
    # segment 0: [1, 0, 0, 1] mean 0.5, squared deviations sum to 1.0
    values = torch.tensor([1.0, 0.0, 0.0, 1.0, 2.0, 4.0])
    index = torch.tensor([0, 0, 0, 0, 1, 1])
    unbiased = segment_std(values, index, 2, unbiased=True)
    biased = segment_std(values, index, 2, unbiased=False)
    torch.testing.assert_close(unbiased, torch.tensor([math.sqrt(1 / 3), math.sqrt(2.0)]))
    torch.testing.assert_close(biased, torch.tensor([0.5, 1.0]))
    # agrees with torch.std on each segment
    torch.testing.assert_close(unbiased[0], values[:4].std())
    torch.testing.assert_close(biased[1], values[4:].std(unbiased=False))


def test_std_of_single_element_segment_is_zero_not_nan():
    values = torch.tensor([5.0, 1.0, 3.0])
    index = torch.tensor([0, 1, 1])
    for unbiased in (True, False):
        std = segment_std(values, index, 2, unbiased=unbiased)
        assert not torch.isnan(std).any()
        assert std[0].item() == 0.0


def test_min_max_and_broadcast():
    values = torch.tensor([1.0, -2.0, 3.0, 7.0])
    index = torch.tensor([1, 1, 0, 1])
    assert segment_max(values, index, 2).tolist() == [3.0, 7.0]
    assert segment_min(values, index, 2).tolist() == [3.0, -2.0]
    assert broadcast(torch.tensor([10.0, 20.0]), index).tolist() == [20.0, 20.0, 10.0, 20.0]


def test_segment_sum_multidimensional_values():
    values = torch.arange(6.0).reshape(3, 2)
    index = torch.tensor([0, 1, 0])
    assert segment_sum(values, index, 2).tolist() == [[4.0, 6.0], [2.0, 3.0]]


def test_gather_rows_backward_sums_repeats_in_one_order() -> None:
    """A prompt's last state predicts the first token of each of its responses: the gather repeats that row at
    spread positions, and on a CPU with several threads advanced indexing's backward adds the repeats in an order
    that changes from pass to pass (docs/benchmarks.md). gather_rows' must not."""
    from grove.core.segments import gather_rows

    generator = torch.Generator().manual_seed(0)
    rows = []
    for response in range(8):  # row 5 repeated once per response, the responses' own rows in between
        rows += [5, *range(10 + 40 * response, 45 + 40 * response)]
    index = torch.tensor(rows)
    upstream = torch.randn(len(rows), 576, generator=generator)
    values = torch.randn(400, 576, generator=generator, requires_grad=True)
    assert torch.equal(gather_rows(values, index), values[index])
    expected = torch.zeros(400, 576).index_add_(0, index, upstream)  # the repeats summed in index order
    threads = torch.get_num_threads()
    torch.set_num_threads(max(threads, 2))
    try:
        for _ in range(40):
            values.grad = None
            gather_rows(values, index).backward(upstream)
            assert torch.equal(values.grad, expected)
    finally:
        torch.set_num_threads(threads)
