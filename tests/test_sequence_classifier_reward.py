"""The ``sequence_classifier`` reward on tiny random ``LlamaForSequenceClassification`` models: the numbers are
transformers' own, heads become objectives, batching and truncation, isolation, config errors, the memory plan and
a tiny training run with a multi-objective reward combiner."""

from __future__ import annotations

import json
import logging
import re
from dataclasses import replace

import pytest
import torch
import yaml
from pydantic import ValidationError
from tests.tiny_reward_models import create_tiny_classifier_dir
from transformers import AutoModelForSequenceClassification, AutoTokenizer
from typer.testing import CliRunner

from grove.cli import app
from grove.config import ConfigError
from grove.config.reward_columns import reward_column_names
from grove.infra.memory_plan import ModelDims, RunShape, estimate_peak_bytes
from grove.models.tiny import create_tiny_model_dir
from grove.resolve import load_config, resolve
from grove.rewards.reward_model_loading import forget_loaded_models
from grove.rewards.scoring import RewardFunctionError, compute_rewards, resolve_reward
from grove.rewards.sequence_classifier import SequenceClassifierParams, loaded_classifier

PROMPTS = [
    "What is 12 + 7?",
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "How many apples are left?"}],
    "Solve for x: 2x + 3 = 11",
    "Say something.",
    "What is 1 + 1?",
]
COMPLETIONS = ["The answer is 19.", "3", "Let me think step by step. First, x = 4. \\boxed{4}", "", "2"]


@pytest.fixture(scope="module")
def rm(tmp_path_factory):
    return create_tiny_classifier_dir(tmp_path_factory.mktemp("rm") / "model")


@pytest.fixture(autouse=True)
def fresh_models():
    forget_loaded_models()
    yield
    forget_loaded_models()


def by_hand(path, texts, add_special_tokens=False) -> torch.Tensor:
    """Each text through transformers directly, one unpadded row at a time: ``[N, labels]``."""
    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    model = AutoModelForSequenceClassification.from_pretrained(path, local_files_only=True).eval()
    rows = []
    with torch.no_grad():
        for text in texts:
            ids = tokenizer(text, add_special_tokens=add_special_tokens, return_tensors="pt")["input_ids"]
            rows.append(model(input_ids=ids).logits[0])
    return torch.stack(rows)


def chat_texts(path):
    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    texts = []
    for p, c in zip(PROMPTS, COMPLETIONS, strict=True):
        messages = [{"role": "user", "content": p}] if isinstance(p, str) else list(p)
        texts.append(tokenizer.apply_chat_template([*messages, {"role": "assistant", "content": c}], tokenize=False))
    return texts


def test_scores_are_transformers_own_numbers_one_objective_per_head(rm):
    spec = resolve_reward("sequence_classifier", {"model": str(rm)})
    assert spec.columns == ("accuracy", "faithfulness", "style")
    matrix = compute_rewards([spec], PROMPTS, COMPLETIONS, {}, step=0)
    expected = by_hand(rm, chat_texts(rm))
    assert matrix.shape == (5, 3)
    torch.testing.assert_close(matrix, expected, atol=1e-5, rtol=1e-5)
    assert expected.std(dim=0).min() > 1e-3  # the samples and the heads score differently


def test_plain_format_is_prompt_separator_completion(rm):
    spec = resolve_reward("sequence_classifier", {"model": str(rm), "format": "plain", "separator": "\n\nAnswer: "})
    texts = ["What is 12 + 7?\n\nAnswer: The answer is 19.", "Solve for x: 2x + 3 = 11\n\nAnswer: 2"]
    values = spec.fn(["What is 12 + 7?", "Solve for x: 2x + 3 = 11"], ["The answer is 19.", "2"])
    expected = by_hand(rm, texts, add_special_tokens=True)
    torch.testing.assert_close(torch.tensor([[v[k] for k in spec.columns] for v in values]), expected, atol=1e-5,
                               rtol=1e-5)


def test_heads_select_rename_and_a_single_head_is_a_plain_reward(rm):
    expected = by_hand(rm, chat_texts(rm))
    subset = resolve_reward("sequence_classifier", {"model": str(rm), "heads": ["style", "accuracy"]})
    assert subset.columns == ("style", "accuracy")
    torch.testing.assert_close(compute_rewards([subset], PROMPTS, COMPLETIONS, {}, step=0), expected[:, [2, 0]],
                               atol=1e-5, rtol=1e-5)
    renamed = resolve_reward("sequence_classifier", {"model": str(rm), "heads": {"faithfulness": "grounded",
                                                                                 "head_2": "tone"}})
    assert renamed.columns == ("grounded", "tone")
    one = resolve_reward("sequence_classifier", {"model": str(rm), "heads": ["faithfulness"]}, name="rm")
    assert one.objectives is None and one.columns == ("rm",)
    torch.testing.assert_close(compute_rewards([one], PROMPTS, COMPLETIONS, {}, step=0)[:, 0], expected[:, 1],
                               atol=1e-5, rtol=1e-5)
    # the config's objectives: key restricts a multi-head reward like any other
    restricted = resolve_reward("sequence_classifier", {"model": str(rm)}, objectives=["style"])
    torch.testing.assert_close(compute_rewards([restricted], PROMPTS, COMPLETIONS, {}, step=0)[:, 0], expected[:, 2],
                               atol=1e-5, rtol=1e-5)


def test_transforms_softmax_over_all_heads_and_sigmoid(rm):
    logits = by_hand(rm, chat_texts(rm))
    p_style = resolve_reward("sequence_classifier", {"model": str(rm), "transform": "softmax", "heads": ["style"]})
    torch.testing.assert_close(torch.tensor(p_style.fn(PROMPTS, COMPLETIONS)), logits.softmax(-1)[:, 2], atol=1e-5,
                               rtol=1e-5)
    sig = resolve_reward("sequence_classifier", {"model": str(rm), "transform": "sigmoid"})
    values = sig.fn(PROMPTS, COMPLETIONS)
    torch.testing.assert_close(torch.tensor([v["accuracy"] for v in values]), logits.sigmoid()[:, 0], atol=1e-5,
                               rtol=1e-5)


def test_default_labels_are_head_i_and_a_one_head_model_is_single_objective(tmp_path):
    three = create_tiny_classifier_dir(tmp_path / "three", num_labels=3)
    assert SequenceClassifierParams(model=str(three)).head_names() == ("head_0", "head_1", "head_2")
    scalar = create_tiny_classifier_dir(tmp_path / "scalar", num_labels=1)
    spec = resolve_reward("sequence_classifier", {"model": str(scalar)})
    assert spec.objectives is None and spec.columns == ("sequence_classifier",)
    values = spec.fn(PROMPTS[:2], COMPLETIONS[:2])
    assert len(values) == 2 and all(isinstance(v, float) for v in values)


def test_a_grove_rm_style_export_loads_with_no_options(tmp_path):
    """A regression model with config.id2label naming its heads (what `grove rm` exports) needs only model:."""
    path = create_tiny_classifier_dir(tmp_path / "model", {0: "accuracy", 1: "faithfulness"},
                                      problem_type="regression")
    assert json.loads((path / "config.json").read_text())["problem_type"] == "regression"
    cfg = load_config(None, [f"rewards=[{{id: sequence_classifier, model: '{path}'}}]"])
    assert reward_column_names(cfg.rewards[0]) == ("accuracy", "faithfulness")
    spec = resolve_reward("sequence_classifier", cfg.rewards[0].params)
    assert compute_rewards([spec], PROMPTS, COMPLETIONS, {}, step=0).shape == (5, 2)


def test_batch_size_does_not_change_the_scores(rm):
    one = resolve_reward("sequence_classifier", {"model": str(rm), "batch_size": 1})
    four = resolve_reward("sequence_classifier", {"model": str(rm), "batch_size": 4})
    a = compute_rewards([one], PROMPTS, COMPLETIONS, {}, step=0)
    b = compute_rewards([four], PROMPTS, COMPLETIONS, {}, step=0)
    torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    state = loaded_classifier(four.fn.params)
    assert state is loaded_classifier(one.fn.params)  # one model per process, whatever the batch size
    assert state.forwards == 5 + 2  # five batches of one, then two of up to four


def test_truncation_is_counted_logged_once_and_keeps_the_end(rm, caplog):
    spec = resolve_reward("sequence_classifier", {"model": str(rm), "max_length": 24})
    tokenizer = AutoTokenizer.from_pretrained(rm, local_files_only=True)
    lengths = [len(tokenizer(t, add_special_tokens=False)["input_ids"]) for t in chat_texts(rm)]
    long = sum(n > 24 for n in lengths)
    assert 0 < long < len(lengths)
    with caplog.at_level(logging.INFO, logger="grove.rewards"):
        values = compute_rewards([spec], PROMPTS, COMPLETIONS, {}, step=0)
        compute_rewards([spec], PROMPTS, COMPLETIONS, {}, step=1)
    count = loaded_classifier(spec.fn.params).truncations[(24, "left")]
    assert (count.truncated, count.seen) == (2 * long, 2 * len(lengths))
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and f"{long} of 5 inputs are longer than max_length=24" in warnings[0].getMessage()
    assert any(f"({2 * long} of 10 so far)" in r.getMessage() for r in caplog.records if r.levelno == logging.INFO)
    # the kept tokens are the last 24: the model's numbers on them
    tokenizer_ids = [tokenizer(t, add_special_tokens=False)["input_ids"][-24:] for t in chat_texts(rm)]
    model = AutoModelForSequenceClassification.from_pretrained(rm, local_files_only=True).eval()
    with torch.no_grad():
        expected = torch.stack([model(input_ids=torch.tensor([ids])).logits[0] for ids in tokenizer_ids])
    torch.testing.assert_close(values, expected, atol=1e-5, rtol=1e-5)


def test_process_isolation_with_a_timeout_gives_the_same_scores(rm):
    inline = resolve_reward("sequence_classifier", {"model": str(rm)})
    isolated = resolve_reward("sequence_classifier", {"model": str(rm)}, isolation="process", timeout_s=300)
    try:
        stats: dict[str, float] = {}
        first = compute_rewards([isolated], PROMPTS, COMPLETIONS, {}, step=0, stats=stats)
        again = compute_rewards([isolated], PROMPTS[:2], COMPLETIONS[:2], {}, step=1, stats=stats)
        torch.testing.assert_close(first, compute_rewards([inline], PROMPTS, COMPLETIONS, {}, step=0), atol=1e-5,
                                   rtol=1e-5)
        torch.testing.assert_close(again, first[:2], atol=1e-5, rtol=1e-5)
        assert isolated.worker.starts == 1 and stats["reward_errors/sequence_classifier"] == 0
    finally:
        isolated.worker.close()


def test_config_errors_name_the_model_key(rm, tmp_path):
    lm = create_tiny_model_dir(tmp_path / "lm")
    cases = {
        str(tmp_path / "missing"): "does not exist",
        str(lm): "is a LlamaForCausalLM, not a sequence classifier",
        str(tmp_path): "not a transformers model directory (no config.json",
    }
    for model, reason in cases.items():
        with pytest.raises(ConfigError, match=rf"rewards\.0\.model: .*{re.escape(reason)}") as info:
            load_config(None, [f"rewards=[{{id: sequence_classifier, model: '{model}'}}]"])
        assert "sequence_classifier" in str(info.value)
    with pytest.raises(ConfigError, match=r"heads: \['tone'\] are not heads of the model; its heads: accuracy"):
        load_config(None, [f"rewards=[{{id: sequence_classifier, model: '{rm}', heads: [tone]}}]"])
    with pytest.raises(ValidationError, match="transform"):
        SequenceClassifierParams(model=str(rm), transform="tanh")


def test_a_model_without_a_trained_head_fails_at_its_first_call_naming_reward_and_sample(tmp_path):
    lm = create_tiny_model_dir(tmp_path / "lm")
    config = json.loads((lm / "config.json").read_text())
    del config["architectures"]  # nothing to tell at config time: the load finds no score head
    (lm / "config.json").write_text(json.dumps(config))
    spec = resolve_reward("sequence_classifier", {"model": str(lm)})
    with pytest.raises(RewardFunctionError, match=r"reward 'sequence_classifier' at step 3 raised on sample 0: "
                       r"ValueError: .*has no trained classification head \(weights missing: score.weight"):
        compute_rewards([spec], PROMPTS[:2], COMPLETIONS[:2], {}, step=3)
    zero = resolve_reward("sequence_classifier", {"model": str(lm)}, on_error="zero")
    stats: dict[str, float] = {}
    assert compute_rewards([zero], PROMPTS[:2], COMPLETIONS[:2], {}, step=3, stats=stats).tolist() == [[0.0, 0.0]] * 2  # head_0, head_1
    assert stats["reward_errors/sequence_classifier"] == 2


def test_memory_plan_counts_the_reward_model_weights(rm, tmp_path):
    params = sum(p.numel() for p in AutoModelForSequenceClassification.from_pretrained(rm).parameters())
    assert SequenceClassifierParams(model=str(rm)).model_bytes() == 4 * params
    assert SequenceClassifierParams(model=str(rm), precision="bf16").model_bytes() == 2 * params
    policy = create_tiny_model_dir(tmp_path / "policy")
    sets = [f"model.name={policy}", f"rewards=[{{id: sequence_classifier, model: '{rm}'}}, {{id: answer_format}}]"]
    assert resolve(load_config(None, sets), preflight_checks=False).reward_model_bytes == 4 * params
    args = ["config", "show", "examples/arithmetic.yaml"]
    for s in sets:
        args += ["--set", s]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "reward models (weights)" in result.output
    plain = CliRunner().invoke(app, ["config", "show", "examples/arithmetic.yaml", "--set", sets[0]])
    assert plain.exit_code == 0 and "reward models" not in plain.output
    m = ModelDims(num_params=1000, hidden=4, intermediate=8, layers=2, kv_dim=2, vocab=10)
    shape = RunShape(prompt_tokens=5, max_new_tokens=3, prompts_per_step=2, group_size=4,
                     micro_batch_size=4, shared_prefix=True, reference_model=False)
    without, with_rm = estimate_peak_bytes(m, shape), estimate_peak_bytes(m, replace(shape, reward_model_bytes=123.0))
    assert with_rm["reward models (weights)"] == 123 and with_rm["total"] == without["total"] + 123
    assert "reward models (weights)" not in without


def tiny_run_config(path, policy, out, rewards, **extra) -> str:
    """A YAML config of a 2-step arithmetic run of the tiny ``policy`` with ``rewards``, written to ``path``."""
    config = {
        "model": {"name": str(policy)}, "output_dir": str(out), "threads": 1,
        "task": {"id": "arithmetic", "train_size": 8, "eval_size": 2}, "rewards": rewards,
        "rollout": {"max_new_tokens": 6},
        "train": {"steps": 2, "prompts_per_step": 2, "completions_per_prompt": 3, "micro_batch_size": 3},
        "eval": {"before_training": False, "max_examples": 2},
        "logging": {"progress": False, "tensorboard": False}, **extra,
    }
    path.write_text(yaml.safe_dump(config))
    return str(path)


def test_train_with_a_three_head_reward_model_and_gdpo(rm, tmp_path):
    policy = create_tiny_model_dir(tmp_path / "policy")
    out = tmp_path / "run"
    config = tiny_run_config(
        tmp_path / "run.yaml", policy, out, [{"id": "sequence_classifier", "model": str(rm), "batch_size": 4}],
        algorithm={"preset": "gdpo"}, eval={"before_training": False, "max_examples": 2, "accuracy_reward": "accuracy"},
    )
    result = CliRunner().invoke(app, ["train", config], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert len(metrics) == 2
    for name in ("accuracy", "faithfulness", "style"):  # one column per head, each normalised by GDPO
        assert f"reward/{name}_mean" in metrics[-1] and f"objective/{name}/advantage_share" in metrics[-1]
    assert all(torch.isfinite(torch.tensor(m["loss"])) for m in metrics)
    final = json.loads((out / "eval.jsonl").read_text().splitlines()[-1])
    assert {"objective/accuracy", "objective/faithfulness", "objective/style"} <= set(final)


def test_device_auto_is_the_cpu_without_cuda_and_cuda_without_it_is_an_error(monkeypatch):
    from grove.rewards.reward_model_loading import resolve_device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device("auto") == torch.device("cpu") == resolve_device("cpu")
    with pytest.raises(ValueError, match="device: cuda, but CUDA is not available"):
        resolve_device("cuda")
