"""``length_limit`` and the ``completion_ids`` column every reward receives."""

from __future__ import annotations

import json

import pytest
import torch

from grove.registry import REWARD_FUNCTIONS
from grove.rewards.builtin import LengthLimitParams, length_limit
from grove.rollout.engine import RolloutOutput


def test_completion_ids_are_the_unpadded_responses():
    out = RolloutOutput(
        prompt_ids=torch.zeros(2, 1, dtype=torch.long), prompt_mask=torch.ones(2, 1, dtype=torch.long),
        response_ids=torch.tensor([[5, 6, 2], [7, 0, 0]]), response_mask=torch.tensor([[1, 1, 1], [1, 0, 0]]),
        logprobs=torch.zeros(2, 3), finish_reasons=["eos", "eos"], texts=["a", "b"],
        prompt_index=torch.tensor([0, 1]), num_generated_tokens=4, seconds=0.0,
    )
    assert out.completion_ids == [[5, 6, 2], [7]]


def test_length_limit_counts_tokens_and_says_what_it_needs():
    params = LengthLimitParams(max_tokens=2)
    assert length_limit([], ["x", "y", "z"], params=params, completion_ids=[[1], [1, 2], [1, 2, 3]]) == [1.0, 1.0, 0.0]
    with pytest.raises(ValueError, match="needs the completion_ids column"):
        length_limit([], ["x"], params=params)
    assert REWARD_FUNCTIONS.entry("length_limit").params is LengthLimitParams


def test_a_run_scores_the_limit_on_the_policys_tokens(tmp_path):
    from grove.models.tiny import create_tiny_model_dir
    from test_train_e2e import base_overrides, run_cli

    out = tmp_path / "run"
    args = base_overrides(create_tiny_model_dir(tmp_path / "tiny"), out, **{
        "train.steps": 1, "rollout.max_new_tokens": 6,
        "rewards": "[{id: answer_match, extract: last_number}, {id: length_limit, max_tokens: 3}]",
        "algorithm.reward_combination": "{id: normalize_then_sum}", "algorithm.advantage": "{id: score_as_advantage}",
    })
    result = run_cli(["train", "examples/arithmetic.yaml", *args])
    assert result.exit_code == 0, result.output
    metrics = json.loads((out / "metrics.jsonl").read_text().splitlines()[0])
    assert 0.0 <= metrics["reward/length_limit_mean"] <= 1.0
    assert metrics["resolution/reward_combinations"] >= metrics["resolution/advantage_values"] >= 1.0
