"""The warm-start recipes: each ``examples/<task>_sft.yaml`` renders its demonstrations exactly as its RL config's
rollouts (the same env or task and rewards, rollout and model sections), and the RL config starts from its result."""

from __future__ import annotations

from pathlib import Path

import pytest

from grove.resolve import load_config

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
RECIPES = {
    "frozenlake": "frozenlake_gigpo",
    "sokoban": "sokoban_gigpo",
    "textworld": "textworld_gigpo",
    "kb_routing": "kb_routing_step_grpo",
    "clinical": "clinical_crpo",
}


@pytest.mark.parametrize(("task", "rl"), list(RECIPES.items()))
def test_the_warm_start_renders_what_the_rl_run_samples(task, rl):
    sft, train = load_config(EXAMPLES / f"{task}_sft.yaml"), load_config(EXAMPLES / f"{rl}.yaml")
    assert sft.sft is not None and sft.sft.data == [f"runs/{task}-demos.jsonl"]
    assert sft.env == train.env
    if train.env is None:
        assert sft.task == train.task and sft.rewards == train.rewards
    assert sft.rollout == train.rollout
    assert sft.model.name == train.model.name and sft.model.init_from is None
    assert train.model.init_from == sft.output_dir  # RL starts from the warm start's run directory
    assert sft.train.precision == train.train.precision  # auto: both resolve to the same on one machine
