"""A checkpoint write that fails on a real full disk (a tmpfs remounted to leave a few pages free, so that it fills
during the weights, during ``trainer_state.pt`` or during the manifest) or at the process's file-size limit
(``RLIMIT_FSIZE`` in a subprocess), and one interrupted by a second Ctrl-C: ``grove train`` ends with one
``error:`` line saying what failed, why and how to go on, the temporary directory is gone, the earlier checkpoint
is untouched, and once there is room ``--resume`` reproduces the uninterrupted run."""

from __future__ import annotations

import os
import resource
import signal
import subprocess
from pathlib import Path

import pytest
from tests.tiny_runs import (
    TESTS,
    config_file,
    finished_run,
    records,
    run_config,
    same_weights,
    snapshot,
    weights,
)
from typer.testing import CliRunner

import grove.training.trainer as trainer_module
from forked_processes import run_grove
from grove.cli import app
from grove.infra import checkpoint as ckpt
from grove.models.tiny import create_tiny_model_dir
from grove.training.trainer import Trainer
from grove.user_code import ImmediateStop

PAGE = 4096


@pytest.fixture(autouse=True)
def _user_rewards(monkeypatch):
    monkeypatch.syspath_prepend(str(TESTS))


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return create_tiny_model_dir(tmp_path_factory.mktemp("write-failures") / "tiny")


@pytest.fixture(scope="module")
def straight(tiny, tmp_path_factory):
    """The uninterrupted 3-step run; its step-2 checkpoint tells how many pages each part of a checkpoint takes."""
    return finished_run(tiny, tmp_path_factory.mktemp("straight") / "run")


def _mount(directory: Path, size: int) -> None:
    result = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(directory)], capture_output=True, text=True
    )
    if result.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({result.stderr.strip() or result.returncode}): needs root")


def _remount(directory: Path, size: int) -> None:
    subprocess.run(["mount", "-o", f"remount,size={size}", str(directory)], check=True)


@pytest.fixture
def disk(tmp_path):
    """A 64 MiB tmpfs, unmounted afterwards."""
    mount_point = tmp_path / "disk"
    mount_point.mkdir()
    _mount(mount_point, 64 * 2**20)
    yield mount_point
    if subprocess.run(["umount", str(mount_point)], capture_output=True).returncode != 0:
        subprocess.run(["umount", "--lazy", str(mount_point)], check=False)  # never leave a mount behind


def _open_files_under(directory: Path) -> list[str]:
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # closed meanwhile (the directory listing's own descriptor)
            continue
        if target.startswith(str(directory)):
            found.append(target)
    return found


def _pages(path: Path) -> int:
    return -(-path.stat().st_size // PAGE)


def _leave_free(mount_point: Path, pages: int) -> None:
    """Shrink the tmpfs to what it holds plus ``pages`` free pages."""
    stats = os.statvfs(mount_point)
    _remount(mount_point, (stats.f_blocks - stats.f_bfree + pages) * PAGE)


def _free_pages(reference: Path, part: str) -> int:
    """Free pages with which the step-2 checkpoint fills the disk while writing ``part``."""
    model = sum(_pages(p) for p in (reference / "model").iterdir())
    state = _pages(reference / ckpt.TRAINER_STATE)
    return {"weights": 16, "trainer state": model + 16, "manifest": model + state}[part]


@pytest.mark.parametrize("part", ["weights", "trainer state", "manifest"])
def test_a_disk_that_fills_during_a_checkpoint(tiny, straight, disk, monkeypatch, part):
    run = disk / "run"
    free = _free_pages(ckpt.checkpoint_dir(straight, 2), part)
    real_save = trainer_module.save_run_checkpoint

    def fill_before_step_2(run_dir, step, state, keep_last):
        if step == 2:
            _leave_free(disk, free)
        return real_save(run_dir, step, state, keep_last)

    monkeypatch.setattr(trainer_module, "save_run_checkpoint", fill_before_step_2)
    config = config_file(disk.parent / "config.yaml", tiny, run, 3)
    result = CliRunner().invoke(app, ["train", str(config)])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip() and not line.startswith("step ")]
    assert len(lines) == 1 and lines[0].startswith("error:") and "Traceback" not in result.output, result.output
    text = " ".join(result.output.split())
    named = {"weights": "model weights", "trainer state": "trainer_state.pt", "manifest": "manifest.json"}[part]
    assert "checkpoint step-000002" in text and named in text and "the disk is full" in text, text
    assert f"free disk space, then continue with --resume {run}" in text and "step-000001 is intact" in text
    assert [c.name for c in ckpt.list_checkpoints(run)] == ["step-000001"]
    assert not [p.name for p in (run / "checkpoints").iterdir() if p.name.startswith(".")]
    assert not _open_files_under(disk)  # the half-written file's space is free again (none held open)
    step1 = snapshot(ckpt.checkpoint_dir(run, 1))
    assert ckpt.checkpoint_problem(ckpt.checkpoint_dir(run, 1)) is None

    _remount(disk, 64 * 2**20)  # space freed: the run goes on from step 1 and ends as if never stopped
    monkeypatch.setattr(trainer_module, "save_run_checkpoint", real_save)
    result = CliRunner().invoke(app, ["train", str(config), "--resume", str(run)])
    assert result.exit_code == 0, result.output
    assert records(run / "metrics.jsonl") == records(straight / "metrics.jsonl")
    assert records(run / "eval.jsonl") == records(straight / "eval.jsonl")
    assert same_weights(weights(run, 3), weights(straight, 3))
    assert step1 and snapshot(ckpt.checkpoint_dir(run, 1)) == step1


@pytest.mark.parametrize(("limit", "named"), [(300_000, "model weights"), (600_000, "trainer_state.pt")])
def test_the_file_size_limit_during_a_checkpoint(tiny, straight, tmp_path, limit, named):
    """``ulimit -f`` below the weights' size (safetensors fails) or the trainer state's (torch.save fails)."""
    run = tmp_path / "run"
    config = config_file(tmp_path / "config.yaml", tiny, run, 3)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(TESTS)}
    proc = run_grove(["train", str(config)], env, Path.cwd(), tmp_path / "logs", file_size_limit=(limit, limit))
    assert proc.returncode == 2, proc.stderr[-3000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert "Traceback" not in proc.stderr and len(errors) == 1, proc.stderr[-3000:]
    text = " ".join(proc.stderr.split())
    assert "checkpoint step-000001" in text and named in text and "file-size limit" in text, text
    assert f"raise the file-size limit (ulimit -f), then continue with --resume {run}" in text
    assert "no earlier checkpoint exists" in text
    assert not ckpt.list_checkpoints(run) and not list((run / "checkpoints").iterdir())
    assert resource.getrlimit(resource.RLIMIT_FSIZE)[0] == resource.RLIM_INFINITY  # this process: no limit
    result = CliRunner().invoke(app, ["train", str(config), "--resume", str(run)])  # starts over: no checkpoint
    assert result.exit_code == 0, result.output
    assert records(run / "metrics.jsonl") == records(straight / "metrics.jsonl")
    assert same_weights(weights(run, 3), weights(straight, 3))


def test_a_second_ctrl_c_during_a_checkpoint_write_leaves_no_temporary_directory(tiny, tmp_path):
    """The first Ctrl-C asks for a stop after the step; a second one, arriving while the weights are written,
    stops at once: the half-written checkpoint is removed and the previous one stays as it was."""
    run = tmp_path / "run"
    trainer = Trainer(run_config(tiny, run, 3), run)
    write_model = trainer.models.write_model
    step1: dict[str, str] = {}

    def write_then_interrupt(state):
        write = write_model(state)

        def write_and_press_ctrl_c_twice(directory):
            write(directory)
            if trainer.step == 2:
                step1.update(snapshot(ckpt.checkpoint_dir(run, 1)))
                os.kill(os.getpid(), signal.SIGINT)
                os.kill(os.getpid(), signal.SIGINT)

        return write_and_press_ctrl_c_twice

    trainer.models.write_model = write_then_interrupt
    with pytest.raises(ImmediateStop):
        trainer.run()
    assert [p.name for p in (run / "checkpoints").iterdir()] == ["step-000001"]
    assert step1 and snapshot(ckpt.checkpoint_dir(run, 1)) == step1
