"""Reliability (docs/reliability.md): checkpoint integrity (manifest, fallback to the last good checkpoint, keep_last,
a full disk), the non-finite guard (a NaN loss or advantage skips the optimizer step; too many in a row stop the
run), and the graceful stop on SIGTERM / SIGINT, each resumed to the uninterrupted run's numbers."""

from __future__ import annotations

import dataclasses
import errno
import json
import logging
import os
import signal
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from grove.infra import checkpoint as ckpt
from grove.models.tiny import create_tiny_model_dir
from grove.resolve import load_config
from grove.training.nonfinite_guard import NonFiniteTrainingError
from grove.training.trainer import Trainer

TIMING = ("seconds", "per_second")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return create_tiny_model_dir(tmp_path_factory.mktemp("reliability") / "tiny")


def _cfg(model: Path, out: Path, steps: int, **extra):
    values = {
        "model.name": model, "output_dir": out, "threads": 1, "task": "{id: arithmetic, train_size: 16, eval_size: 2}",
        "rewards": "[{id: 'user_rewards:char_count'}]", "rollout.max_new_tokens": 5, "train.steps": steps,
        "train.prompts_per_step": 2, "train.completions_per_prompt": 3, "train.micro_batch_size": 3,
        "optim.lr": 1e-2, "checkpoint.every": 1, "checkpoint.keep_last": 5, "logging.progress": False, "logging.plots": False,
        "logging.tensorboard": False, "eval.before_training": False, "eval.max_examples": 2, **extra,
    }
    return load_config(None, [f"{k}={v}" for k, v in values.items()])


def _metrics(run: Path) -> list[dict]:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if not k.endswith(TIMING)} for r in rows]


def _records(path: Path) -> list[dict]:
    if not path.exists():
        return []
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    return [{k: v for k, v in r.items() if not k.endswith(TIMING)} for r in rows]


def _weights(run: Path, step: int) -> dict[str, torch.Tensor]:
    return load_file(ckpt.checkpoint_dir(run, step) / "model" / "model.safetensors")


@pytest.fixture(autouse=True)
def _user_rewards(monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).parent))


@pytest.fixture(scope="module")
def straight(tiny, tmp_path_factory):
    """The uninterrupted 4-step run every interrupted one is compared with."""
    out = tmp_path_factory.mktemp("straight") / "run"
    import sys

    sys.path.insert(0, str(Path(__file__).parent))
    Trainer(_cfg(tiny, out, 4), out).run()
    return out


# ---------------------------------------------------------------- checkpoint integrity
def test_checkpoints_carry_a_manifest_that_catches_any_damage(straight):
    step = ckpt.checkpoint_dir(straight, 4)
    manifest = json.loads((step / ckpt.MANIFEST).read_text())["files"]
    assert {"trainer_state.pt", "model/model.safetensors", "model/config.json"} <= set(manifest)
    assert ckpt.verify_checkpoint(step) is None


def _copy_run(src: Path, dst: Path, last_step: int) -> Path:
    import shutil

    shutil.copytree(src, dst)
    for c in ckpt.list_checkpoints(dst):
        if int(c.name.split("-")[1]) > last_step:
            shutil.rmtree(c)
    return dst


def test_resume_falls_back_past_a_corrupt_latest_checkpoint(tiny, straight, tmp_path, caplog):
    run = _copy_run(straight, tmp_path / "run", 3)  # as if killed after step 3's checkpoint
    model_file = ckpt.checkpoint_dir(run, 3) / "model" / "model.safetensors"
    data = bytearray(model_file.read_bytes())
    data[len(data) // 2] ^= 0xFF  # one flipped byte: same size, wrong checksum
    model_file.write_bytes(bytes(data))
    assert "checksum" in ckpt.verify_checkpoint(ckpt.checkpoint_dir(run, 3))
    with caplog.at_level(logging.WARNING):
        trainer = Trainer(_cfg(tiny, run, 4), run, resume=True)
    assert trainer.resume_from == ckpt.checkpoint_dir(run, 2)
    assert "step-000003 is damaged" in caplog.text and "falling back" in caplog.text
    trainer.run()
    assert _metrics(run) == _metrics(straight)  # steps 3 and 4 redone, nothing duplicated
    for k, v in _weights(straight, 4).items():
        assert torch.equal(v, _weights(run, 4)[k])


def test_resume_skips_a_truncated_checkpoint(tiny, straight, tmp_path):
    run = _copy_run(straight, tmp_path / "run", 3)
    state = ckpt.checkpoint_dir(run, 3) / "trainer_state.pt"
    state.write_bytes(state.read_bytes()[:100])
    assert "bytes" in ckpt.verify_checkpoint(ckpt.checkpoint_dir(run, 3))
    assert Trainer(_cfg(tiny, run, 4), run, resume=True).resume_from == ckpt.checkpoint_dir(run, 2)


def test_keep_last_never_deletes_the_last_good_checkpoint(straight, tmp_path):
    run = _copy_run(straight, tmp_path / "run", 4)
    for step in (2, 3, 4):  # the three newest are damaged: only step 1 is good
        (ckpt.checkpoint_dir(run, step) / "trainer_state.pt").write_bytes(b"broken")
    ckpt._prune(run, keep_last=1)
    assert ckpt.checkpoint_dir(run, 1).is_dir()
    assert ckpt.latest_checkpoint(run) == ckpt.checkpoint_dir(run, 1)


def _disk_full_at_step_2(monkeypatch) -> None:
    """``torch.save`` of step 2's checkpoint fails as on a full disk."""
    real_save = torch.save

    def save(obj, path, *a, **kw):
        if "step-000002" in str(path):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_save(obj, path, *a, **kw)

    monkeypatch.setattr(ckpt.torch, "save", save)


def test_a_full_disk_during_a_save_keeps_the_previous_checkpoint(tiny, tmp_path, monkeypatch):
    out = tmp_path / "run"
    trainer = Trainer(_cfg(tiny, out, 3), out)
    _disk_full_at_step_2(monkeypatch)
    with pytest.raises(ckpt.CheckpointWriteError) as info:
        trainer.run()
    message = str(info.value)
    assert "No space left" in message and "step-000001 is intact" in message and f"--resume {out}" in message
    assert [c.name for c in ckpt.list_checkpoints(out)] == ["step-000001"]
    assert not list((out / "checkpoints").glob(".tmp-*"))
    assert ckpt.verify_checkpoint(ckpt.checkpoint_dir(out, 1)) is None


# ---------------------------------------------------------------- non-finite guard
def _nan_loss_on(trainer: Trainer, calls: set[int]) -> None:
    """Make the policy loss NaN on the given (1-based) micro-batch calls."""
    update = trainer.built.updater
    parts = update.loss
    real = parts.policy_loss
    count = {"n": 0}

    def loss(inputs, params):
        count["n"] += 1
        out = real(inputs, params)
        if count["n"] in calls:
            out = type(out)(**{**out.__dict__, "token_loss": out.token_loss * float("nan")})
        return out

    import dataclasses

    update.loss = dataclasses.replace(parts, policy_loss=loss)


def test_a_nan_loss_skips_that_optimizer_step(tiny, straight, tmp_path, caplog):
    out = tmp_path / "run"
    trainer = Trainer(_cfg(tiny, out, 2), out)
    _nan_loss_on(trainer, {3})  # step 2's first micro-batch (2 per step)
    with caplog.at_level(logging.WARNING):
        trainer.run()
    rows = _metrics(out)
    assert [r["skipped_optimizer_steps"] for r in rows] == [0.0, 1.0]
    assert "optimizer step skipped" in caplog.text and "trajectories [" in caplog.text
    for k, v in _weights(out, 1).items():  # step 2 changed nothing
        assert torch.equal(v, _weights(out, 2)[k])
    assert all(torch.isfinite(v).all() for v in _weights(out, 2).values())


def test_consecutive_skips_stop_the_run_with_the_last_good_checkpoint_named(tiny, tmp_path):
    out = tmp_path / "run"
    trainer = Trainer(_cfg(tiny, out, 8, **{"train.max_skipped_steps": 2}), out)
    _nan_loss_on(trainer, set(range(5, 100)))  # from step 3 on
    with pytest.raises(NonFiniteTrainingError) as info:
        trainer.run()
    assert "steps 3..4" in str(info.value) and "step-000003" in str(info.value)  # its weights are step 2's
    assert [r["step"] for r in _metrics(out)] == [1, 2, 3, 4]
    assert ckpt.latest_checkpoint(out) == ckpt.checkpoint_dir(out, 3)  # step 3 changed nothing; 4 was not saved
    for k, v in _weights(out, 2).items():
        assert torch.equal(v, _weights(out, 3)[k])


def test_a_nan_advantage_skips_the_step_update(tiny, tmp_path, caplog):
    out = tmp_path / "run"
    trainer = Trainer(_cfg(tiny, out, 1), out)
    credit = trainer.stage.credit

    class Poisoned:  # the step's credit assignment gives one sample a NaN advantage
        def __call__(self, scored):
            exp = credit(scored)
            adv = exp.batch.advantages.clone()
            adv[1] = float("nan")
            return dataclasses.replace(exp, batch=exp.batch.replace(advantages=adv))

        def step_metrics(self, exp):
            return credit.step_metrics(exp)

    trainer.stage = dataclasses.replace(trainer.stage, credit=Poisoned())
    before = {k: v.clone() for k, v in trainer.models.causal_lm.state_dict().items()}
    with caplog.at_level(logging.WARNING):
        trainer.run()
    row = _metrics(out)[0]
    assert row["skipped_optimizer_steps"] == 1.0 and row["nonfinite_advantage_samples"] == 1.0
    assert "non-finite advantages" in caplog.text
    for k, v in trainer.models.causal_lm.state_dict().items():
        assert torch.equal(v, before[k])


# ---------------------------------------------------------------- graceful stop
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_stops_after_the_step_with_a_checkpoint_and_resume_reproduces(tiny, straight, tmp_path, sig):
    out = tmp_path / "run"
    handlers = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)  # SIG_IGN under nohup / `&`
    trainer = Trainer(_cfg(tiny, out, 4, **{"checkpoint.every": 100}), out)
    step = trainer.train_step

    def step_then_signal():
        metrics = step()
        if trainer.step == 2:
            os.kill(os.getpid(), sig)  # arrives mid-run; the loop finishes the step first
        return metrics

    trainer.train_step = step_then_signal
    summary = trainer.run()
    assert summary.stopped_by == sig.name and summary.steps == 2
    assert [c.name for c in ckpt.list_checkpoints(out)] == ["step-000002"]
    assert not (out / "summary.json").exists()  # not finished
    Trainer(_cfg(tiny, out, 4), out, resume=True).run()
    assert _metrics(out) == _metrics(straight)
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == handlers  # handlers restored


def _stop_with_sigterm_after(trainer: Trainer, step: int) -> None:
    real = trainer.train_step

    def step_then_signal():
        metrics = real()
        if trainer.step == step:
            os.kill(os.getpid(), signal.SIGTERM)
        return metrics

    trainer.train_step = step_then_signal


def test_a_stop_on_an_evaluation_step_keeps_that_evaluation(tiny, tmp_path):
    """SIGTERM lands on an ``eval.every`` step: the checkpoint is written without evaluating; the resumed run
    evaluates that step first, and its evaluations, metrics and weights equal the uninterrupted run's."""
    every = {"eval.every": 2, "checkpoint.every": 100}
    straight = tmp_path / "straight"
    Trainer(_cfg(tiny, straight, 4, **every), straight).run()
    out = tmp_path / "run"
    trainer = Trainer(_cfg(tiny, out, 4, **every), out)
    _stop_with_sigterm_after(trainer, 2)
    assert trainer.run().stopped_by == "SIGTERM"
    assert [r["step"] for r in _records(out / "eval.jsonl")] == []  # stopped before evaluating step 2
    Trainer(_cfg(tiny, out, 4, **every), out, resume=True).run()
    assert _records(out / "eval.jsonl") == _records(straight / "eval.jsonl")
    assert [(r["step"], r.get("final", False)) for r in _records(out / "eval.jsonl")] == [(2, False), (4, True)]
    for name in ("eval_samples_step000002.jsonl", "eval_samples_step000004.jsonl"):
        assert (out / name).read_text() == (straight / name).read_text()
    assert _metrics(out) == _metrics(straight)
    for k, v in _weights(straight, 4).items():
        assert torch.equal(v, _weights(out, 4)[k])


def test_grove_train_stops_on_sigterm_and_says_how_to_resume(tiny, tmp_path):
    """The command line: SIGTERM mid-run → checkpoint, exit code 143, the resume command printed."""
    import time

    from forked_processes import start_grove

    out = tmp_path / "run"
    root = Path(__file__).resolve().parents[1]
    args = ["train", "examples/arithmetic.yaml"]
    for key, value in {
        "model.name": tiny, "output_dir": out, "threads": 1, "task": "{id: arithmetic, train_size: 16, eval_size: 2}",
        "rollout.max_new_tokens": 5, "train.steps": 500, "train.prompts_per_step": 2,
        "train.completions_per_prompt": 2, "checkpoint.every": 1000, "logging.progress": False, "logging.plots": False,
        "logging.tensorboard": False, "eval.before_training": False,
    }.items():
        args += ["--set", f"{key}={value}"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(root / "src")}
    log = tmp_path / "train.log"
    proc = start_grove(args, env, root, log)
    deadline = time.time() + 120
    while not (out / "metrics.jsonl").exists() or not (out / "metrics.jsonl").read_text().strip():
        assert time.time() < deadline and proc.poll() is None, log.read_text()[-3000:]
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    code = proc.wait(timeout=120)
    stderr = log.read_text()
    assert code == 128 + signal.SIGTERM, stderr[-3000:]
    steps = [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert "SIGTERM received" in stderr and f"--resume {out}" in stderr and "Traceback" not in stderr
    assert [c.name for c in ckpt.list_checkpoints(out)] == [f"step-{steps[-1]:06d}"]


def test_grove_train_reports_a_full_disk_as_an_error(tiny, tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from grove.cli import app

    _disk_full_at_step_2(monkeypatch)
    out = tmp_path / "run"
    args = ["train", "examples/arithmetic.yaml", "--set", f"model.name={tiny}", "--set", f"output_dir={out}",
            "--set", "task={id: arithmetic, train_size: 8, eval_size: 2}", "--set", "train.steps=3",
            "--set", "train.prompts_per_step=2", "--set", "train.completions_per_prompt=2",
            "--set", "rollout.max_new_tokens=4", "--set", "checkpoint.every=1", "--set", "logging.progress=false", "--set", "logging.plots=false",
            "--set", "eval.before_training=false", "--set", "threads=1"]
    result = CliRunner().invoke(app, args)
    text = " ".join(result.output.split())
    assert result.exit_code == 2 and "No space left" in text and "step-000001 is intact" in text
