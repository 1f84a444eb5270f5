"""A full disk at every place a run writes: the run stops with one ``error:`` line that says the disk is full and how
to go on, leaves every earlier checkpoint intact and no temporary directory, and once space is freed ``--resume``
ends exactly where the uninterrupted run ends.

The disk is a real one: a tmpfs mounted for the test (root only; skipped elsewhere), sized so that it fills at a
different moment of the run each time — the run directory's config, the step logs, TensorBoard's events, each part
of a checkpoint, an evaluation's samples, the summary and the plots. A file-size limit (``ulimit -f``) is covered in a
subprocess. The sweep over sizes runs a handful of sizes by default and every size in steps of a page under
``-m fuzz``.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from typer.testing import CliRunner

from forked_processes import run_grove
from grove.cli import app
from grove.infra import checkpoint as ckpt
from grove.infra.write_failures import DISK_FULL, SIZE_LIMIT, RunWriteError, write_failure_cause
from grove.models.tiny import create_tiny_model_dir
from tmpfs_mounts import can_mount

ROOT = Path(__file__).resolve().parents[1]
TIMING = ("seconds", "per_second")
runner = CliRunner()


needs_mount = pytest.mark.skipif(not can_mount(), reason="mounting a tmpfs needs root (and a kernel that lets us)")


class SmallDisk:
    """A tmpfs of a given size at ``path``; ``grow`` gives it more room (space freed), ``close`` unmounts it."""

    def __init__(self, path: Path, size: int) -> None:
        self.path = path
        path.mkdir(parents=True, exist_ok=True)
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], check=True)

    def grow(self, size: int = 256 * 2**20) -> None:
        subprocess.run(["mount", "-o", f"remount,size={size}", str(self.path)], check=True)

    def close(self) -> None:
        subprocess.run(["umount", "-l", str(self.path)], check=False)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return create_tiny_model_dir(tmp_path_factory.mktemp("full-disk") / "tiny")


def _args(model: Path, out: Path) -> list[str]:
    values = {
        "model.name": model, "output_dir": out, "threads": 1, "seed": 3,
        "task": "{id: arithmetic, train_size: 16, eval_size: 2}", "rollout.max_new_tokens": 5, "train.steps": 3,
        "train.prompts_per_step": 2, "train.completions_per_prompt": 2, "train.micro_batch_size": 4,
        "optim.lr": 1e-2, "checkpoint.every": 1, "checkpoint.keep_last": 1, "eval.every": 2, "eval.max_examples": 2,
        "eval.before_training": True, "logging.progress": False, "logging.tensorboard": True,
    }
    return ["train", "examples/arithmetic.yaml", *(a for k, v in values.items() for a in ("--set", f"{k}={v}"))]


def _metrics(run: Path) -> list[dict]:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if not k.endswith(TIMING)} for r in rows]


def _evals(run: Path) -> list[dict]:
    rows = [json.loads(line) for line in (run / "eval.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if not k.endswith(TIMING)} for r in rows]


@pytest.fixture(scope="module")
def straight(tiny, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("straight") / "run"
    result = runner.invoke(app, _args(tiny, out))
    assert result.exit_code == 0, result.output
    return out


def _check_stop(result, disk: Path) -> None:
    """A run on a full disk ends cleanly: success, or one error saying the disk is full and how to go on."""
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert "Traceback" not in result.output
    if result.exit_code == 0:
        return
    assert result.exit_code == 2, result.output
    message = " ".join(result.output[result.output.index("error:"):].split())
    assert "the disk is full" in message and "free disk space" in message, message
    assert "--resume" in message or "grove plot" in message, message
    for checkpoint in ckpt.list_checkpoints(disk / "run"):  # what exists is whole
        assert ckpt.verify_checkpoint(checkpoint) is None, checkpoint
    assert not list((disk / "run" / "checkpoints").glob(".tmp-*")) if (disk / "run" / "checkpoints").exists() else True


def _run_on_a_small_disk(tiny: Path, straight: Path, where: Path, size: int) -> str:
    """Train on a disk of ``size`` bytes, then free space and resume; the resumed run equals the straight one.
    Returns the message the full disk produced ('' when the run fitted)."""
    disk = SmallDisk(where, size)
    try:
        out = disk.path / "run"
        first = runner.invoke(app, _args(tiny, out))
        _check_stop(first, disk.path)
        disk.grow()
        if first.exit_code != 0:
            resumed = runner.invoke(app, [*_args(tiny, out), "--resume", str(out)])
            assert resumed.exit_code == 0, resumed.output
        assert _metrics(out) == _metrics(straight)
        assert _evals(out) == _evals(straight)
        for k, v in load_file(ckpt.checkpoint_dir(straight, 3) / "model" / "model.safetensors").items():
            assert torch.equal(v, load_file(ckpt.checkpoint_dir(out, 3) / "model" / "model.safetensors")[k])
        return "" if first.exit_code == 0 else " ".join(first.output.split())
    finally:
        disk.close()


# sizes (bytes) at which the disk fills at different moments of the tiny run: while the run directory is set up, in
# the first step's logs, in the first checkpoint's weights, in its trainer state, and late in the run
DEFAULT_SIZES = [8 * 1024, 24 * 1024, 200 * 1024, 700 * 1024, 1400 * 1024, 2400 * 1024]


@needs_mount
@pytest.mark.parametrize("size", DEFAULT_SIZES)
def test_a_full_disk_stops_cleanly_and_resume_reproduces_the_run(tiny, straight, tmp_path, size):
    _run_on_a_small_disk(tiny, straight, tmp_path / "disk", size)


@needs_mount
@pytest.mark.fuzz
def test_a_full_disk_at_every_size(tiny, straight, tmp_path):
    """Every size in steps of 16 KiB up to a run that fits: every write of the run meets a full disk somewhere."""
    messages = {}
    size = 4096
    while True:
        message = _run_on_a_small_disk(tiny, straight, tmp_path / f"disk-{size}", size)
        if not message:
            break
        messages[size] = message
        size += 16 * 1024
    assert len(messages) > 20


# ------------------------------------------------------------------------------------------ what is recognised
@needs_mount
def test_each_library_s_full_disk_error_is_recognised(tmp_path):
    disk = SmallDisk(tmp_path / "disk", 64 * 1024)
    try:
        from safetensors.torch import save_file

        big = {"x": torch.zeros(64 * 1024)}
        for write in (
            lambda p: torch.save(big, p),  # RuntimeError "unexpected pos": no errno, no words
            lambda p: save_file(big, str(p)),  # SafetensorError "os error 28"
            lambda p: p.write_bytes(b"x" * 2**20),  # OSError(ENOSPC)
        ):
            target = disk.path / "file"
            with pytest.raises(Exception) as info:
                write(target)
            assert write_failure_cause(info.value, target) == DISK_FULL, repr(info.value)
            target.unlink(missing_ok=True)
        # torch.save's other cause-less wording: read as a full disk only when the disk is (nearly) full
        stream_error = RuntimeError("[enforce fail at inline_container.cc:604] . basic_ios::clear: iostream error")
        assert write_failure_cause(stream_error, disk.path / "file") == DISK_FULL
        disk.grow()
        assert write_failure_cause(stream_error, disk.path / "file") is None
    finally:
        disk.close()


def test_a_file_size_limit_is_recognised_and_said(tmp_path):
    """``ulimit -f`` (in a subprocess: the limit is per process): torch.save, safetensors and plain writes."""
    script = f"""
import resource, torch
from pathlib import Path
from safetensors.torch import save_file
from grove.infra.write_failures import write_failure_cause
resource.setrlimit(resource.RLIMIT_FSIZE, (100_000, resource.RLIM_INFINITY))
big = {{"x": torch.zeros(100_000)}}
for name, write in [("torch", lambda p: torch.save(big, p)), ("safetensors", lambda p: save_file(big, str(p))),
                    ("plain", lambda p: p.write_bytes(b"x" * 200_000))]:
    path = Path({str(tmp_path)!r}) / name
    try:
        write(path)
        print(name, "wrote")
    except Exception as exc:
        print(name, write_failure_cause(exc, path))
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:3] == [f"{n} {SIZE_LIMIT}" for n in ("torch", "safetensors", "plain")]


def test_a_file_size_limit_during_a_run_is_one_error_and_resume_reproduces(tiny, straight, tmp_path):
    """The whole CLI under ``ulimit -f``: the checkpoint's trainer state (about 0.8 MB) exceeds 600 kB."""
    out = tmp_path / "run"
    args = _args(tiny, out)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    first = run_grove(args, env, ROOT, tmp_path / "logs", file_size_limit=(600_000, -1))
    assert first.returncode == 2, first.stderr[-3000:]
    message = " ".join(first.stderr[first.stderr.index("error:"):].split())
    assert "Traceback" not in first.stderr
    assert "file-size limit" in message and "ulimit -f" in message and f"--resume {out}" in message, message
    assert not list((out / "checkpoints").glob(".tmp-*"))
    resumed = runner.invoke(app, [*args, "--resume", str(out)])
    assert resumed.exit_code == 0, resumed.output
    assert _metrics(out) == _metrics(straight) and _evals(out) == _evals(straight)


# ------------------------------------------------------------------------------------------------ the logs alone
@needs_mount
def test_a_log_append_on_a_full_disk_says_so(tmp_path):
    from grove.infra.run_logs import JsonlLog

    disk = SmallDisk(tmp_path / "disk", 16 * 1024)
    try:
        (disk.path / "filler").write_bytes(b"x" * (12 * 1024))
        log = JsonlLog(disk.path / "metrics.jsonl", "continue with --resume RUN")
        with pytest.raises(RunWriteError) as info:
            for step in range(1000):
                log.append({"step": step, "text": "y" * 200})
        message = str(info.value)
        assert "metrics.jsonl" in message and "the disk is full" in message and "--resume RUN" in message
        assert not message.startswith("[Errno")
    finally:
        disk.close()


def test_grove_plot_skips_lines_that_are_not_records(straight, tmp_path, caplog):
    import shutil

    run = tmp_path / "run"
    shutil.copytree(straight, run)
    with (run / "metrics.jsonl").open("a") as f:
        f.write('{"step": 4, "reward_mean": 0.5, "trunc\n')  # cut by a kill
        f.write("garbage that is not json\n")
        f.write("[1, 2, 3]\n")
        f.write('{"no_step": true}\n')
    with (run / "eval.jsonl").open("a") as f:
        f.write('{"step": 9}\n')  # a record, but not an evaluation
    result = runner.invoke(app, ["plot", str(run)])
    assert result.exit_code == 0, result.output
    assert (run / "plots" / "training.png").is_file()
    assert "skipped line(s) 4, 5, 6, 7" in caplog.text


def test_resource_limit_helper_is_untouched():
    """The tests above change the file-size limit only in subprocesses."""
    assert resource.getrlimit(resource.RLIMIT_FSIZE)[0] == resource.RLIM_INFINITY
