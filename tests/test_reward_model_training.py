"""``grove rm``: reward models (Bradley–Terry and multi-head regression) on the trainer's loop, on a tiny model.

Checked: both losses against hand-computed values on fixed scores (and their split over micro-batches); the held-out
statistics against hand computations; a run of each objective learns an easy synthetic preference (completions
ending in a marker are better) on held-out prompts; a killed run resumes to the same weights and logs; LoRA exports
a merged model; the exported RUN_DIR/model is a plain sequence classifier whose id2label are the heads and whose
scores are the trained model's; two gloo ranks equal one process; bad data is one ``error:`` line naming the file,
the line and the field; grove view, the plots and grove config show handle a reward-model run.
"""

from __future__ import annotations

import json
import math
import random
import runpy
import sys
from pathlib import Path

import pytest
import torch
from tests.tiny_runs import copy_run, records, same_weights, weights
from transformers import AutoModelForSequenceClassification, AutoTokenizer
from typer.testing import CliRunner

from forked_processes import run_grove_ranks
from grove.cli import app
from grove.config import dump_config
from grove.models.tiny import create_tiny_model_dir
from grove.resolve import load_config
from grove.rewards.reward_model_loading import reward_model_text
from grove.rm.agreement import pairwise_preference_report, pearson_interval, ranking_agreement
from grove.rm.objectives import bradley_terry_loss, regression_loss
from grove.training.trainer import Trainer

WORDS = ["apple", "answer", "think", "fox", "dog", "numbers", "step", "quick", "lazy", "first"]


def _write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _pairs(n: int, seed: int = 0) -> list[dict]:
    """Preference pairs whose chosen completion ends with the marker "42" and whose rejected one with "fox"."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        body = " ".join(rng.choice(WORDS) for _ in range(3))
        rows.append({"prompt": f"question {i}: {rng.choice(WORDS)}", "chosen": f"{body} 42", "rejected": f"{body} fox"})
    return rows


def _labelled(n: int, seed: int = 0) -> list[dict]:
    """Two completions per prompt; head "good" is 1 for the marker ending, head "long" grows with the length
    (missing on every third row)."""
    rng = random.Random(seed)
    rows = []
    for i in range(n // 2):
        prompt = f"question {i}: {rng.choice(WORDS)}"
        for good in (True, False):
            words = [rng.choice(WORDS) for _ in range(rng.randint(1, 5))]
            labels = {"good": float(good), "long": float(len(words))}
            if len(rows) % 3 == 2:
                labels["long"] = None
            rows.append({"prompt": prompt, "completion": " ".join(words) + (" 42" if good else " fox"),
                         "labels": labels})
    return rows


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("rm")
    tiny = create_tiny_model_dir(root / "tiny")
    pairs = _write(root / "pairs.jsonl", _pairs(64))
    labelled = _write(root / "labelled.jsonl", _labelled(64))
    return root, tiny, pairs, labelled


def _settings(tiny: Path, data: Path, out: Path, steps: int = 4, **extra) -> list[str]:
    values = {
        "model.name": tiny, "output_dir": out, "threads": 1, "rm.data": f"[{data}]", "rm.eval_fraction": 0.25,
        "rm.steps": steps, "rm.batch_size": 8, "train.micro_batch_size": 3, "optim.lr": 3e-3, "checkpoint.every": 1,
        "checkpoint.keep_last": 10, "logging.progress": False, "logging.plots": False, "logging.tensorboard": False, **extra,
    }
    return [f"{k}={v}" for k, v in values.items()]


def _cfg(*args, **kwargs):
    return load_config(None, _settings(*args, **kwargs))


# ------------------------------------------------------------------ losses and statistics on fixed numbers
def test_the_bradley_terry_loss_is_minus_log_sigmoid_of_the_margin():
    chosen, rejected, margin = torch.tensor([1.0, 0.0]), torch.tensor([0.0, 2.0]), torch.tensor([0.0, 0.5])
    by_hand = (math.log1p(math.exp(-1.0)) + math.log1p(math.exp(2.5))) / 2
    assert float(bradley_terry_loss(chosen, rejected, margin)) == pytest.approx(by_hand, rel=1e-6)
    centred = by_hand + 0.1 * ((1.0 + 0.0) ** 2 + (0.0 + 2.0) ** 2) / 2
    assert float(bradley_terry_loss(chosen, rejected, margin, 0.1)) == pytest.approx(centred, rel=1e-6)
    halves = sum(bradley_terry_loss(chosen[i : i + 1], rejected[i : i + 1], margin[i : i + 1], 0.1, pairs=2.0)
                 for i in range(2))
    assert float(halves) == pytest.approx(centred, rel=1e-6)  # micro-batches add up to the step's mean


def test_the_regression_loss_averages_each_heads_mse_over_its_labels():
    scores = torch.tensor([[1.0, 2.0], [3.0, 4.0], [0.0, 1.0]])
    targets = torch.tensor([[0.0, math.nan], [1.0, 2.0], [0.0, math.nan]])
    head0 = ((1 - 0) ** 2 + (3 - 1) ** 2 + 0) / 3
    head1 = (4 - 2) ** 2 / 1
    assert float(regression_loss(scores, targets)) == pytest.approx((head0 + head1) / 2)
    counts = torch.tensor([3.0, 1.0])
    parts = regression_loss(scores[:1], targets[:1], counts) + regression_loss(scores[1:], targets[1:], counts)
    assert float(parts) == pytest.approx((head0 + head1) / 2)
    only_first = torch.tensor([[0.0, math.nan]])
    assert float(regression_loss(scores[:1], only_first)) == pytest.approx(1.0)  # a head without labels drops out


def test_the_held_out_statistics_match_hand_computations():
    report = pairwise_preference_report(torch.tensor([2.0, 1.0, 0.0, 3.0]), torch.tensor([1.0, 0.0, 1.0, 3.0]))
    assert report["pairwise_accuracy"] == 0.5 and report["pairs"] == 4  # a tie is not a win
    assert report["margin_mean"] == pytest.approx((1 + 1 - 1 + 0) / 4)
    p, n, z = 0.5, 4, 1.959963984540054
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    assert report["pairwise_ci_low"] == pytest.approx(centre - half) and report["pairwise_ci_high"] == pytest.approx(centre + half)
    x = torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    y = torch.tensor([1.0, 3.0, 2.0, 5.0, 4.0, 6.0])
    r, low, high = pearson_interval(x, y)
    expected = float(torch.corrcoef(torch.stack([x, y]))[0, 1])
    assert r == pytest.approx(expected)
    assert (low, high) == pytest.approx((math.tanh(math.atanh(r) - z / math.sqrt(3)), math.tanh(math.atanh(r) + z / math.sqrt(3))))
    # within prompts: 2 groups of 3 rows; the scores order group 0 right (3 pairs) and group 1 wrong on 1 of 3 pairs
    scores = torch.tensor([1.0, 2.0, 3.0, 1.0, 3.0, 2.0])
    labels = torch.tensor([0.0, 1.0, 2.0, 0.0, 1.0, 2.0])
    accuracy, low, high, pairs = ranking_agreement(scores, labels, torch.tensor([0, 0, 0, 1, 1, 1]), 500, 0)
    assert pairs == 6 and accuracy == pytest.approx(5 / 6) and low <= accuracy <= high


# ------------------------------------------------------------------ runs
def _scores(model_dir: Path, rows: list[dict], key: str) -> torch.Tensor:
    """Scores of the exported model for each row's ``key`` completion, as a reward would compute them."""
    model = AutoModelForSequenceClassification.from_pretrained(model_dir).eval()
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    out = []
    with torch.no_grad():
        for row in rows:
            ids = tokenizer(reward_model_text(tokenizer, row["prompt"], row[key]), add_special_tokens=False,
                            return_tensors="pt")["input_ids"]
            out.append(model(input_ids=ids).logits[0])
    return torch.stack(out)


def test_a_bradley_terry_model_learns_the_preference_and_exports_a_classifier(setup, tmp_path):
    root, tiny, pairs, _ = setup
    out = tmp_path / "bt"
    trainer = Trainer(_cfg(tiny, pairs, out, 16, **{"rm.eval_every": 8}), out, kind="rm")
    trainer.run()
    evals = records(out / "eval.jsonl")
    assert [e["step"] for e in evals] == [0, 8, 16]
    assert evals[-1]["held_out_loss"] < evals[0]["held_out_loss"]
    assert evals[-1]["pairwise_accuracy"] > max(evals[0]["pairwise_accuracy"], 0.85)
    assert evals[-1]["pairwise_ci_low"] <= evals[-1]["pairwise_accuracy"] <= evals[-1]["pairwise_ci_high"]
    metrics = records(out / "metrics.jsonl")
    assert len(metrics) == 16 and all(k in metrics[0] for k in ("loss", "grad_norm", "train_pairwise_accuracy"))
    summary = json.loads((out / "summary.json").read_text())
    assert summary["objective"] == "bradley_terry" and summary["heads"] == ["reward"]
    assert summary["after"]["pairwise_accuracy"] == evals[-1]["pairwise_accuracy"]
    model = out / "model"
    config = json.loads((model / "config.json").read_text())
    assert config["id2label"] == {"0": "reward"} and config["problem_type"] == "regression"
    assert config["architectures"] == ["LlamaForSequenceClassification"]
    # the exported model scores held-out texts as the trained model does (its evaluation's numbers)
    held = [{"prompt": "question 999: fox", "chosen": "dog apple 42", "rejected": "dog apple fox"}]
    exported = _scores(model, held, "chosen")
    tokenizer = trainer.tokenizer
    ids = tokenizer(reward_model_text(tokenizer, held[0]["prompt"], held[0]["chosen"]), add_special_tokens=False,
                    return_tensors="pt")["input_ids"]
    with torch.no_grad():
        live = trainer.model(ids, torch.ones_like(ids))
    torch.testing.assert_close(exported, live, rtol=1e-4, atol=1e-5)
    assert float(exported[0, 0]) > float(_scores(model, held, "rejected")[0, 0])


def test_a_regression_model_learns_its_heads_in_the_configured_order(setup, tmp_path):
    root, tiny, _, labelled = setup
    out = tmp_path / "regression"
    cfg = _cfg(tiny, labelled, out, 16, **{"rm.objective": "regression", "rm.heads": "[long, good]",
                                           "optim.lr": 5e-3, "checkpoint.every": 8})
    Trainer(cfg, out, kind="rm").run()
    evals = records(out / "eval.jsonl")
    first, last = evals[0], evals[-1]
    assert last["held_out_loss"] < first["held_out_loss"]
    assert last["pearson_r/good"] > 0.5 and last["pairwise_accuracy/good"] >= 0.8
    for head in ("good", "long"):
        assert last[f"pearson_ci_low/{head}"] <= last[f"pearson_r/{head}"] <= last[f"pearson_ci_high/{head}"]
        assert f"mse/{head}" in last and last[f"labelled/{head}"] > 0
    assert last["labelled/long"] < last["labelled/good"]  # missing labels are left out
    config = json.loads((out / "model" / "config.json").read_text())
    assert config["id2label"] == {"0": "long", "1": "good"} and config["problem_type"] == "regression"
    info = config["grove_reward_model"]
    assert info["heads"] == ["long", "good"] and info["standardized"] and len(info["label_mean"]) == 2
    model = AutoModelForSequenceClassification.from_pretrained(out / "model")
    assert model.config.id2label == {0: "long", 1: "good"} and model.config.num_labels == 2


def test_a_killed_run_resumes_to_the_same_weights_and_logs(setup, tmp_path):
    root, tiny, pairs, _ = setup
    whole = tmp_path / "whole"
    Trainer(_cfg(tiny, pairs, whole, 8, **{"rm.eval_every": 3}), whole, kind="rm").run()  # 8 of 8 cross an epoch of 48
    killed = copy_run(whole, tmp_path / "killed", 3)
    resumed = Trainer(_cfg(tiny, pairs, killed, 8, **{"rm.eval_every": 3}), killed, resume=True, kind="rm")
    assert resumed.step == 3
    resumed.run()
    for step in (4, 6, 8):
        assert same_weights(weights(killed, step), weights(whole, step))
    assert records(killed / "metrics.jsonl") == records(whole / "metrics.jsonl")
    assert [e["step"] for e in records(killed / "eval.jsonl")] == [e["step"] for e in records(whole / "eval.jsonl")]


def test_lora_trains_adapters_and_the_head_and_exports_a_merged_classifier(setup, tmp_path):
    root, tiny, pairs, _ = setup
    out = tmp_path / "lora"
    lora = "{r: 4, alpha: 8, target_modules: [q_proj, v_proj]}"
    trainer = Trainer(_cfg(tiny, pairs, out, 4, **{"model.lora": lora, "optim.lr": 1e-2}), out, kind="rm")
    trainer.run()
    adapter_dir = out / "checkpoints" / "step-000004" / "model"
    assert json.loads((adapter_dir / "adapter_config.json").read_text())["task_type"] == "SEQ_CLS"
    exported = AutoModelForSequenceClassification.from_pretrained(out / "model")
    assert not any("lora_" in k for k in exported.state_dict())
    ids = torch.tensor([[1, 5, 6, 7, 2]])
    with torch.no_grad():
        live = trainer.model(ids, torch.ones_like(ids))
        merged = exported(input_ids=ids).logits
    torch.testing.assert_close(merged, live, rtol=1e-4, atol=1e-5)
    assert exported.config.id2label == {0: "reward"}


def test_two_ranks_equal_one_process(setup, tmp_path):
    root, tiny, _, labelled = setup
    runs = {}
    for processes in (1, 2):
        out = tmp_path / f"ranks-{processes}"
        config = tmp_path / f"rm-{processes}.yaml"
        extra = {"distributed.strategy": "ddp", "distributed.timeout_seconds": 120, "optim.eps": 1e-3,
                 "rm.objective": "regression"}
        config.write_text(dump_config(_cfg(tiny, labelled, out, 2, **extra)))
        run_grove_ranks(processes, ["rm", str(config)], logs=tmp_path / f"logs-{processes}")
        runs[processes] = out
    one, two = records(runs[1] / "metrics.jsonl"), records(runs[2] / "metrics.jsonl")
    for a, b in zip(one, two, strict=True):
        for key in ("loss", "grad_norm", "trained_tokens", "train_mse"):
            assert b[key] == pytest.approx(a[key], rel=1e-4), key
    w1, w2 = weights(runs[1], 2), weights(runs[2], 2)
    for name in w1:
        torch.testing.assert_close(w2[name], w1[name], atol=2e-5, rtol=1e-4)
    assert records(runs[1] / "eval.jsonl")[-1]["held_out_loss"] == pytest.approx(
        records(runs[2] / "eval.jsonl")[-1]["held_out_loss"], rel=1e-4)


# ------------------------------------------------------------------ the command and bad input
def test_the_command_trains_reports_and_the_run_can_be_viewed_and_plotted(setup, tmp_path):
    from grove.infra.plotting import plot_run
    from grove.view import build_report
    from grove.view.run_contents import read_run

    root, tiny, _, labelled = setup
    out = tmp_path / "cli"
    config = tmp_path / "rm.yaml"
    config.write_text(dump_config(_cfg(tiny, labelled, out, 2, **{"rm.objective": "regression"})))
    result = CliRunner().invoke(app, ["rm", str(config)])
    assert result.exit_code == 0, result.output
    assert "held-out agreement" in result.output and "sequence_classifier" in result.output
    assert read_run(out).kind == "reward_model"
    assert build_report(out, tmp_path / "view") == tmp_path / "view" / "index.html"
    assert plot_run(out)
    shown = CliRunner().invoke(app, ["config", "show", str(config)])
    assert shown.exit_code == 0, shown.output


def _error(tmp_path: Path, tiny: Path, rows: list[dict], **extra) -> str:
    data = _write(tmp_path / "bad.jsonl", rows)
    config = tmp_path / "bad.yaml"
    config.write_text(dump_config(_cfg(tiny, data, tmp_path / "out", 2, **extra)))
    result = CliRunner().invoke(app, ["rm", str(config)])
    assert result.exit_code == 2, result.output
    assert "error:" in result.output and "Traceback" not in result.output
    return " ".join(result.output.split())


def test_bad_data_is_one_error_line_naming_the_file_line_and_field(setup, tmp_path):
    root, tiny, _, _ = setup
    good = _pairs(4)
    message = _error(tmp_path, tiny, [*good, {"prompt": "p", "chosen": "a"}])
    assert "bad.jsonl:5" in message and "'rejected'" in message
    regression = {"rm.objective": "regression", "rm.heads": "[good]"}
    labelled = [{"prompt": f"p{i}", "completion": "c", "labels": {"good": 1.0}} for i in range(4)]
    message = _error(tmp_path, tiny, [*labelled, {"prompt": "q", "completion": "c", "labels": {"bad": 1}}], **regression)
    assert "bad.jsonl:5" in message and "['bad']" in message and "rm.heads" in message
    message = _error(tmp_path, tiny, [*labelled, {"prompt": "q", "completion": "c", "labels": {"good": "high"}}],
                     **regression)
    assert "bad.jsonl:5" in message and "labels.good" in message and "number" in message
    message = _error(tmp_path, tiny, [{"prompt": "p", "completion": "c", "labels": {"good": 1.0}}] * 3, **regression)
    assert "rm.eval_fraction" in message  # one prompt: nothing left to train on once it is held out
    message = _error(tmp_path, tiny, [*labelled, {"prompt": "q", "completion": "c", "score": 1}], **regression)
    assert "bad.jsonl:5" in message and "'labels'" in message


def test_without_an_rm_section_the_command_says_what_to_add(setup, tmp_path):
    root, tiny, _, _ = setup
    config = tmp_path / "rl.yaml"
    config.write_text(dump_config(load_config(None, [f"model.name={tiny}", f"output_dir={tmp_path / 'o'}"])))
    result = CliRunner().invoke(app, ["rm", str(config)])
    assert result.exit_code == 2 and "rm: {data:" in " ".join(result.output.split())


@pytest.mark.xdist_group("hpo_ontology")  # with the other tests that load the ontology: one load per worker
def test_the_clinical_example_labels_vary_and_its_config_reads_them(setup, tmp_path, monkeypatch, capsys):
    """examples/reward_model_clinical.yaml: make_labels.py writes rows whose rule-based labels vary (cached), and the
    config's rm section reads them with the tiny model's tokenizer."""
    root, tiny, _, _ = setup
    repo = Path(__file__).resolve().parent.parent
    out = tmp_path / "labels"
    script = repo / "examples" / "reward_model" / "make_labels.py"
    argv = [str(script), str(repo / "examples" / "reward_model_clinical.yaml"), "--train-cases", "4",
            "--eval-cases", "2", "--out", str(out)]
    monkeypatch.setenv("GROVE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.chdir(repo)
    monkeypatch.setattr(sys, "argv", argv)
    runpy.run_path(str(script), run_name="__main__")
    rows = [json.loads(line) for line in (out / "train.jsonl").read_text().splitlines()]
    assert len(rows) == 16 and rows[0]["prompt"][0]["role"] == "system"
    for head in ("accuracy", "faithfulness", "comprehensiveness"):
        assert len({r["labels"][head] for r in rows}) > 1, head  # the corruptions move every label
    capsys.readouterr()
    runpy.run_path(str(script), run_name="__main__")
    assert "up to date" in capsys.readouterr().out
    from grove.rm.reward_splits import load_rm_splits

    cfg = load_config(repo / "examples" / "reward_model_clinical.yaml", [
        f"model.name={tiny}", f"rm.data=[{out / 'train.jsonl'}]", f"rm.eval_data=[{out / 'eval.jsonl'}]",
        "rm.max_length=4096"])
    from grove.models.pretrained import load_policy

    _, tokenizer = load_policy(tiny)
    splits = load_rm_splits(cfg, tokenizer)
    assert splits.heads == ("accuracy", "faithfulness", "comprehensiveness")
    assert len(splits.train) == 16 and len(splits.held_out) == 8
