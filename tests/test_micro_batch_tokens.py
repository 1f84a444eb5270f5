"""A token budget per micro-batch (``train.micro_batch_tokens``): a micro-batch of ``train.micro_batch_size`` samples
that holds more tokens is split, with the same gradients; ``auto`` derives the budget from the memory available when
the update starts, so a step of long agent conversations is cut into smaller micro-batches instead of being
OOM-killed."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

import grove.training.micro_batch_budget as budget_module
from grove.models.tiny import create_tiny_model_dir
from grove.pipeline.micro_batches import within_budget
from grove.resolve import load_config
from grove.training.micro_batch_budget import AUTO_SHARE, MicroBatchBudget
from grove.training.trainer import Trainer

TESTS = Path(__file__).resolve().parent


def test_within_budget_cuts_where_the_running_count_would_pass_the_budget() -> None:
    order = torch.tensor([4, 0, 1, 2, 3, 5])
    tokens = torch.tensor([5, 5, 5, 5, 20, 3])  # by sample index
    cut = lambda size, budget: [m.tolist() for m in within_budget(order, tokens, size, budget)]  # noqa: E731
    assert cut(4, None) == [[4, 0, 1, 2], [3, 5]]
    assert cut(4, 12) == [[4], [0, 1], [2, 3], [5]]  # 20 > 12 alone; 5 + 5 fits, + 5 does not
    assert cut(2, 100) == [[4, 0], [1, 2], [3, 5]]  # the sample count still bounds
    assert cut(6, 1) == [[4], [0], [1], [2], [3], [5]]


def test_auto_is_a_share_of_the_available_memory_over_one_token_s_activations(monkeypatch, tmp_path) -> None:
    """The tiny model (2 layers, hidden 64, 2 key/value heads of 16, intermediate 128): per token and layer
    8·64 + 2·32 + 4·128 = 1088 values, 2 layers, 4 bytes in fp32 (2 in bf16); activation checkpointing keeps one
    hidden vector per layer plus one layer's set."""
    from grove.models.pretrained import load_policy

    model, _ = load_policy(create_tiny_model_dir(tmp_path / "tiny"))
    monkeypatch.setattr(budget_module, "available_memory", lambda device: 1e6)
    assert MicroBatchBudget("auto", model, "fp32", False, torch.device("cpu")).tokens() == int(AUTO_SHARE * 1e6 / (2 * 1088 * 4))
    assert MicroBatchBudget("auto", model, "bf16", False, torch.device("cpu")).tokens() == int(AUTO_SHARE * 1e6 / (2 * 1088 * 2))
    assert MicroBatchBudget("auto", model, "fp32", True, torch.device("cpu")).tokens() == int(
        AUTO_SHARE * 1e6 / ((2 * 64 + 1088) * 4))
    assert MicroBatchBudget(300, model, "fp32", False, torch.device("cpu")).tokens() == 300
    assert MicroBatchBudget(None, model, "fp32", False, torch.device("cpu")).tokens() is None


def _agent_run(tiny: Path, out: Path, **extra) -> list[dict]:
    sys.path.insert(0, str(TESTS))
    from test_experience_environments import ENV_BASE

    values = {**ENV_BASE, "model.name": tiny, "output_dir": out, "env.prompt": "conversation", "train.steps": 2,
              "train.micro_batch_size": 6, "train.precision": "fp32", "rollout.prepacked_weights": False,
              "eval.before_training": False, "checkpoint.every": 2, **extra}
    Trainer(load_config(None, [f"{k}={v}" for k, v in values.items()]), out).run()
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if '"loss"' in line]


def test_a_budget_splits_an_agent_step_with_the_same_gradients(tmp_path, monkeypatch, caplog) -> None:
    """Conversations of a corridor environment: with no budget each step's 6 episodes are one micro-batch; with the
    memory available made small, ``auto`` cuts them into several (said once), and the run trains the same: the same
    episodes, losses and weights up to float rounding."""
    tiny = create_tiny_model_dir(tmp_path / "tiny")
    whole = _agent_run(tiny, tmp_path / "whole", **{"train.micro_batch_tokens": "null"})
    monkeypatch.setattr(budget_module, "available_memory", lambda device: 2 * 1088 * 4 * 150 / AUTO_SHARE)
    with caplog.at_level(logging.WARNING, logger="grove.training.micro_batch_budget"):
        split = _agent_run(tiny, tmp_path / "split")
    assert "more than the 150 a micro-batch may hold (train.micro_batch_tokens: auto, from the memory" in caplog.text
    for a, b in zip(whole, split, strict=True):
        assert a["generated_tokens"] == b["generated_tokens"] and a["reward_mean"] == b["reward_mean"]
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-4, abs=1e-6)
        assert a["grad_norm"] == pytest.approx(b["grad_norm"], rel=1e-4, abs=1e-6)
    weights = [load_file(next((tmp_path / name / "checkpoints").glob("*/model/model.safetensors")))
               for name in ("whole", "split")]
    for name, value in weights[0].items():
        torch.testing.assert_close(value, weights[1][name], atol=1e-5, rtol=1e-4)


def test_config_show_plans_an_agent_run_at_its_context_limit(tmp_path) -> None:
    """``grove config show`` on an environment config: the memory plan takes every context at its limit (the model's
    512 positions less rollout.max_new_tokens) and says what the token budget does."""
    from typer.testing import CliRunner

    from grove.cli import app

    sys.path.insert(0, str(TESTS))
    from test_experience_environments import env_args

    tiny = create_tiny_model_dir(tmp_path / "tiny")
    result = CliRunner().invoke(app, ["config", "show", *env_args(tiny, tmp_path / "run")])
    text = " ".join(result.output.split())
    assert result.exit_code == 0, result.output
    assert "estimated peak memory (agent contexts at their limit of 507 tokens, the worst case)" in text, text
    assert "train.micro_batch_tokens: auto: a micro-batch's activations are kept under about" in text
