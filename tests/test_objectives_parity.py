"""Reward combination against independent loop transcriptions of the references, on random inputs.

* TRL 1.16 ``GRPOTrainer._generate_and_score_completions``: ``multi_objective_aggregation`` in
  ``{"sum_then_normalize", "normalize_then_sum"}`` with ``scale_rewards="group"``: NaN-aware group
  statistics (``nanmean``; ``nanstd`` with Bessel's correction, NaN for fewer than two values), ``+ 1e-4``,
  weighted ``nansum``, unscorable rows (every reward None) excluded and given advantage 0; ``normalize_then_sum``
  then renormalises over the batch.
* verl ``compute_gdpo_outcome_advantage`` (``adv_estimator=gdpo``): each reward through
  ``compute_grpo_outcome_advantage`` (``torch.std`` unbiased, ``eps = 1e-6``, a single-sample group has mean 0
  and std 1), weighted sum, then ``masked_whiten`` over the response tokens (unbiased token variance,
  ``rsqrt(var + 1e-8)``).

The transcriptions are plain Python over lists (float64), written from the references' code, not from ours.
"""

from __future__ import annotations

import math

import pytest
import torch

from grove.registry import ADVANTAGE_ESTIMATORS, NoParams
from test_objectives_combiners import combine, random_case, reward_batch

NAN = math.nan


def _nanmean(xs):
    vals = [x for x in xs if not math.isnan(x)]
    return sum(vals) / len(vals) if vals else NAN


def _nanstd(xs):
    vals = [x for x in xs if not math.isnan(x)]
    if len(vals) < 2:
        return NAN
    m = sum(vals) / len(vals)
    return math.sqrt(sum((v - m) ** 2 for v in vals) / (len(vals) - 1))


def _nansum(xs):
    return sum(x for x in xs if not math.isnan(x))


def trl_advantages(rows, groups, weights, mode):
    """TRL 1.16 ``sum_then_normalize`` / ``normalize_then_sum`` (scale_rewards='group'), per sample."""
    n, k = len(rows), len(rows[0])
    unscorable = [all(math.isnan(v) for v in row) for row in rows]
    members = {}
    for i, g in enumerate(groups):
        members.setdefault(g, []).append(i)
    if mode == "sum_then_normalize":
        rewards = [NAN if unscorable[i] else _nansum([rows[i][j] * weights[j] for j in range(k)]) for i in range(n)]
        adv = [0.0] * n
        for idx in members.values():
            mean = _nanmean([rewards[i] for i in idx])
            std = _nanstd([rewards[i] for i in idx])
            for i in idx:
                adv[i] = (rewards[i] - mean) / (std + 1e-4)
    else:
        z = [[NAN] * k for _ in range(n)]
        for idx in members.values():
            for j in range(k):
                col = [rows[i][j] for i in idx]
                mean, std = _nanmean(col), _nanstd(col)
                for i in idx:
                    z[i][j] = (rows[i][j] - mean) / (std + 1e-4)
        rewards = [NAN if unscorable[i] else _nansum([z[i][j] * weights[j] for j in range(k)]) for i in range(n)]
        mean, std = _nanmean(rewards), _nanstd(rewards) if n > 1 else 0.0
        adv = [(r - mean) / (std + 1e-4) for r in rewards]
    return [0.0 if math.isnan(a) else a for a in adv]  # torch.nan_to_num(advantages, nan=0.0)


def verl_gdpo(rows, groups, weights, lengths, eps=1e-6):
    """verl ``compute_gdpo_outcome_advantage``: per-reward verl GRPO, weighted sum, masked_whiten over tokens."""
    n, k = len(rows), len(rows[0])
    members = {}
    for i, g in enumerate(groups):
        members.setdefault(g, []).append(i)
    summed = [0.0] * n
    for j in range(k):
        for idx in members.values():
            col = [rows[i][j] for i in idx]
            if len(col) == 1:
                mean, std = 0.0, 1.0
            else:
                mean = sum(col) / len(col)
                std = math.sqrt(sum((c - mean) ** 2 for c in col) / (len(col) - 1))
            for i in idx:
                summed[i] += weights[j] * (rows[i][j] - mean) / (std + eps)
    tokens = [summed[i] for i in range(n) for _ in range(lengths[i])]
    mu = sum(tokens) / len(tokens)
    var = sum((t - mu) ** 2 for t in tokens) / len(tokens) * (len(tokens) / (len(tokens) - 1))
    return [(s - mu) / math.sqrt(var + 1e-8) for s in summed]


def _rows(r):
    return [[float(v) for v in row] for row in r.tolist()]


@pytest.mark.parametrize("seed", range(20))
def test_normalize_then_sum_equals_trl(seed):
    r, groups, weights, lengths = random_case(seed, n_groups=4, g=4, k=3, nan_fraction=0.25)
    r[seed % 16] = NAN  # one unscorable sample: TRL excludes it and gives it 0
    batch = reward_batch(_rows(r), groups.tolist(), weights=weights, lengths=lengths)
    ours = combine("normalize_then_sum", batch)  # defaults = TRL: eps 1e-4, lone_value ignore, renormalize batch
    expected = trl_advantages(_rows(r), groups.tolist(), weights, "normalize_then_sum")
    assert torch.allclose(ours.scores, torch.tensor(expected, dtype=torch.float64), atol=1e-8, rtol=1e-8)


@pytest.mark.parametrize("seed", range(20))
def test_sum_then_normalize_with_grpo_eps_1e4_equals_trl(seed):
    r, groups, weights, lengths = random_case(seed, n_groups=4, g=4, k=3, nan_fraction=0.25)
    r[:, 2] = torch.where(torch.isnan(r).all(1), 0.5, r[:, 2])  # grove refuses unscorable samples here
    batch = reward_batch(_rows(r), groups.tolist(), weights=weights, lengths=lengths)
    scores = combine("sum_then_normalize", batch).scores
    grpo = ADVANTAGE_ESTIMATORS.get("grpo")
    ours = grpo(batch, scores, ADVANTAGE_ESTIMATORS.validate_params("grpo", {"eps": 1e-4}))[:, 0]
    expected = trl_advantages(_rows(r), groups.tolist(), weights, "sum_then_normalize")
    assert torch.allclose(ours, torch.tensor(expected, dtype=torch.float64), atol=1e-8, rtol=1e-8)


@pytest.mark.parametrize("seed", range(20))
def test_normalize_then_sum_tokens_equals_verl_gdpo(seed):
    r, groups, weights, lengths = random_case(seed, n_groups=4, g=4, k=3, nan_fraction=0.0)
    if seed % 4 == 0:  # verl's single-sample groups (mean 0, std 1)
        groups = torch.tensor([0, 0, 0, 1, 2, 2, 2, 2, 3, 3, 4, 5, 5, 5, 6, 6])
    batch = reward_batch(_rows(r), groups.tolist(), weights=weights, lengths=lengths)
    ours = combine("normalize_then_sum", batch, eps=1e-6, lone_value="raw", renormalize="tokens")
    expected = verl_gdpo(_rows(r), groups.tolist(), weights, lengths)
    assert torch.allclose(ours.scores, torch.tensor(expected, dtype=torch.float64), atol=1e-8, rtol=1e-8)
    per_token = ADVANTAGE_ESTIMATORS.get("score_as_advantage")(batch, ours.scores, NoParams())
    assert torch.equal(per_token[batch.response_mask], ours.scores.repeat_interleave(torch.tensor(lengths)))


def test_float32_parity_within_float32_precision():
    r, groups, weights, lengths = random_case(7, n_groups=8, g=8, k=4, nan_fraction=0.2)
    batch = reward_batch(_rows(r), groups.tolist(), weights=weights, lengths=lengths, dtype=torch.float32)
    ours = combine("normalize_then_sum", batch).scores.double()
    expected = trl_advantages(_rows(r.float().double()), groups.tolist(), weights, "normalize_then_sum")
    assert torch.allclose(ours, torch.tensor(expected, dtype=torch.float64), atol=2e-5)
