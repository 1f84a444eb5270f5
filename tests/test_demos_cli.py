"""``grove demos`` from the command line: a demonstration file of training tasks that ``grove sft`` reads, and one
``error:`` line (exit 2) for a mistake."""

from __future__ import annotations

import json
import sys

import pytest
from tests.tiny_runs import TESTS
from typer.testing import CliRunner

from grove.cli import app
from grove.config import dump_config
from grove.envs import build_environment
from grove.models.pretrained import load_policy
from grove.models.tiny import create_tiny_model_dir
from grove.resolve import load_config
from grove.sft.data import load_sft_examples

FROZENLAKE = ("env={id: frozenlake, params: {size: 4, slippery: false, maps: random, num_train_tasks: 8, "
              "num_eval_tasks: 4}, max_turns: 6, prompt: per_step, history: 1, action_parser: {id: first_mention}}")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return create_tiny_model_dir(tmp_path_factory.mktemp("demos") / "tiny", max_position_embeddings=2048)


def _config(path, tiny, *extra):
    path.write_text(dump_config(load_config(None, [f"model.name={tiny}", FROZENLAKE, *extra])))
    return path


def test_demos_writes_training_episodes_that_sft_reads(tiny, tmp_path):
    config, out = _config(tmp_path / "c.yaml", tiny), tmp_path / "demos.jsonl"
    result = CliRunner().invoke(app, ["demos", str(config), "--episodes", "5", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "5 episodes of 'frozenlake': 5 won" in " ".join(result.output.split())
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    suite = build_environment("frozenlake", load_config(config).env.params)
    assert len(rows) == 30 and {r["task_id"] for r in rows} <= set(suite.train_tasks)  # 6 moves per 4x4 map
    _, tokenizer = load_policy(tiny)
    examples = load_sft_examples([out], tokenizer, max_length=2048)
    assert [sum(e.loss_mask) for e in examples] == [sum(r["completion_mask"]) for r in rows]


def test_mistakes_are_one_error_line(tiny, tmp_path):
    config = _config(tmp_path / "c.yaml", tiny)
    result = CliRunner().invoke(app, ["demos", str(config), "--out", str(tmp_path / "d.jsonl"), "--keep", "some"])
    assert result.exit_code == 2 and "--keep 'some'" in result.output
    sys.path.insert(0, str(TESTS))  # a user environment without an oracle
    plain = _config(tmp_path / "p.yaml", tiny, "env={id: 'agent_envs:corridor', max_turns: 3}")
    result = CliRunner().invoke(app, ["demos", str(plain), "--out", str(tmp_path / "p.jsonl")])
    assert result.exit_code == 2 and "error:" in result.output and "oracle_action" in result.output, result.output
    assert "Traceback" not in result.output and not (tmp_path / "p.jsonl").exists()
