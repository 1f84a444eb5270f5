"""Training on a CPU another process is using (grove.infra.shared_cpu): with ``threads: null`` torch's threads
follow the cores the other processes leave free, step by step; with ``threads`` fixed the run says once why its
steps are slow and which setting helps."""

from __future__ import annotations

import json
import logging
import multiprocessing
from pathlib import Path

import pytest
import torch

import grove.infra.shared_cpu as shared_cpu
from grove.infra.shared_cpu import CoreShare, busy_elsewhere, usable_cores


def test_busy_elsewhere_is_the_machine_s_busy_time_less_this_process_s() -> None:
    assert busy_elsewhere(system_busy=3.0, own=1.0, wall=2.0) == 1.0  # one core busy elsewhere for 2 s
    assert busy_elsewhere(system_busy=1.0, own=1.2, wall=1.0) == 0.0  # rounding never goes below 0
    assert busy_elsewhere(system_busy=1.0, own=0.0, wall=0.0) == 0.0


@pytest.fixture
def machine(monkeypatch):
    """A 4-core machine whose busy seconds and this process's CPU seconds the test sets."""
    clock = {"busy": 0.0, "own": 0.0, "wall": 0.0}
    monkeypatch.setattr(shared_cpu, "usable_cores", lambda: 4)
    monkeypatch.setattr(shared_cpu, "_system_busy_seconds", lambda: clock["busy"])
    monkeypatch.setattr(shared_cpu, "_own_seconds", lambda: clock["own"])
    monkeypatch.setattr(shared_cpu.time, "monotonic", lambda: clock["wall"])
    threads = torch.get_num_threads()
    torch.set_num_threads(4)
    yield clock
    torch.set_num_threads(threads)


def _step(clock, seconds: float, own_cores: float, other_cores: float) -> None:
    clock["wall"] += seconds
    clock["own"] += own_cores * seconds
    clock["busy"] += (own_cores + other_cores) * seconds


def test_threads_follow_the_free_cores_and_come_back(machine, caplog) -> None:
    share = CoreShare(follow=True)
    with caplog.at_level(logging.WARNING, logger="grove.infra.shared_cpu"):
        assert share.before_step(1) == 4  # nothing measured yet
        _step(machine, 2.0, own_cores=4, other_cores=0)
        assert share.before_step(2) == 4
        _step(machine, 2.0, own_cores=2, other_cores=1.8)  # two cores kept busy elsewhere
        assert share.before_step(3) == 2 and torch.get_num_threads() == 2
        _step(machine, 2.0, own_cores=2, other_cores=0.4)  # less than half a core: not taken
        assert share.before_step(4) == 4 and torch.get_num_threads() == 4
        _step(machine, 2.0, own_cores=1, other_cores=9.0)  # more than the machine: at least one thread
        assert share.before_step(5) == 1
    assert caplog.text.count("running on 2 thread(s)") == 1 and "during step 2" in caplog.text


def test_a_fixed_thread_count_is_kept_and_the_cause_named_once(machine, caplog) -> None:
    share = CoreShare(follow=False)
    with caplog.at_level(logging.WARNING, logger="grove.infra.shared_cpu"):
        share.before_step(1)
        for step in (2, 3):
            _step(machine, 1.0, own_cores=4, other_cores=2.0)
            assert share.before_step(step) == 4 and torch.get_num_threads() == 4
    assert caplog.text.count("kept about 2.0 of the 4 cores busy") == 1 and "set threads: null" in caplog.text
    off = CoreShare(follow=True, watch=False)  # a run on a GPU measures nothing
    _step(machine, 1.0, own_cores=1, other_cores=3.0)
    assert off.before_step(1) == off.before_step(2) == 4


def _busy() -> None:
    while True:
        pass


@pytest.mark.skipif(not Path("/proc/stat").exists() or usable_cores() < 2, reason="needs /proc/stat and 2 cores")
def test_a_run_beside_a_busy_process_drops_to_the_free_cores(tmp_path, monkeypatch) -> None:
    """Through ``grove train`` with ``threads: null``: a process keeping a core busy beside the run; from the second
    step on (the first is measured) the run uses fewer threads than it started with, logged as ``cpu_threads``."""
    from typer.testing import CliRunner

    from grove.cli import app
    from grove.models.tiny import create_tiny_model_dir

    tiny = create_tiny_model_dir(tmp_path / "tiny")
    values = {"model.name": tiny, "output_dir": tmp_path / "run", "threads": "null", "train.steps": 3,
              "rollout.max_new_tokens": 8, "eval.before_training": False, "eval.max_examples": 2,
              "logging.plots": False, "logging.tensorboard": False, "checkpoint.every": 3}
    args = ["train", "examples/arithmetic.yaml", *[p for k, v in values.items() for p in ("--set", f"{k}={v}")]]
    started = torch.get_num_threads()
    torch.set_num_threads(usable_cores())
    hog = multiprocessing.get_context("fork").Process(target=_busy, daemon=True)
    hog.start()
    try:
        result = CliRunner().invoke(app, args)
    finally:
        hog.terminate()
        hog.join()
        torch.set_num_threads(started)
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    threads = [r["cpu_threads"] for r in rows if "cpu_threads" in r]
    assert threads[0] == usable_cores() and threads[-1] < threads[0], threads
