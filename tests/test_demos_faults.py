"""``grove demos`` against environments and oracles that hang, raise, give up or never end: the rollout's
``env.step_timeout_s`` and ``env.max_turns``, progress lines, one ``error:`` line (exit 2) naming the call and the
episode, nothing written when no episode is kept, and a Ctrl-C that says how far it came (exit 130).

The environment is a line defined here (referenced by import path, like a user's): positions 0..length, won at
``length``; its oracle says ``right``. ``fault`` makes it misbehave on odd task ids (``all_tasks``: on every one).
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from grove.cli import app
from grove.config import dump_config
from grove.envs.base import EnvironmentSuite, Observation, Transition
from grove.models.tiny import create_tiny_model_dir
from grove.resolve import load_config

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
MODULE = __name__.rsplit(".", 1)[-1]  # importable by this name once TESTS is on sys.path


class Line:
    def __init__(self, fault: str, all_tasks: bool, length: int, hang_s: float) -> None:
        self.fault, self.all_tasks, self.length, self.hang_s = fault, all_tasks, length, hang_s
        self.position = self.task_id = 0

    def _bad(self) -> bool:
        return self.all_tasks or self.task_id % 2 == 1

    def _observation(self) -> Observation:
        return Observation(f"at {self.position} of {self.length}", self.position, ("left", "right"))

    def reset(self, task_id: int, seed: int) -> Observation:
        self.task_id, self.position = task_id, 0
        return self._observation()

    def step(self, action: str) -> Transition:
        if self._bad() and self.fault == "step_hangs":
            time.sleep(self.hang_s)
        if self._bad() and self.fault == "endless":
            time.sleep(self.hang_s)
            return Transition(self._observation(), 0.0, False, {})
        self.position += 1 if action == "right" else -1
        won = self.position == self.length
        return Transition(self._observation(), float(won), won, {"won": won})

    def oracle_action(self) -> str | None:
        if self._bad() and self.fault == "oracle_hangs":
            time.sleep(self.hang_s)
        if self._bad() and self.fault == "oracle_raises" and self.position == 1:
            return {}["plan"]
        if self._bad() and self.fault == "oracle_gives_up":
            return None
        return "right"


def line(params: dict) -> EnvironmentSuite:
    fault, all_tasks = params.get("fault", "none"), bool(params.get("all_tasks", False))
    length, hang_s = int(params.get("length", 2)), float(params.get("hang_s", 5.0))
    return EnvironmentSuite(
        name="line", make=lambda: Line(fault, all_tasks, length, hang_s), train_tasks=list(range(6)),
        eval_tasks=[100], instructions="Walk right.",
    )


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return create_tiny_model_dir(tmp_path_factory.mktemp("demos-faults") / "tiny", max_position_embeddings=2048)


@pytest.fixture(autouse=True)
def importable(monkeypatch):
    monkeypatch.syspath_prepend(str(TESTS))


def config(path: Path, tiny: Path, params: str, *, max_turns: int = 4, timeout: float | None = None) -> Path:
    limit = f", step_timeout_s: {timeout}" if timeout is not None else ""
    env = f"env={{id: '{MODULE}:line', params: {params}, max_turns: {max_turns}, action_parser: {{id: raw}}{limit}}}"
    path.write_text(dump_config(load_config(None, [f"model.name={tiny}", env])))
    return path


def demos(*args: str):
    return CliRunner().invoke(app, ["demos", *map(str, args)])


def error_line(result) -> str:
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert "Traceback" not in result.output and lines and lines[-1].startswith("error:"), result.output
    return lines[-1]


def no_files_beside(out: Path) -> None:
    assert not out.exists() and not [p for p in out.parent.iterdir() if p.name.startswith(f".{out.name}.")]


def test_a_hanging_step_or_oracle_ends_its_episode_at_the_step_timeout(tiny, tmp_path):
    for fault in ("step_hangs", "oracle_hangs"):
        out = tmp_path / f"{fault}.jsonl"
        cfg = config(tmp_path / f"{fault}.yaml", tiny, f"{{fault: {fault}, hang_s: 30}}", timeout=0.3)
        started = time.monotonic()
        result = demos(cfg, "--episodes", 4, "--out", out)
        assert result.exit_code == 0, result.output
        assert time.monotonic() - started < 20  # 2 hung episodes cost a timeout each, not 30 s
        text = " ".join(result.output.split())
        what = "step" if fault == "step_hangs" else "oracle_action"
        assert "4 episodes of 'line': 2 won; 2 written" in text, text
        assert "2 episodes were left out on a timeout" in text
        assert f"environment 'line' {what} did not return within 0.3 s (env.step_timeout_s) in episode 2" in text
        assert {row["task_id"] % 2 for row in map(json.loads, out.read_text().splitlines())} == {0}


def test_every_episode_timing_out_is_an_error_and_writes_nothing(tiny, tmp_path):
    out = tmp_path / "d.jsonl"
    cfg = config(tmp_path / "c.yaml", tiny, "{fault: oracle_hangs, all_tasks: true, hang_s: 30}", timeout=0.2)
    result = demos(cfg, "--episodes", 2, "--out", out)
    assert result.exit_code == 2, result.output
    message = error_line(result)
    assert "not one of the 2 episodes of 'line' was won" in message and "oracle_action did not return" in message
    assert "raise env.step_timeout_s" in message
    no_files_beside(out)


def test_an_oracle_that_gives_up_at_once_is_an_error_not_an_empty_file(tiny, tmp_path):
    out = tmp_path / "d.jsonl"
    cfg = config(tmp_path / "c.yaml", tiny, "{fault: oracle_gives_up, all_tasks: true}")
    for keep in ("won", "all"):
        result = demos(cfg, "--episodes", 3, "--out", out, "--keep", keep)
        assert result.exit_code == 2, result.output
        message = error_line(result)
        assert "3 ended at once: oracle_action() returned None right after reset" in message, message
        assert "nothing was written" in message and "oracle_action() return the first command" in message
        no_files_beside(out)


def test_no_episode_won_says_how_they_ended_and_keeps_the_old_file(tiny, tmp_path):
    out = tmp_path / "d.jsonl"
    out.write_text("earlier\n")
    cfg = config(tmp_path / "c.yaml", tiny, "{length: 5}", max_turns=2)  # 5 moves needed, 2 allowed
    result = demos(cfg, "--episodes", 3, "--out", out)
    assert result.exit_code == 2, result.output
    message = error_line(result)
    assert "3 reached env.max_turns (2) without a win" in message, message
    assert "raise env.max_turns" in message and "--keep all" in message
    assert out.read_text() == "earlier\n"
    assert demos(cfg, "--episodes", 3, "--out", out, "--keep", "all").exit_code == 0  # the way out it names


def test_an_oracle_that_raises_is_one_error_line_naming_the_episode(tiny, tmp_path):
    out = tmp_path / "d.jsonl"
    cfg = config(tmp_path / "c.yaml", tiny, "{fault: oracle_raises}")
    result = demos(cfg, "--episodes", 4, "--out", out)
    assert result.exit_code == 2, result.output
    message = " ".join(error_line(result).split())
    assert "environment 'line' oracle_action failed in episode 2 (task" in message and "turn 2" in message, message
    assert "KeyError: 'plan'" in message and f"{Path(__file__).name}:" in message and "in oracle_action" in message
    no_files_beside(out)


def test_progress_lines_while_an_environment_never_ends(tiny, tmp_path):
    out = tmp_path / "d.jsonl"
    cfg = config(tmp_path / "c.yaml", tiny, "{fault: endless, all_tasks: true, hang_s: 0.05}", max_turns=12)
    result = demos(cfg, "--episodes", 2, "--out", out, "--keep", "all", "--progress-every", 0.1)
    assert result.exit_code == 0, result.output
    progress = [line for line in result.output.splitlines() if line.startswith("demos: ")]
    assert len(progress) >= 3, result.output
    assert any("of 2 episodes played" in line and "at turn" in line for line in progress), progress
    quiet = demos(cfg, "--episodes", 1, "--out", out, "--keep", "all", "--progress-every", 0)
    assert quiet.exit_code == 0 and "demos: " not in quiet.output


def test_ctrl_c_says_what_was_written_and_exits_130(tiny, tmp_path):
    from forked_processes import start_grove

    out, log = tmp_path / "d.jsonl", tmp_path / "demos.log"
    log.write_text("")
    cfg = config(tmp_path / "c.yaml", tiny, "{fault: endless, all_tasks: true, hang_s: 0.05}", max_turns=1000)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(TESTS)])}
    proc = start_grove(["demos", str(cfg), "--out", str(out), "--episodes", "3", "--progress-every", "0.2"],
                       env, ROOT, log)
    deadline = time.monotonic() + 120
    while "at turn" not in log.read_text():  # its progress lines show it is in an episode
        assert time.monotonic() < deadline and proc.poll() is None, log.read_text()[-3000:]
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=60) == 128 + signal.SIGINT, log.read_text()[-3000:]
    text = log.read_text()
    lines = [line for line in text.splitlines() if line.strip() and not line.startswith("demos: ")]
    assert "Traceback" not in text and len(lines) == 1, text[-3000:]
    assert lines[0].startswith("error: interrupted (Ctrl-C) after 0 of 3 episodes"), lines
    assert f"nothing was written: {out} was not created" in " ".join(text.split())
    no_files_beside(out)
