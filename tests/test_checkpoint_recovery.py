"""Resuming from damaged checkpoints: every kind of damage, with and without the checkpoint's manifest, either falls
back to the previous checkpoint (a warning naming what is wrong) or, when no checkpoint loads, stops with one
``error:`` line that lists them, changing nothing in the run directory. ``--resume`` on a directory that holds no
run, or a run stopped before it saved anything, says so. A randomized version runs under ``-m fuzz``."""

from __future__ import annotations

import logging
import random
import shutil
from pathlib import Path

import pytest
from tests.tiny_runs import (
    TESTS,
    config_file,
    copy_run,
    finished_run,
    records,
    run_config,
    same_weights,
    snapshot,
    weights,
)
from typer.testing import CliRunner

from grove.cli import app
from grove.config import ConfigError
from grove.infra import checkpoint as ckpt
from grove.models.tiny import create_tiny_model_dir
from grove.training.trainer import Trainer


@pytest.fixture(autouse=True)
def _user_rewards(monkeypatch):
    monkeypatch.syspath_prepend(str(TESTS))


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return create_tiny_model_dir(tmp_path_factory.mktemp("recovery") / "tiny")


@pytest.fixture(scope="module")
def straight(tiny, tmp_path_factory):
    """The uninterrupted 3-step run (a checkpoint after every step) the damaged copies are made from."""
    return finished_run(tiny, tmp_path_factory.mktemp("straight") / "run")


def _flip(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0xFF
    path.write_bytes(bytes(data))


def _damage(checkpoint: Path, kind: str, name: str) -> None:
    path = checkpoint / name
    if kind == "flipped byte":  # safetensors: inside its JSON header; trainer_state.pt: inside a tensor's record
        _flip(path, 20 if path.suffix == ".safetensors" else path.stat().st_size // 2)
    elif kind == "truncated":
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    elif kind == "missing":
        path.unlink()
    elif kind == "empty":
        path.write_bytes(b"")
    elif kind == "garbage json":
        path.write_text('{"model_type": "llama", ')
    else:
        raise AssertionError(kind)


DAMAGE = [
    ("flipped byte", "trainer_state.pt"),
    ("flipped byte", "model/model.safetensors"),
    ("truncated", "trainer_state.pt"),
    ("truncated", "model/model.safetensors"),
    ("missing", "trainer_state.pt"),
    ("missing", "model/model.safetensors"),
    ("missing", "model/config.json"),
    ("empty", "trainer_state.pt"),
    ("empty", "model/model.safetensors"),
    ("garbage json", "model/config.json"),
    ("garbage json", "model/tokenizer.json"),
]


def _without_manifests(run: Path) -> None:
    for c in ckpt.list_checkpoints(run):
        (c / ckpt.MANIFEST).unlink()


@pytest.mark.parametrize("manifest", ["with manifest", "without manifest"])
@pytest.mark.parametrize(("kind", "name"), DAMAGE, ids=[f"{k}-{n.split('/')[-1]}" for k, n in DAMAGE])
def test_damage_falls_back_to_the_previous_checkpoint_or_stops_cleanly(
    tiny, straight, tmp_path, caplog, kind, name, manifest
):
    # the newest checkpoint damaged: resume from the one before, with a warning naming the file
    run = copy_run(straight, tmp_path / "run", 2)
    if manifest == "without manifest":
        _without_manifests(run)
    _damage(ckpt.checkpoint_dir(run, 2), kind, name)
    with caplog.at_level(logging.WARNING):
        trainer = Trainer(run_config(tiny, run, 3), run, resume=True)
    assert trainer.resume_from == ckpt.checkpoint_dir(run, 1) and trainer.step == 1
    unnamed = manifest == "without manifest" and (kind, name) == ("missing", "model/model.safetensors")
    named = "model/*.safetensors" if unnamed else name  # without a manifest, no record of the file's name
    assert "step-000002 is damaged" in caplog.text and named in caplog.text and "falling back" in caplog.text
    assert ("has no manifest.json" in caplog.text) == (manifest == "without manifest")

    # every checkpoint damaged: one clear error listing each, and the run directory exactly as it was
    run = copy_run(straight, tmp_path / "all-damaged", 2)
    if manifest == "without manifest":
        _without_manifests(run)
    for step in (1, 2):
        _damage(ckpt.checkpoint_dir(run, step), kind, name)
    before = snapshot(run)
    with pytest.raises(ConfigError) as info:
        Trainer(run_config(tiny, run, 3), run, resume=True)
    message = str(info.value)
    assert "step-000001" in message and "step-000002" in message and named in message
    assert "output_dir=" in message and "\n" not in message
    assert snapshot(run) == before


def test_grove_train_refuses_to_resume_when_no_checkpoint_loads(tiny, straight, tmp_path):
    run = copy_run(straight, tmp_path / "run", 2)
    for step in (1, 2):
        _damage(ckpt.checkpoint_dir(run, step), "truncated", "trainer_state.pt")
    before = snapshot(run)
    result = CliRunner().invoke(app, ["train", str(run / "config.yaml"), "--resume", str(run)])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and "Traceback" not in result.output, result.output
    text = " ".join(result.output.split())
    assert "step-000001" in text and "step-000002" in text and "trainer_state.pt" in text
    assert snapshot(run) == before  # metrics.jsonl and every checkpoint untouched


def test_grove_train_resumes_past_a_damaged_checkpoint_without_manifest(tiny, straight, tmp_path):
    """Through the command line: the newest checkpoint lost its manifest and its trainer state is truncated; the
    run resumes from the one before and ends exactly as the uninterrupted run."""
    run = copy_run(straight, tmp_path / "run", 2)
    _without_manifests(run)
    _damage(ckpt.checkpoint_dir(run, 2), "truncated", "trainer_state.pt")
    result = CliRunner().invoke(app, ["train", str(run / "config.yaml"), "--resume", str(run)])
    assert result.exit_code == 0, result.output
    assert records(run / "metrics.jsonl") == records(straight / "metrics.jsonl")
    assert records(run / "eval.jsonl") == records(straight / "eval.jsonl")
    assert same_weights(weights(run, 3), weights(straight, 3))


def test_a_checkpoint_without_manifest_that_loads_is_used_with_a_warning(tiny, straight, tmp_path, caplog):
    """Without its manifest, a changed byte inside the tensor data loads like any weights: the run resumes from
    that checkpoint, and the warning says it could not be verified."""
    run = copy_run(straight, tmp_path / "run", 2)
    (ckpt.checkpoint_dir(run, 2) / ckpt.MANIFEST).unlink()
    with caplog.at_level(logging.WARNING):
        trainer = Trainer(run_config(tiny, run, 3), run, resume=True)
    assert trainer.resume_from == ckpt.checkpoint_dir(run, 2)
    assert "step-000002 has no manifest.json" in caplog.text and "cannot be checked" in caplog.text


def test_a_file_broken_before_it_was_hashed_falls_back(tiny, straight, tmp_path, caplog):
    """Damage the manifest cannot see: the file was already broken when it was hashed (the manifest matches)."""
    run = copy_run(straight, tmp_path / "run", 2)
    step2 = ckpt.checkpoint_dir(run, 2)
    _damage(step2, "truncated", "model/model.safetensors")
    ckpt.write_manifest(step2)
    assert ckpt.verify_checkpoint(step2) is None
    with caplog.at_level(logging.WARNING):
        trainer = Trainer(run_config(tiny, run, 3), run, resume=True)
    assert trainer.resume_from == ckpt.checkpoint_dir(run, 1)
    assert "model/model.safetensors does not load" in caplog.text


# ---------------------------------------------------------------- --resume where there is no run
def test_resume_of_a_directory_that_does_not_exist(tiny, tmp_path):
    missing = tmp_path / "no-such-run"
    with pytest.raises(ConfigError, match="there is no run there"):
        Trainer(run_config(tiny, missing, 2), missing, resume=True)
    assert not missing.exists()


def test_resume_of_a_run_stopped_during_start_up(tiny, tmp_path):
    run = tmp_path / "run"
    run.mkdir()  # the command line creates the directory before the run writes its config.yaml
    with pytest.raises(ConfigError, match="nothing was saved there yet") as info:
        Trainer(run_config(tiny, run, 2), run, resume=True)
    assert "without --resume" in str(info.value)
    assert list(run.iterdir()) == []


def test_grove_train_resume_of_a_run_stopped_during_start_up(tiny, tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    config = config_file(tmp_path / "config.yaml", tiny, run, 2)
    result = CliRunner().invoke(app, ["train", str(config), "--resume", str(run)])
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    text = " ".join(result.output.split())
    assert "nothing was saved there yet" in text and "without --resume" in text and "no such run" not in text


def test_a_run_stopped_before_its_first_checkpoint_starts_over(tiny, straight, tmp_path):
    run = copy_run(straight, tmp_path / "run", 0)
    assert not ckpt.list_checkpoints(run) and (run / "config.yaml").is_file()
    trainer = Trainer(run_config(tiny, run, 3), run, resume=True)
    assert trainer.resume_from is None and trainer.step == 0
    trainer.run()
    assert records(run / "metrics.jsonl") == records(straight / "metrics.jsonl")


# ---------------------------------------------------------------- randomized damage
FILES = [
    "trainer_state.pt", "model/model.safetensors", "model/config.json", "model/tokenizer.json",
    "model/tokenizer_config.json", "model/generation_config.json", "manifest.json",
]
KINDS = ["flip", "truncate", "missing", "empty", "garbage"]


def _random_damage(rng: random.Random, checkpoint: Path) -> tuple[str, str, bool]:
    """Damage one file of ``checkpoint`` at random; return (kind, file, whether the damage breaks the file's
    structure so that it can never load)."""
    name, kind = rng.choice([f for f in FILES if (checkpoint / f).is_file()]), rng.choice(KINDS)
    path = checkpoint / name
    size = path.stat().st_size
    if size == 0:  # emptied by an earlier damage of this trial
        kind = "missing"
    if kind == "flip":
        _flip(path, rng.randrange(size))
    elif kind == "truncate":
        path.write_bytes(path.read_bytes()[: rng.randrange(size)])
    elif kind == "missing":
        path.unlink()
    elif kind == "empty":
        path.write_bytes(b"")
    else:
        data = bytearray(path.read_bytes())
        start = rng.randrange(size)
        data[start : start + 16] = bytes(rng.randrange(256) for _ in range(16))
        path.write_bytes(bytes(data))
    structural = kind in ("truncate", "missing", "empty") and name in ("trainer_state.pt", "model/model.safetensors")
    return kind, name, structural


def _fuzz_damage(tiny: Path, straight: Path, root: Path, trials: int, seed: int) -> None:
    rng = random.Random(seed)
    for trial in range(trials):
        run = copy_run(straight, root / f"trial-{trial}", 2)
        with_manifest = rng.random() < 0.5
        if not with_manifest:
            _without_manifests(run)
        damaged = [rng.choice([1, 2]) for _ in range(rng.choice([1, 2]))]
        what = [(step, *_random_damage(rng, ckpt.checkpoint_dir(run, step))) for step in damaged]
        label = f"trial {trial} (seed {seed}): {what}, {'with' if with_manifest else 'without'} manifest"
        before = snapshot(run)
        try:
            trainer = Trainer(run_config(tiny, run, 3), run, resume=True)
        except ConfigError as exc:  # the clean refusal: only when every checkpoint was damaged, nothing changed
            assert {1, 2} <= set(damaged), f"{label}: refused although a checkpoint was intact: {exc}"
            assert snapshot(run) == before, label
            continue
        used = trainer.resume_from
        assert used is not None, label
        hits = [(k, name, structural) for step, k, name, structural in what if ckpt.checkpoint_dir(run, step) == used]
        if (used / ckpt.MANIFEST).is_file():  # a manifest sees every change
            assert not hits, f"{label}: resumed from the damaged {used.name}"
        assert not any(structural for _, _, structural in hits), f"{label}: resumed from the broken {used.name}"
        if hits:  # damage only the manifest could have seen: the checkpoint loads, so the run goes on from it
            trainer.run()
        shutil.rmtree(run)


def test_random_damage_short(tiny, straight, tmp_path):
    _fuzz_damage(tiny, straight, tmp_path, trials=12, seed=0)


@pytest.mark.fuzz
def test_random_damage_full(tiny, straight, tmp_path):
    _fuzz_damage(tiny, straight, tmp_path, trials=300, seed=1)


def test_weights_that_do_not_fit_the_model_are_a_config_error(tiny, straight, tmp_path, caplog):
    """Without the run's config.yaml nothing tells that model.name changed, until the weights do not fit."""
    other = create_tiny_model_dir(tmp_path / "other", hidden_size=32)
    run = copy_run(straight, tmp_path / "run", 2)
    (run / "config.yaml").unlink()
    before = snapshot(run)
    with caplog.at_level(logging.WARNING), pytest.raises(ConfigError) as info:
        Trainer(run_config(other, run, 3), run, resume=True)
    assert "has no config.yaml" in caplog.text
    assert "do not fit model.name" in str(info.value) and "step-000002" in str(info.value)
    assert snapshot(run) == before


@pytest.mark.parametrize("off", ["0", "null"])
def test_checkpoints_every_zero_or_null_keep_only_the_final_one(tiny, straight, tmp_path, off):
    run = tmp_path / "run"
    Trainer(run_config(tiny, run, 3, **{"checkpoint.every": off}), run).run()
    assert [p.name for p in ckpt.list_checkpoints(run)] == [ckpt.list_checkpoints(straight)[-1].name]
    assert same_weights(weights(run, 3), weights(straight, 3))
