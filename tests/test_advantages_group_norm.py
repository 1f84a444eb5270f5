"""Advantage estimators: hand-computed values and invariants."""

import math

import pytest
import torch
from pydantic import ValidationError

import grove.core  # noqa: F401  (registration)
from grove.batch import RolloutBatch
from grove.core.advantages.group_norm import GroupNormParams, GRPOParams, NormConfig, normalize_scores
from grove.registry import ADVANTAGE_ESTIMATORS, NoParams, UnknownComponentError

EPS = 1e-6


def make_test_batch(group_index, response_lengths, width=4) -> RolloutBatch:
    n = len(group_index)
    response_mask = (torch.arange(width)[None, :] < torch.tensor(response_lengths)[:, None]).long()
    return RolloutBatch(
        prompt_ids=torch.ones(n, 2, dtype=torch.long),
        prompt_mask=torch.ones(n, 2, dtype=torch.long),
        response_ids=torch.ones(n, width, dtype=torch.long),
        response_mask=response_mask,
        loss_mask=response_mask.clone(),
        old_logprobs=torch.zeros(n, width),
        rewards=torch.zeros(n, 1),
        reward_names=("r",),
        group_index=torch.tensor(group_index),
        trajectory_index=torch.arange(n),
        step_index=torch.zeros(n, dtype=torch.long),
        truncated=torch.zeros(n, dtype=torch.bool),
    )


def group_sums(adv, groups):
    groups = torch.tensor(groups)
    return torch.stack([adv[groups == g].sum() for g in groups.unique()])


# ------------------------------------------------------------------ hand-computed values
def test_grpo_hand_values_1001():
    # mean 0.5, unbiased std sqrt(1/3): A = ±0.5 / (sqrt(1/3) + 1e-6)
    adv = normalize_scores(torch.tensor([1.0, 0.0, 0.0, 1.0]), torch.tensor([0, 0, 0, 0]), NormConfig())
    a = 0.5 / (math.sqrt(1 / 3) + EPS)
    torch.testing.assert_close(adv, torch.tensor([a, -a, -a, a]))
    assert abs(a - 0.8660254) < 1e-5


def test_grpo_biased_std_hand_values():
    # biased std of [1, 0, 0, 1] is 0.5 → A = ±0.5 / (0.5 + eps) ≈ ±1
    cfg = NormConfig(unbiased_std=False)
    adv = normalize_scores(torch.tensor([1.0, 0.0, 0.0, 1.0]), torch.tensor([0, 0, 0, 0]), cfg)
    a = 0.5 / (0.5 + EPS)
    torch.testing.assert_close(adv, torch.tensor([a, -a, -a, a]))


def test_grpo_two_groups_arbitrary_ids():
    # group 42: [2, 4] mean 3, std sqrt(2); group 5: [0, 3, 6] mean 3, std 3
    scores = torch.tensor([2.0, 0.0, 4.0, 3.0, 6.0])
    groups = torch.tensor([42, 5, 42, 5, 5])
    adv = normalize_scores(scores, groups, NormConfig())
    s2 = math.sqrt(2.0)
    expected = torch.tensor([-1 / (s2 + EPS), -3 / (3 + EPS), 1 / (s2 + EPS), 0.0, 3 / (3 + EPS)])
    torch.testing.assert_close(adv, expected)


def test_single_sample_group_verl_convention():
    # verl: single-sample group uses mean 0, std 1 → A = r / (1 + eps)
    adv = normalize_scores(torch.tensor([0.7, 1.0, 0.0]), torch.tensor([9, 1, 1]), NormConfig())
    assert adv[0].item() == pytest.approx(0.7 / (1 + EPS), abs=1e-7)
    # Dr. GRPO: mean 0 for a single-sample group → raw score
    adv = normalize_scores(
        torch.tensor([0.7, 1.0, 0.0]), torch.tensor([9, 1, 1]), NormConfig(std_level="none")
    )
    assert adv.tolist() == pytest.approx([0.7, 0.5, -0.5])


def test_zero_variance_group_is_exactly_zero():
    # 0.1 * 3 / 3 != 0.1 in floating point: the max == min test must still give exactly 0
    scores = torch.tensor([0.1, 0.1, 0.1, 1.0, 0.0, 0.3, 0.3])
    groups = torch.tensor([0, 0, 0, 1, 1, 2, 2])
    for cfg in (
        NormConfig(),
        NormConfig(std_level="none"),
        NormConfig(std_level="none", leave_one_out=True),
        NormConfig(leave_one_out=True),
        NormConfig(unbiased_std=False),
        NormConfig(eps=0.0),
    ):
        adv = normalize_scores(scores, groups, cfg)
        assert adv[[0, 1, 2, 5, 6]].tolist() == [0.0] * 5, cfg
        assert not torch.isnan(adv).any()


def test_dr_grpo_hand_values():
    adv = normalize_scores(
        torch.tensor([1.0, 0.0, 0.0, 1.0, 3.0, 1.0]),
        torch.tensor([0, 0, 0, 0, 1, 1]),
        NormConfig(std_level="none"),
    )
    assert adv.tolist() == [0.5, -0.5, -0.5, 0.5, 1.0, -1.0]


def test_rloo_hand_values():
    # [1, 0, 0, 1]: others of a 1 are {0, 0, 1} mean 1/3 → 2/3; others of a 0 are {0, 1, 1} → -2/3
    adv = normalize_scores(
        torch.tensor([1.0, 0.0, 0.0, 1.0]),
        torch.tensor([0, 0, 0, 0]),
        NormConfig(std_level="none", leave_one_out=True),
    )
    torch.testing.assert_close(adv, torch.tensor([2 / 3, -2 / 3, -2 / 3, 2 / 3]))


def test_rloo_matches_independent_leave_one_out():
    torch.manual_seed(0)
    scores = torch.randn(12)
    groups = torch.tensor([3, 3, 3, 0, 0, 7, 7, 7, 7, 3, 0, 7])
    adv = normalize_scores(scores, groups, NormConfig(std_level="none", leave_one_out=True))
    expected = torch.empty(12)
    for i in range(12):  # independent reference, loops are fine in a test
        others = [scores[j] for j in range(12) if j != i and groups[j] == groups[i]]
        expected[i] = scores[i] - torch.stack(others).mean()
    torch.testing.assert_close(adv, expected)


def test_rloo_single_sample_group_is_zero():
    adv = normalize_scores(
        torch.tensor([5.0, 1.0, 0.0]),
        torch.tensor([0, 1, 1]),
        NormConfig(std_level="none", leave_one_out=True),
    )
    assert adv.tolist() == [0.0, 1.0, -1.0]


def test_batch_levels_hand_values():
    # batch mean of [1, 0, 0, 3] is 1; unbiased batch std = sqrt((0+1+1+4)/3) = sqrt(2)
    scores = torch.tensor([1.0, 0.0, 0.0, 3.0])
    groups = torch.tensor([0, 0, 1, 1])
    adv = normalize_scores(scores, groups, NormConfig(mean_level="batch", std_level="batch"))
    torch.testing.assert_close(adv, (scores - 1.0) / (math.sqrt(2.0) + EPS))
    # group mean, batch std (std of raw scores over the batch)
    adv = normalize_scores(scores, groups, NormConfig(mean_level="group", std_level="batch"))
    torch.testing.assert_close(adv, torch.tensor([0.5, -0.5, -1.5, 1.5]) / (math.sqrt(2.0) + EPS))
    # no mean, no std: identity
    adv = normalize_scores(scores, groups, NormConfig(mean_level="none", std_level="none"))
    assert adv.tolist() == scores.tolist()


def test_integer_scores_are_promoted():
    adv = normalize_scores(torch.tensor([1, 0]), torch.tensor([0, 0]), NormConfig(std_level="none"))
    assert adv.dtype == torch.float32
    assert adv.tolist() == [0.5, -0.5]


# ------------------------------------------------------------------ invariants
@pytest.mark.parametrize(
    "cfg",
    [NormConfig(), NormConfig(std_level="none"), NormConfig(std_level="none", leave_one_out=True)],
    ids=["grpo", "dr_grpo", "rloo"],
)
def test_group_advantages_sum_to_zero(cfg):
    torch.manual_seed(1)
    groups = [0] * 5 + [1] * 3 + [2] * 8
    adv = normalize_scores(torch.rand(16), torch.tensor(groups), cfg)
    torch.testing.assert_close(group_sums(adv, groups), torch.zeros(3), atol=1e-5, rtol=0)


def test_norm_config_rejects_loo_without_mean():
    with pytest.raises(ValueError):
        NormConfig(mean_level="none", leave_one_out=True)
    with pytest.raises(ValidationError):
        GroupNormParams(mean_level="none", leave_one_out=True)


def test_shape_mismatch_raises():
    with pytest.raises(ValueError):
        normalize_scores(torch.zeros(3), torch.zeros(4, dtype=torch.long), NormConfig())


# ------------------------------------------------------------------ registered estimators
def test_registered_ids_and_params():
    assert {"grpo", "dr_grpo", "rloo", "group_norm"} <= set(ADVANTAGE_ESTIMATORS.ids())
    assert ADVANTAGE_ESTIMATORS.entry("grpo").params is GRPOParams
    assert ADVANTAGE_ESTIMATORS.entry("rloo").params is NoParams
    assert "DeepSeekMath" in ADVANTAGE_ESTIMATORS.entry("grpo").paper
    params = ADVANTAGE_ESTIMATORS.validate_params("grpo", {"eps": 1e-4})
    assert params.eps == 1e-4 and params.unbiased_std is True
    with pytest.raises(ValidationError):
        ADVANTAGE_ESTIMATORS.validate_params("grpo", {"epsilon": 1e-4})
    with pytest.raises(UnknownComponentError, match="known: .*grpo"):
        ADVANTAGE_ESTIMATORS.get("ppo_gae_nonexistent")


def test_estimators_broadcast_over_response_mask():
    batch = make_test_batch([0, 0, 0, 0], [4, 2, 0, 1])
    scores = torch.tensor([1.0, 0.0, 0.0, 1.0])
    a = 0.5 / (math.sqrt(1 / 3) + EPS)
    grpo = ADVANTAGE_ESTIMATORS.get("grpo")(batch, scores, GRPOParams())
    expected = torch.tensor([[a, a, a, a], [-a, -a, 0, 0], [0, 0, 0, 0], [a, 0, 0, 0]])
    torch.testing.assert_close(grpo, expected)
    dr = ADVANTAGE_ESTIMATORS.get("dr_grpo")(batch, scores, NoParams())
    assert dr[:, 0].tolist() == [0.5, -0.5, 0.0, 0.5]
    rloo = ADVANTAGE_ESTIMATORS.get("rloo")(batch, scores, NoParams())
    torch.testing.assert_close(rloo[:, 0], torch.tensor([2 / 3, -2 / 3, 0.0, 2 / 3]))


def test_group_norm_reproduces_the_named_estimators():
    torch.manual_seed(2)
    batch = make_test_batch([0, 0, 0, 1, 1, 1], [4, 3, 2, 1, 4, 4])
    scores = torch.rand(6)
    gn = ADVANTAGE_ESTIMATORS.get("group_norm")
    torch.testing.assert_close(
        gn(batch, scores, GroupNormParams()), ADVANTAGE_ESTIMATORS.get("grpo")(batch, scores, GRPOParams())
    )
    torch.testing.assert_close(
        gn(batch, scores, GroupNormParams(std_level="none")),
        ADVANTAGE_ESTIMATORS.get("dr_grpo")(batch, scores, NoParams()),
    )
    torch.testing.assert_close(
        gn(batch, scores, GroupNormParams(std_level="none", leave_one_out=True)),
        ADVANTAGE_ESTIMATORS.get("rloo")(batch, scores, NoParams()),
    )


def test_estimator_rejects_wrong_score_shape():
    batch = make_test_batch([0, 0], [1, 1])
    with pytest.raises(ValueError):
        ADVANTAGE_ESTIMATORS.get("grpo")(batch, torch.zeros(3), GRPOParams())
