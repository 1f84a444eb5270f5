"""``grove sft``: supervised fine-tuning, the trainer's loop with demonstrations and the ``nll`` loss, on a tiny model.

Checked: the loss is the mean cross-entropy of the trained tokens (against an independent computation), it falls,
the held-out loss is logged, the final model is a plain transformers model that ``model.init_from`` starts RL from;
a killed run resumes to the same weights and logs; packing changes nothing but the layout; LoRA trains adapters and
exports a merged model; two gloo ranks (DDP and FSDP2) equal one process; a task config is
evaluated before and after; bad data is one ``error:`` line naming the file and line.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from tests.tiny_runs import copy_run, records, same_weights, weights
from transformers import AutoModelForCausalLM
from typer.testing import CliRunner

from forked_processes import run_grove_ranks
from grove.cli import app
from grove.config import dump_config
from grove.experience.task_sampler import TaskSampler
from grove.models.pretrained import load_policy
from grove.models.tiny import create_tiny_model_dir
from grove.resolve import load_config
from grove.sft.data import load_sft_examples
from grove.training.trainer import Trainer

TESTS = Path(__file__).resolve().parent


def _rows(n: int, offset: int = 0) -> list[dict]:
    rows = []
    for i in range(offset, offset + n):
        a, b = i % 7, (3 * i) % 5
        rows.append({"messages": [
            {"role": "user", "content": f"add {a} and {b}"},
            {"role": "assistant", "content": f"{a} plus {b} is {a + b}"},
        ]})
    return rows


def _write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("sft")
    tiny = create_tiny_model_dir(root / "tiny")
    data = _write(root / "train.jsonl", _rows(24))
    held = _write(root / "held.jsonl", _rows(4, offset=100))
    return root, tiny, data, held


def _settings(tiny: Path, data: Path, out: Path, steps: int = 4, **extra) -> list[str]:
    values = {
        "model.name": tiny, "output_dir": out, "threads": 1, "sft.data": f"[{data}]", "sft.eval_fraction": 0.0,
        "sft.steps": steps, "sft.batch_size": 6, "train.micro_batch_size": 4, "optim.lr": 3e-3, "checkpoint.every": 1,
        "checkpoint.keep_last": 10, "logging.progress": False, "logging.plots": False, "logging.tensorboard": False, **extra,
    }
    return [f"{k}={v}" for k, v in values.items()]


def _cfg(*args, **kwargs):
    return load_config(None, _settings(*args, **kwargs))


def test_the_loss_is_the_token_mean_cross_entropy_and_it_falls(setup, tmp_path):
    root, tiny, data, held = setup
    cfg = _cfg(tiny, data, tmp_path / "run", 6, **{"sft.eval_data": f"[{held}]"})
    trainer = Trainer(cfg, tmp_path / "run", kind="sft")
    # an independent computation of the first step's loss: log-softmax of the plain forward, on the trained tokens
    source = trainer.source
    first = [source.splits.train[i] for i in TaskSampler(len(source.splits.train), cfg.seed).next(6)]
    model = trainer.models.causal_lm
    total = count = 0.0
    with torch.no_grad():
        for ex in first:
            ids = torch.tensor([ex.input_ids])
            logp = torch.log_softmax(model(ids).logits[0, :-1].float(), -1).gather(1, ids[0, 1:, None])[:, 0]
            mask = torch.tensor(ex.loss_mask[1:], dtype=torch.float)
            total -= float((logp * mask).sum())
            count += float(mask.sum())
    trainer.run()
    metrics = records(tmp_path / "run" / "metrics.jsonl")
    assert metrics[0]["loss"] == pytest.approx(total / count, rel=1e-4)
    assert metrics[-1]["loss"] < metrics[0]["loss"]
    evals = records(tmp_path / "run" / "eval.jsonl")
    assert [e["step"] for e in evals] == [0, 6] and evals[-1]["held_out_loss"] < evals[0]["held_out_loss"]
    assert "accuracy" not in evals[0]  # no env and no task of its own: nothing to evaluate but the loss
    final = tmp_path / "run" / "model"
    loaded = AutoModelForCausalLM.from_pretrained(final)
    saved = weights(tmp_path / "run", 6)
    assert all(torch.equal(loaded.state_dict()[k], saved[k]) for k in saved)
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["train_rows"] == 24 and summary["held_out_rows"] == 4


def test_a_killed_run_resumes_to_the_same_weights_and_logs(setup, tmp_path):
    root, tiny, data, _ = setup
    whole = tmp_path / "whole"
    Trainer(_cfg(tiny, data, whole, 5), whole, kind="sft").run()  # 5 steps of 6 cross the epoch of 24 rows
    killed = copy_run(whole, tmp_path / "killed", 2)
    resumed = Trainer(_cfg(tiny, data, killed, 5), killed, resume=True, kind="sft")
    assert resumed.step == 2
    resumed.run()
    for step in (3, 4, 5):
        assert same_weights(weights(killed, step), weights(whole, step))
    assert records(killed / "metrics.jsonl") == records(whole / "metrics.jsonl")


def test_packing_changes_the_layout_not_the_numbers(setup, tmp_path):
    root, tiny, data, _ = setup
    runs = {}
    for packing in (True, False):
        out = tmp_path / f"packing-{packing}"
        Trainer(_cfg(tiny, data, out, 2, **{"sft.packing": packing}), out, kind="sft").run()
        runs[packing] = records(out / "metrics.jsonl")
    for got, want in zip(runs[True], runs[False], strict=True):
        assert got["loss"] == pytest.approx(want["loss"], rel=1e-5)
        assert got["grad_norm"] == pytest.approx(want["grad_norm"], rel=1e-4)


def test_lora_trains_adapters_and_exports_a_merged_model(setup, tmp_path):
    root, tiny, data, _ = setup
    out = tmp_path / "lora"
    lora = "{r: 4, alpha: 8, target_modules: [q_proj, v_proj]}"
    Trainer(_cfg(tiny, data, out, 3, **{"model.lora": lora, "optim.lr": 1e-2}), out, kind="sft").run()
    adapter = load_file(out / "checkpoints" / "step-000003" / "model" / "adapter_model.safetensors")
    assert any(v.abs().max() > 0 for k, v in adapter.items() if "lora_B" in k)
    merged = AutoModelForCausalLM.from_pretrained(out / "model").state_dict()
    base = load_file(tiny / "model.safetensors")
    assert merged.keys() >= base.keys()
    assert any(not torch.equal(merged[k], base[k]) for k in base if "q_proj" in k)
    # RL starts from it: model.init_from names the run
    rl = load_config(None, [f"model.name={tiny}", f"model.init_from={out}"])
    from grove.models.initial_weights import policy_source

    started, _ = load_policy(policy_source(rl.model.name, rl.model.init_from))
    assert all(torch.equal(started.state_dict()[k], merged[k]) for k in base)


def test_a_task_config_is_evaluated_before_and_after(setup, tmp_path):
    root, tiny, _, _ = setup
    from grove.demos import write_demonstrations

    cfg = load_config(
        None, [f"model.name={tiny}", "task={id: arithmetic, train_size: 20, eval_size: 3}", "rollout.max_new_tokens=4"]
    )
    _, tokenizer = load_policy(tiny)
    demos = tmp_path / "demos.jsonl"
    write_demonstrations(cfg, tokenizer, demos, episodes=12)
    out = tmp_path / "task"
    settings = _settings(tiny, demos, out, 2) + ["task={id: arithmetic, train_size: 20, eval_size: 3}",
                                                   "rollout.max_new_tokens=4", "sft.eval_fraction=0.25"]
    Trainer(load_config(None, settings), out, kind="sft").run()
    evals = records(out / "eval.jsonl")
    assert [e["step"] for e in evals] == [0, 2]
    assert all(e["total"] == 3 and "held_out_loss" in e for e in evals)
    assert (out / "eval_samples_step000002.jsonl").exists() or any(out.glob("eval_samples*"))


def test_bad_data_is_one_error_line_naming_the_file_and_line(setup, tmp_path):
    root, tiny, _, _ = setup
    data = _write(tmp_path / "bad.jsonl", [*_rows(2), {"messages": [{"role": "user", "content": "hi"},
                                                                    {"role": "assistant", "content": ""}]}])
    config = tmp_path / "sft.yaml"
    config.write_text(dump_config(_cfg(tiny, data, tmp_path / "out", 2)))
    result = CliRunner().invoke(app, ["sft", str(config)])
    assert result.exit_code == 2, result.output
    assert f"{data}:3" in result.output and "error:" in result.output
    assert "Traceback" not in result.output


def test_without_an_sft_section_the_command_says_what_to_add(setup, tmp_path):
    root, tiny, _, _ = setup
    config = tmp_path / "rl.yaml"
    config.write_text(dump_config(load_config(None, [f"model.name={tiny}", f"output_dir={tmp_path / 'o'}"])))
    result = CliRunner().invoke(app, ["sft", str(config)])
    assert result.exit_code == 2 and "sft: {data:" in result.output


@pytest.mark.parametrize("strategy", ["ddp", "fsdp2"])
def test_two_ranks_equal_one_process(setup, tmp_path, strategy):
    root, tiny, data, _ = setup
    runs = {}
    for processes in (1, 2):
        out = tmp_path / f"ranks-{processes}"
        config = tmp_path / f"sft-{processes}.yaml"
        extra = {"distributed.strategy": strategy, "distributed.timeout_seconds": 120, "optim.eps": 1e-3,
                 "sft.evaluate": True, "task": "{id: arithmetic, train_size: 16, eval_size: 2}",
                 "rollout.max_new_tokens": 3}
        config.write_text(dump_config(_cfg(tiny, data, out, 2, **extra)))
        run_grove_ranks(processes, ["sft", str(config)], logs=tmp_path / f"logs-{processes}")
        runs[processes] = out
    one, two = records(runs[1] / "metrics.jsonl"), records(runs[2] / "metrics.jsonl")
    for a, b in zip(one, two, strict=True):
        for key in ("loss", "grad_norm", "trained_tokens"):
            assert b[key] == pytest.approx(a[key], rel=1e-4), key
    w1, w2 = weights(runs[1], 2), weights(runs[2], 2)
    for name in w1:
        torch.testing.assert_close(w2[name], w1[name], atol=2e-5, rtol=1e-4)


def test_demonstration_rows_train_exactly_their_masked_tokens(setup, tmp_path):
    root, tiny, _, _ = setup
    _, tokenizer = load_policy(tiny)
    from grove.sft.demonstration_format import tokenizer_fingerprint

    row = {"prompt_ids": [5, 6, 7], "completion_ids": [8, 9, 10, 11], "completion_mask": [1, 1, 0, 1],
           "tokenizer": tokenizer_fingerprint(tokenizer)}
    path = _write(tmp_path / "demos.jsonl", [row])
    (example,) = load_sft_examples([path], tokenizer, max_length=64)
    assert example.input_ids == [5, 6, 7, 8, 9, 10, 11]
    assert example.loss_mask == [0, 0, 0, 1, 1, 0, 1]


def test_grove_view_reports_a_real_sft_run(setup, tmp_path):
    from grove.view import build_report
    from grove.view.run_contents import read_run

    root, tiny, data, held = setup
    out = tmp_path / "run"
    Trainer(_cfg(tiny, data, out, 2, **{"sft.eval_data": f"[{held}]"}), out, kind="sft").run()
    contents = read_run(out)
    assert contents.kind == "sft" and [e["step"] for e in contents.evals] == [0, 2]
    assert all("held_out_loss" in e for e in contents.evals)
    assert build_report(out, tmp_path / "view") == tmp_path / "view" / "index.html"


@pytest.mark.parametrize("bad", [10**6, -1])
def test_a_demonstration_id_outside_the_vocabulary_is_one_error_naming_the_line(setup, tmp_path, bad):
    from grove.sft.demonstration_format import tokenizer_fingerprint

    root, tiny, _, _ = setup
    _, tokenizer = load_policy(tiny)
    good = {"prompt_ids": [5, 6, 7], "completion_ids": [8, 9], "completion_mask": [1, 1],
            "tokenizer": tokenizer_fingerprint(tokenizer)}
    data = _write(tmp_path / "demos.jsonl", [good, {**good, "completion_ids": [8, bad]}])
    config = tmp_path / "c.yaml"
    config.write_text(dump_config(_cfg(tiny, data, tmp_path / "run", 1)))
    result = CliRunner().invoke(app, ["sft", str(config)])
    text = " ".join(result.output.split())
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    assert f"{data}:2: completion_ids holds the token id {bad}, outside this tokenizer's vocabulary" in text, text
