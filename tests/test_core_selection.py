"""D^3S selection: maximum-variance subsets against brute force over all subsets; token top-k."""

from __future__ import annotations

import itertools
import math
import random

import pytest
import torch

from grove.core.selection import (
    keep_count,
    max_variance_subset,
    select_samples,
    select_tokens,
    token_scores,
)


def _var(xs: list[float]) -> float:
    """Population variance (two-pass, in Python floats)."""
    if not xs:
        return 0.0
    mean = math.fsum(xs) / len(xs)
    return math.fsum((x - mean) ** 2 for x in xs) / len(xs)


def _brute_max_var(xs: list[float], m: int) -> float:
    """Largest population variance over ALL subsets of size m."""
    return max(_var([xs[i] for i in c]) for c in itertools.combinations(range(len(xs)), m))


def _random_values(rng: random.Random, n: int, kind: str) -> list[float]:
    if kind == "ties":  # few distinct integers: many ties
        return [float(rng.randint(0, 3)) for _ in range(n)]
    if kind == "binary":
        return [float(rng.randint(0, 1)) for _ in range(n)]
    return [rng.gauss(0.0, 1.0) for _ in range(n)]


def _check_against_brute_force(values: list[float], ids: list[int], m_per_group: dict[int, int], mask):
    for gid, m in m_per_group.items():
        members = [i for i, g in enumerate(ids) if g == gid]
        xs = [values[i] for i in members]
        kept = [values[i] for i in members if mask[i]]
        expected_m = min(m, len(xs))
        assert len(kept) == expected_m, (gid, m, xs, kept)
        best = _brute_max_var(xs, expected_m)
        assert _var(kept) == pytest.approx(best, rel=1e-9, abs=1e-12), (xs, m, kept)


@pytest.mark.parametrize("kind", ["ties", "binary", "float"])
def test_per_group_is_optimal_against_all_subsets(kind):
    rng = random.Random(f"groups-{kind}")
    for _ in range(60):
        sizes = [rng.randint(1, 8) for _ in range(rng.randint(1, 4))]
        gids = rng.sample(range(100), len(sizes))  # arbitrary, non-contiguous ids
        ids = [g for g, s in zip(gids, sizes, strict=True) for _ in range(s)]
        rng.shuffle(ids)  # interleaved groups
        values = _random_values(rng, len(ids), kind)
        m = rng.randint(0, 9)
        mask = max_variance_subset(torch.tensor(values), torch.tensor(ids), m)
        assert mask.dtype == torch.bool and mask.shape == (len(ids),)
        _check_against_brute_force(values, ids, dict.fromkeys(gids, m), mask.tolist())


@pytest.mark.parametrize("kind", ["ties", "float"])
def test_per_group_keep_tensor_against_all_subsets(kind):
    rng = random.Random(f"keep-tensor-{kind}")
    for _ in range(60):
        sizes = [rng.randint(2, 8) for _ in range(rng.randint(1, 4))]
        ids = [g for g, s in enumerate(sizes) for _ in range(s)]
        rng.shuffle(ids)
        values = _random_values(rng, len(ids), kind)
        keep = [rng.randint(0, s + 1) for s in sizes]  # may exceed the size: clipped
        mask = max_variance_subset(torch.tensor(values), torch.tensor(ids), torch.tensor(keep))
        _check_against_brute_force(values, ids, dict(enumerate(keep)), mask.tolist())


@pytest.mark.parametrize("kind", ["ties", "binary", "float"])
def test_batch_wide_is_optimal_against_all_subsets(kind):
    rng = random.Random(f"batch-{kind}")
    for _ in range(60):
        n = rng.randint(1, 10)
        values = _random_values(rng, n, kind)
        m = rng.randint(0, n)
        mask = max_variance_subset(torch.tensor(values), None, m)
        _check_against_brute_force(values, [0] * n, {0: m}, mask.tolist())


def test_extremes_hand_examples_and_tie_break():
    # m=2 of [1, 0, 1, 0, 0, 1]: j=0 (two 1s) and j=2 (two 0s) have variance 0, j=1 has 0.25.
    # Ties in value: the first 0 (index 1) is the smallest, the last 1 (index 5) the largest.
    mask = max_variance_subset(torch.tensor([1.0, 0.0, 1.0, 0.0, 0.0, 1.0]), None, 2)
    assert mask.tolist() == [False, True, False, False, False, True]
    # m=3 of [0, 10, 1, 9, 5]: {0, 1, 10} and {0, 9, 10} both have variance 20.67 -> smallest j
    # (one smallest + two largest) = {0, 9, 10}.
    mask = max_variance_subset(torch.tensor([0.0, 10.0, 1.0, 9.0, 5.0]), None, 3)
    assert mask.tolist() == [True, True, False, True, False]
    # all equal: every subset has variance 0 -> j = 0: the m largest = the last m in stable order
    mask = max_variance_subset(torch.zeros(5), None, 2)
    assert mask.tolist() == [False, False, False, True, True]


def test_group_edge_cases_and_input_types():
    values = torch.tensor([3, 1, 2, 7, 4, 0, 0, 1, 9])  # integer dtype
    ids = torch.tensor([5, 5, 5, 8, 2, 2, 2, 2, 11])  # sizes: 5 -> 3, 8 -> 1, 2 -> 4, 11 -> 1
    mask = max_variance_subset(values, ids, 2)
    assert mask.tolist() == [True, True, False, True, True, True, False, False, True]
    # per-group keep in dense-id order (ids sorted: 2, 5, 8, 11)
    mask = max_variance_subset(values, ids, torch.tensor([4, 0, 1, 3]))
    assert mask.tolist() == [False, False, False, True, True, True, True, True, True]
    assert max_variance_subset(values, ids, 0).sum() == 0
    assert max_variance_subset(values, ids, 100).all()
    assert max_variance_subset(torch.zeros(0), None, 3).shape == (0,)
    # deterministic, and detached inputs are fine
    x = torch.randn(64, generator=torch.Generator().manual_seed(0), requires_grad=True)
    g = torch.arange(64) % 5
    assert torch.equal(max_variance_subset(x, g, 4), max_variance_subset(x, g, 4))


def test_many_groups_match_a_scalar_scan_of_the_lemma():
    """Vectorisation check at a larger size: 200 groups of 16, against a per-group Python scan."""
    gen = torch.Generator().manual_seed(1)
    values = torch.randn(200 * 16, generator=gen, dtype=torch.float64)
    ids = torch.randperm(200 * 16, generator=gen) % 200
    mask = max_variance_subset(values, ids, 5)
    for gid in range(200):
        xs = sorted(values[ids == gid].tolist())
        best = max(_var(xs[:j] + xs[len(xs) - (5 - j) :]) for j in range(6))
        kept = values[(ids == gid) & mask].tolist()
        assert len(kept) == 5
        assert _var(kept) == pytest.approx(best, rel=1e-12)


def test_max_variance_subset_errors():
    with pytest.raises(ValueError, match="finite"):
        max_variance_subset(torch.tensor([0.0, float("nan")]), None, 1)
    with pytest.raises(ValueError, match="keep"):
        max_variance_subset(torch.tensor([0.0, 1.0]), None, -1)
    with pytest.raises(ValueError, match="keep"):
        max_variance_subset(torch.tensor([0.0, 1.0]), torch.tensor([0, 1]), torch.tensor([1, 1, 1]))
    with pytest.raises(ValueError, match="group_index"):
        max_variance_subset(torch.tensor([0.0, 1.0]), torch.tensor([0]), 1)
    with pytest.raises(ValueError, match=r"\[N\]"):
        max_variance_subset(torch.zeros(2, 2), None, 1)


def test_keep_count():
    size = torch.tensor([0, 1, 2, 3, 8, 10, 16])
    assert keep_count(size, 0.5).tolist() == [0, 1, 2, 2, 4, 5, 8]
    assert keep_count(size, 0.3).tolist() == [0, 1, 2, 2, 3, 3, 5]  # 0.3 * 10 keeps 3, not 4
    assert keep_count(size, 0.7).tolist() == [0, 1, 2, 3, 6, 7, 12]  # 0.7 * 10 = 7.000000000000001
    assert keep_count(size, 1.0).tolist() == size.tolist()
    assert keep_count(size, 0.01, minimum=1).tolist() == [0, 1, 1, 1, 1, 1, 1]
    assert keep_count(size, 0.01, minimum=0).tolist() == [0, 1, 1, 1, 1, 1, 1]  # ceil: never empty
    assert keep_count(torch.tensor(5), 0.5).item() == 3
    for bad in (0.0, -0.1, 1.5):
        with pytest.raises(ValueError, match="ratio"):
            keep_count(size, bad)
    with pytest.raises(ValueError, match="minimum"):
        keep_count(size, 0.5, minimum=-1)


def test_select_samples_scopes():
    gen = torch.Generator().manual_seed(2)
    ids = torch.tensor([0] * 8 + [1] * 8 + [2] * 3 + [3] * 1)
    adv = torch.randn(ids.numel(), generator=gen)
    mask = select_samples(adv, ids, 0.25, scope="group")
    assert torch.bincount(ids[mask], minlength=4).tolist() == [2, 2, 2, 1]
    assert torch.equal(mask, max_variance_subset(adv, ids, torch.tensor([2, 2, 2, 1])))
    mask = select_samples(adv, ids, 0.25, scope="batch")
    assert int(mask.sum()) == 5  # ceil(0.25 * 20)
    assert torch.equal(mask, max_variance_subset(adv, None, 5))
    assert select_samples(adv, ids, 1.0).all()
    with pytest.raises(ValueError, match="scope"):
        select_samples(adv, ids, 0.5, scope="sequence")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="ratio"):
        select_samples(adv, ids, 0.0)


def test_token_scores_is_detached_abs_advantage_times_entropy():
    adv = torch.tensor([[1.0, -2.0], [0.0, -0.5]], requires_grad=True)
    ent = torch.tensor([[0.5, 0.25], [3.0, 2.0]], requires_grad=True)
    scores = token_scores(adv, ent)
    assert scores.tolist() == [[0.5, 0.5], [0.0, 1.0]]
    assert not scores.requires_grad
    with pytest.raises(ValueError):
        token_scores(adv, ent[:, :1])


def test_select_tokens_hand_example():
    scores = torch.tensor(
        [
            [0.1, 0.9, 0.5, 0.7, 9.0],  # last token masked out despite the top score
            [2.0, 2.0, 1.0, 2.0, 0.0],  # ties: broken by position
            [5.0, 4.0, 3.0, 2.0, 1.0],  # empty mask
        ]
    )
    mask = torch.tensor([[1, 1, 1, 1, 0], [1, 1, 1, 1, 1], [0, 0, 0, 0, 0]], dtype=torch.float32)
    # per sequence at 0.5: k = ceil(0.5 * 4) = 2, ceil(0.5 * 5) = 3, 0
    out = select_tokens(scores, mask, 0.5)
    assert out.dtype == torch.float32
    assert out.tolist() == [[0, 1, 0, 1, 0], [1, 1, 0, 1, 0], [0, 0, 0, 0, 0]]
    # per sequence at 0.1: at least one token of every non-empty sequence
    assert select_tokens(scores, mask, 0.1).tolist() == [[0, 1, 0, 0, 0], [1, 0, 0, 0, 0], [0] * 5]
    # batch-wide at 0.5: k = ceil(0.5 * 9) = 5 over all mask tokens: 2, 2, 2, 1.0, 0.9
    out = select_tokens(scores, mask, 0.5, scope="batch")
    assert out.tolist() == [[0, 1, 0, 0, 0], [1, 1, 1, 1, 0], [0, 0, 0, 0, 0]]
    out = select_tokens(scores, mask, 0.7, scope="batch")  # k = ceil(6.3) = 7: + 0.7, 0.5
    assert out.tolist() == [[0, 1, 1, 1, 0], [1, 1, 1, 1, 0], [0, 0, 0, 0, 0]]
    # batch-wide ties are broken row-major: earlier sequence, then earlier token
    ties = torch.ones(3, 2)
    assert select_tokens(ties, torch.ones(3, 2), 0.5, scope="batch").tolist() == [[1, 1], [1, 0], [0, 0]]
    assert torch.equal(select_tokens(scores, mask, 1.0), mask)
    assert torch.equal(select_tokens(scores, mask, 1.0, scope="batch"), mask)


def test_select_tokens_never_prefers_masked_out_positions_even_at_minus_inf():
    scores = torch.tensor([[float("-inf"), float("-inf"), 1.0, float("-inf")]])
    mask = torch.tensor([[False, True, True, True]])
    out = select_tokens(scores, mask, 1.0)
    assert out.dtype == torch.bool and out.tolist() == [[False, True, True, True]]
    out = select_tokens(scores, mask, 0.5)  # k = 2: the 1.0, then the first valid -inf
    assert out.tolist() == [[False, True, True, False]]
    assert select_tokens(scores, mask, 0.5, scope="batch").tolist() == [[False, True, True, False]]


def test_select_tokens_random_properties():
    gen = torch.Generator().manual_seed(3)
    for ratio in (0.05, 0.3, 0.5, 0.9):
        scores = torch.randint(0, 4, (12, 20), generator=gen).float()  # many ties
        lengths = torch.randint(0, 21, (12,), generator=gen)
        mask = (torch.arange(20)[None, :] < lengths[:, None]).long()
        out = select_tokens(scores, mask, ratio)
        assert out.dtype == torch.long
        assert not (out.bool() & ~mask.bool()).any()
        assert out.sum(-1).tolist() == keep_count(lengths, ratio, minimum=1).tolist()
        for i in range(12):  # top-k: every kept score >= every dropped score of the same row
            kept = scores[i][out[i].bool()]
            dropped = scores[i][mask[i].bool() & ~out[i].bool()]
            if kept.numel() and dropped.numel():
                assert kept.min() >= dropped.max()
        out = select_tokens(scores, mask, ratio, scope="batch")
        assert not (out.bool() & ~mask.bool()).any()
        assert int(out.sum()) == int(keep_count(lengths.sum(), ratio, minimum=1))
        kept, dropped = scores[out.bool()], scores[mask.bool() & ~out.bool()]
        assert kept.min() >= dropped.max()


def test_select_tokens_errors():
    scores, mask = torch.zeros(2, 3), torch.ones(2, 3)
    with pytest.raises(ValueError, match="scope"):
        select_tokens(scores, mask, 0.5, scope="group")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="ratio"):
        select_tokens(scores, mask, 0.0)
    with pytest.raises(ValueError, match="NaN"):
        select_tokens(torch.full((2, 3), float("nan")), mask, 0.5)
    with pytest.raises(ValueError):
        select_tokens(scores, mask[:, :2], 0.5)
    # NaN outside the mask is ignored
    nan_outside = torch.tensor([[1.0, float("nan")]])
    assert select_tokens(nan_outside, torch.tensor([[1, 0]]), 0.5).tolist() == [[1, 0]]
