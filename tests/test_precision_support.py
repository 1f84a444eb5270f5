"""bf16 on hardware without native bf16 products: detection, and the warning `grove train`, `grove config show` and
`grove eval` print."""

from __future__ import annotations

import logging

import pytest
import torch
from typer.testing import CliRunner

from grove.cli import app
from grove.infra import precision
from grove.infra.precision import native_bf16_products, slow_bf16_warning
from grove.models.tiny import create_tiny_model_dir


@pytest.fixture(params=[True, False], ids=["onednn-bf16", "no-onednn-bf16"])
def onednn_bf16(request, monkeypatch) -> bool:
    monkeypatch.setattr(precision, "_onednn_has_bf16", lambda: request.param)
    return request.param


def test_cpu_answer_follows_onednn(onednn_bf16):
    assert native_bf16_products("cpu") is onednn_bf16
    assert native_bf16_products(torch.device("meta"))  # other devices: assumed native


def test_the_real_cpu_answer_is_onednns():
    expected = torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported()
    assert native_bf16_products("cpu") is bool(expected)


def test_warning_names_the_fields_and_the_fix(onednn_bf16):
    bf16_run = slow_bf16_warning("bf16", True, "cpu")
    copy_only = slow_bf16_warning("fp32", True, "cpu")
    if onednn_bf16:
        assert bf16_run is None and copy_only is None
        return
    assert "train.precision: bf16" in bf16_run and "set train.precision: fp32" in bf16_run
    assert "rollout.bf16_weights (follows the precision)" in bf16_run
    assert "bf16_weights: true" in copy_only and "set rollout.bf16_weights: false" in copy_only
    assert "train.precision" not in copy_only
    assert slow_bf16_warning("bf16", False, "cpu").startswith("train.precision: bf16 asks")
    assert slow_bf16_warning("fp32", False, "cpu") is None  # nothing in bf16: nothing to say


def test_config_show_warns_only_without_native_bf16(onednn_bf16, tmp_path):
    path = create_tiny_model_dir(tmp_path / "m")
    args = ["config", "show", "examples/arithmetic.yaml", "--no-memory", "--set", f"model.name={path}",
            "--set", "distributed.device=cpu"]
    fp32 = CliRunner().invoke(app, args)
    bf16 = CliRunner().invoke(app, [*args, "--set", "train.precision=bf16"])
    assert fp32.exit_code == 0 and bf16.exit_code == 0, bf16.output
    assert "bf16 matrix products" not in fp32.output
    assert ("set train.precision: fp32" in bf16.output) is not onednn_bf16


def test_trainer_logs_the_warning(monkeypatch, tmp_path, caplog):
    from grove.resolve import load_config
    from grove.training.trainer import Trainer

    monkeypatch.setattr(precision, "_onednn_has_bf16", lambda: False)
    path = create_tiny_model_dir(tmp_path / "m")
    cfg = load_config("examples/arithmetic.yaml", [
        f"model.name={path}", f"output_dir={tmp_path / 'run'}", "threads=1", "task.train_size=8", "task.eval_size=4",
        "train.precision=bf16", "distributed.device=cpu", "logging.progress=false", "logging.plots=false", "logging.tensorboard=false",
    ])
    with caplog.at_level(logging.WARNING, logger="grove.training.trainer"):
        Trainer(cfg, tmp_path / "run")
    assert any("set train.precision: fp32" in r.getMessage() for r in caplog.records)


def test_grove_eval_warns_for_bf16_without_native_products(monkeypatch, tmp_path):
    monkeypatch.setattr(precision, "_onednn_has_bf16", lambda: False)
    path = create_tiny_model_dir(tmp_path / "m")
    args = ["eval", "--model", str(path), "--config", "examples/arithmetic.yaml", "--max-examples", "2",
            "--set", "threads=1", "--set", "task.eval_size=2", "--set", "rollout.max_new_tokens=2"]
    fp32 = CliRunner().invoke(app, args)
    bf16 = CliRunner().invoke(app, [*args, "--set", "train.precision=bf16"])
    assert fp32.exit_code == 0 and bf16.exit_code == 0, bf16.output
    assert "bf16 matrix products" not in fp32.output
    assert "train.precision: bf16 asks" in bf16.output and "set train.precision: fp32" in bf16.output
