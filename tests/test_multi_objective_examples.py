"""The two multi-objective examples load, name their objectives, and train through the CLI on a tiny model."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from grove.cli import app
from grove.config.reward_columns import reward_column_names
from grove.models.tiny import create_tiny_model_dir
from grove.resolve import load_config


@pytest.mark.parametrize(
    ("name", "objectives", "combiner"),
    [
        ("clinical_crpo", ("accuracy", "faithfulness", "comprehensiveness", "format"), "normalize_then_sum"),
        ("ifeval_gdpo", ("prompt_pass", "instruction_pass", "keywords"), "normalize_then_sum"),
    ],
)
def test_multi_objective_examples_load(name, objectives, combiner):
    cfg = load_config(f"examples/{name}.yaml")
    assert cfg.algorithm.reward_combination.id == combiner
    assert cfg.algorithm.advantage.id == "score_as_advantage"
    assert reward_column_names(cfg.rewards[0])[: len(objectives)] == objectives


@pytest.mark.parametrize(
    ("name", "task_overrides"),
    [
        ("ifeval_gdpo", ["task.eval_size=4", "task.train_size=8"]),
        # with the other tests that load the ontology: one load per worker
        pytest.param("clinical_crpo", ["task.eval_size=4", "task.train_size=8"], marks=pytest.mark.xdist_group("hpo_ontology")),
    ],
)
def test_multi_objective_examples_train_on_a_tiny_model(name, task_overrides, tmp_path, monkeypatch):
    monkeypatch.setenv("GROVE_CACHE_DIR", str(tmp_path / "cache"))
    model = create_tiny_model_dir(tmp_path / "model", seed=0)
    out = tmp_path / "run"
    overrides = [f"model.name={model}", "model.init_from=null", f"output_dir={out}", "threads=1", "rollout.max_new_tokens=8",
                 "train.steps=1", "train.prompts_per_step=2", "train.completions_per_prompt=2", "train.precision=fp32",
                 "eval.max_examples=4", "logging.progress=false", "logging.plots=false", "logging.tensorboard=false", *task_overrides]
    args = ["train", f"examples/{name}.yaml"]
    for o in overrides:
        args += ["--set", o]
    result = CliRunner().invoke(app, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    evals = [json.loads(line) for line in (out / "eval.jsonl").read_text().splitlines()]
    assert len(evals) == 2
    objectives = [k for k in evals[-1] if k.startswith("objective/") and not k.endswith("/n")]
    assert objectives, evals[-1]
    if name == "ifeval_gdpo":
        assert "ifeval/prompt_level_strict_accuracy" in evals[-1]
        assert "ifeval/instruction_level_strict_accuracy" in evals[-1]
