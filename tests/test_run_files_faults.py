"""``grove export`` and ``grove view`` meeting what a user's machine or run holds: an export directory that is
read-only, a disk that fills, a port already taken, text with bidirectional controls, and a config full of the
machine's absolute paths. Each ends in one ``error:`` line (exit 2) or a report that shows what it holds.

The read-only directory and the small disk are real: tmpfs mounts (root only; a read-only directory falls back to
``chmod`` for other users, and the full disk is skipped).
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
from contextlib import contextmanager
from pathlib import Path

import pytest
from typer.testing import CliRunner

from grove.cli import app
from grove.models.tiny import create_tiny_model_dir
from grove.view import build_report
from grove.view.shared_text import BIDI_CONTROLS
from grove.view.site_writer import script_json
from tmpfs_mounts import can_mount

runner = CliRunner()
PROGRESS_BAR = re.compile(r"\|\s*\d+/\d+ \[")  # tqdm's "| 3/20 [" (loading and writing weights)


CAN_MOUNT = can_mount()


@contextmanager
def tmpfs(path: Path, options: str):
    path.mkdir(parents=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)], check=True)
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


@contextmanager
def read_only_dir(path: Path):
    """A directory nothing can be written into: a read-only tmpfs (root), else one without write permission."""
    if CAN_MOUNT:
        with tmpfs(path, "size=64k,ro") as mounted:
            yield mounted
        return
    if os.geteuid() == 0:
        pytest.skip("root ignores permissions and cannot mount a read-only tmpfs here")
    path.mkdir()
    path.chmod(0o555)
    try:
        yield path
    finally:
        path.chmod(0o755)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return create_tiny_model_dir(tmp_path_factory.mktemp("run-files") / "tiny")


def one_error_line(result) -> str:
    """The command's one ``error:`` line (besides transformers' own progress bars), words joined by spaces."""
    lines = [line for line in result.output.splitlines() if line.strip() and not PROGRESS_BAR.search(line)]
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and len(lines) == 1 and lines[0].startswith("error:"), result.output
    return " ".join(lines[0].split())


# ---------------------------------------------------------------------------------------------- grove export


def test_export_into_a_read_only_directory_is_one_error_and_leaves_nothing(tiny, tmp_path):
    with read_only_dir(tmp_path / "ro") as ro:
        out = ro / "models" / "exported"
        message = one_error_line(runner.invoke(app, ["export", str(tiny), str(out)]))
        assert f"could not write the exported model {out}" in message, message
        assert "run the export again" in message
        assert list(ro.iterdir()) == []
    nested = tmp_path / "a" / "b" / "exported"  # parents created for the export are removed when it fails
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "b").write_text("a file where a folder is expected")
    message = one_error_line(runner.invoke(app, ["export", str(tiny), str(nested)]))
    assert f"could not write the exported model {nested}" in message
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == ["b"]


@pytest.mark.skipif(not CAN_MOUNT, reason="mounting a tmpfs needs root (and a kernel that lets us)")
def test_export_onto_a_full_disk_is_one_error_and_leaves_nothing(tiny, tmp_path):
    with tmpfs(tmp_path / "disk", "size=64k") as disk:
        out = disk / "exported"
        message = one_error_line(runner.invoke(app, ["export", str(tiny), str(out)]))
        assert f"could not write the exported model {out}: the disk is full" in message, message
        assert "free disk space, then run the export again" in message
        assert list(disk.iterdir()) == []


# ---------------------------------------------------------------------------------------------- grove view


def hand_made_run(root: Path, config: str = "seed: 0\nenv: null\nsft: null\n", **sample) -> Path:
    run = root / "run"
    run.mkdir(parents=True)
    (run / "config.yaml").write_text(config)
    (run / "metrics.jsonl").write_text(json.dumps({"step": 1, "reward_mean": 0.5}) + "\n")
    row = {"step": 1, "prompt": "What is 2 + 2?", "completion": "4", "finish_reason": "eos",
           "rewards": {"answer_match": 1.0}, **sample}
    (run / "samples.jsonl").write_text(json.dumps(row) + "\n")
    return run


def report_text(out: Path) -> str:
    return "".join(p.read_text(encoding="utf-8") for p in sorted(out.rglob("*")) if p.is_file())


def test_serve_on_a_port_in_use_is_one_error_naming_the_port(tmp_path):
    run = hand_made_run(tmp_path)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = runner.invoke(app, ["view", str(run), "--serve", "--port", str(port)])
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2 and "Traceback" not in result.output and len(lines) == 2, result.output
    assert str(run / "view" / "index.html") in lines  # the report is written before it is served
    (message,) = (" ".join(line.split()) for line in lines if line.startswith("error:"))
    assert message.startswith(f"error: port {port} on 127.0.0.1 is already in use"), message
    assert f"--port {port + 1}" in message and "--port 0" in message


def test_bidirectional_controls_are_shown_not_obeyed(tmp_path):
    """A completion whose right-to-left override would show its end reversed ("5 = 2 + 2"), with an isolate, and a
    reward name holding an override: every control reaches the report as a visible [U+XXXX]."""
    sneaky = "the answer is\u202e 2 + 2 = 5\u202c, \u2067really\u2069"
    run = hand_made_run(tmp_path, completion=sneaky, rewards={"len\u202egth": 1.0})
    out = tmp_path / "view"
    result = runner.invoke(app, ["view", str(run), "--out", str(out)])
    assert result.exit_code == 0, result.output
    text = report_text(out)
    assert not BIDI_CONTROLS.search(text)
    (page,) = (out / "data" / "pages").glob("*.js")
    (sample,) = script_json(page.read_text(encoding="utf-8"))["items"]
    assert sample["completion"] == "the answer is[U+202E] 2 + 2 = 5[U+202C], [U+2067]really[U+2069]"
    assert list(sample["rewards"]) == ["len[U+202E]gth"]


CONFIG_WITH_PATHS = """model:
  name: /home/ann/models/qwen-0.5b
output_dir: /home/ann/runs/secret-project/run
task:
  id: jsonl
  params: {train: '/home/ann/data sets/train.jsonl', eval: /home/ann/data/eval.jsonl}
rollout:
  system_prompt: Answer with a/b, see https://example.org/a/b
"""


def test_a_config_with_absolute_paths_is_said_and_hide_paths_cuts_them(tmp_path):
    run = hand_made_run(tmp_path, CONFIG_WITH_PATHS)
    shown = runner.invoke(app, ["view", str(run), "--out", str(tmp_path / "shown")])
    assert shown.exit_code == 0, shown.output
    data = script_json((tmp_path / "shown" / "data" / "run.js").read_text(encoding="utf-8"))
    assert data["config_paths"] == 4 and data["paths_hidden"] is False and "/home/ann/runs" in data["config_text"]
    assert "grove view --hide-paths" in (tmp_path / "shown" / "assets" / "overview.js").read_text()

    shared = runner.invoke(app, ["view", str(run), "--out", str(tmp_path / "shared"), "--hide-paths"])
    assert shared.exit_code == 0, shared.output
    text = report_text(tmp_path / "shared")
    assert "/home/ann" not in text and str(tmp_path) not in text
    data = script_json((tmp_path / "shared" / "data" / "run.js").read_text(encoding="utf-8"))
    assert data["paths_hidden"] is True and data["run"]["path"] == "run"
    config = data["config_text"]
    assert "name: …/qwen-0.5b" in config and "output_dir: …/run" in config
    assert "train: '…/train.jsonl'" in config and "eval: …/eval.jsonl}" in config
    assert "Answer with a/b, see https://example.org/a/b" in config  # not a path: left as it is


def test_hide_paths_cuts_the_paths_of_a_compared_run(tmp_path):
    run = hand_made_run(tmp_path / "a")
    other = hand_made_run(tmp_path / "b")
    out = build_report(run, tmp_path / "view", compare_dir=other.resolve(), hide_paths=True).parent
    data = script_json((out / "data" / "run.js").read_text(encoding="utf-8"))
    assert str(tmp_path) not in report_text(out)
    assert [r["path"] for r in data["compare"]["runs"]] == ["…/run", "…/run"]
    assert "no held-out samples" in data["compare"]["error"] and "…/run" in data["compare"]["error"]


def test_browser_shows_the_paths_note_and_visible_controls(tmp_path):
    from tests.test_view import browser_or_skip, javascript_errors, open_report

    run = hand_made_run(tmp_path, CONFIG_WITH_PATHS, completion="x\u202ey")
    browser = browser_or_skip()
    try:
        open_report(browser, build_report(run, tmp_path / "shown"))
        note = browser.find_element("css selector", "#overview .paths-note")
        assert note.is_displayed() and "4 absolute path(s)" in note.text and "--hide-paths" in note.text
        assert "x[U+202E]y" in browser.find_element("tag name", "body").text
        assert javascript_errors(browser) == []
        open_report(browser, build_report(run, tmp_path / "shared", hide_paths=True))
        assert not browser.find_elements("css selector", "#overview .paths-note")
        assert "cut to their last part" in browser.find_element("id", "overview").text
        assert javascript_errors(browser) == []
    finally:
        browser.quit()
