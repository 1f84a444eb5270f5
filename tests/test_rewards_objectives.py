"""Multi-objective rewards: one call fills several named columns, with per-objective weights."""

from __future__ import annotations

import math

import pytest
import torch

import grove.builtin_components  # noqa: F401
from grove.config import GroveConfig
from grove.resolve import check_config, load_config
from grove.rewards.scoring import (
    RewardFunctionError,
    RewardLoadError,
    compute_rewards,
    resolve_reward,
    reward_columns,
)


def test_dict_rows_fill_declared_objectives_and_none_is_nan():
    spec = resolve_reward("user_rewards:two_checks", weight=2.0, objective_weights={"short": 0.25})
    assert spec.columns == ("has_seven", "short") and spec.column_weights == (2.0, 0.5)
    acc = resolve_reward("answer_match", {"extract": "last_number"}, 1.0, "acc")
    values = compute_rewards([acc, spec], ["q", "q", "q"], ["7", "", "x77"], {"answer": ["7", "7", "7"]}, step=0)
    assert values[:, 0].tolist() == [1.0, 0.0, 0.0]
    assert values[:, 1].tolist() == [1.0, 0.0, 1.0]
    assert values[0, 2] == 1.0 and math.isnan(values[1, 2]) and values[2, 2] == 0.0
    assert reward_columns([acc, spec]) == (("acc", "has_seven", "short"), (1.0, 2.0, 0.5))


def test_array_rows_need_declared_names():
    spec = resolve_reward("user_rewards:rows_of_three", objectives=["one", "length", "never"])
    values = compute_rewards([spec], ["q", "q"], ["ab", "c"], {}, step=0)
    assert values[:, :2].tolist() == [[1.0, 2.0], [1.0, 1.0]] and torch.isnan(values[:, 2]).all()
    undeclared = resolve_reward("user_rewards:rows_of_three")
    with pytest.raises(RewardFunctionError, match="sample 0"):
        compute_rewards([undeclared], ["q"], ["ab"], {}, step=3)


def test_bad_multi_objective_values_name_the_sample_and_the_objective():
    with pytest.raises(RewardFunctionError, match=r"sample 0: unknown objective\(s\) \['surprise'\]"):
        compute_rewards([resolve_reward("user_rewards:unknown_key")], ["q"], ["7"], {}, step=1)
    wrong_width = resolve_reward("user_rewards:rows_of_three", objectives=["a", "b"])
    with pytest.raises(RewardFunctionError, match="row of 2 values"):
        compute_rewards([wrong_width], ["q"], ["7"], {}, step=1)


def test_objective_declaration_errors():
    with pytest.raises(RewardLoadError, match="objective_weights names \\['nope'\\]"):
        resolve_reward("user_rewards:two_checks", objective_weights={"nope": 1.0})
    with pytest.raises(RewardLoadError, match="declares no objectives"):
        resolve_reward("user_rewards:char_count", objective_weights={"x": 1.0})
    with pytest.raises(RewardLoadError, match="not produced by it"):
        resolve_reward("user_rewards:two_checks", objectives=["has_seven", "other"])
    a = resolve_reward("user_rewards:two_checks")
    b = resolve_reward("user_rewards:two_checks", name="again")
    with pytest.raises(RewardLoadError, match="'has_seven' appears twice"):
        reward_columns([a, b])


def _cfg(**algorithm):
    return {"rewards": [{"id": "user_rewards:two_checks"}], "algorithm": algorithm}


def _checked(data: dict) -> GroveConfig:
    """A config built in code, checked for a run as a loaded one is."""
    return check_config(GroveConfig.model_validate(data))


def test_config_refuses_a_second_normalisation_after_gdpo():
    with pytest.raises(ValueError, match="score_as_advantage"):
        _checked(_cfg(reward_combination={"id": "normalize_then_sum"}))
    ok = _checked(_cfg(reward_combination={"id": "normalize_then_sum"}, advantage={"id": "score_as_advantage"}))
    assert ok.algorithm.reward_combination.id == "normalize_then_sum"
    _checked(_cfg(reward_combination={"id": "normalize_then_sum", "renormalize": "none"}))
    with pytest.raises(ValueError, match="unknown reward combiner 'gdpo'"):
        _checked(_cfg(reward_combination={"id": "gdpo"}))
    with pytest.raises(ValueError, match="remax"):
        _checked(_cfg(reward_combination={"id": "variance_weighted"}, advantage={"id": "remax"}))


def test_presets_expand_to_valid_multi_objective_configs():
    for preset in ("gdpo", "gdpo_verl", "mo_grpo", "crpo"):
        cfg = load_config(None, ["rewards=[{id: 'user_rewards:two_checks'}]", f"algorithm.preset={preset}"])
        assert cfg.algorithm.reward_combination.id in ("normalize_then_sum", "variance_weighted"), preset


def test_accuracy_defaults_to_the_first_objective_and_may_name_an_objective():
    cfg = _checked(_cfg())
    assert cfg.accuracy_reward_name == "has_seven"
    cfg = _checked({**_cfg(), "eval": {"accuracy_reward": "short"}})
    assert cfg.accuracy_reward_name == "short"
    with pytest.raises(ValueError, match="not a reward or objective name"):
        _checked({**_cfg(), "eval": {"accuracy_reward": "two_checks"}})


def test_a_config_may_select_a_subset_of_a_rewards_objectives():
    spec = resolve_reward("user_rewards:two_checks", objectives=["short"])
    assert spec.columns == ("short",)
    values = compute_rewards([spec], ["q", "q"], ["7", "long text"], {}, step=0)
    assert values[:, 0].tolist() == [1.0, 0.0]
