"""The ``openenv`` environment against real OpenEnv server processes on 127.0.0.1.

The server is ``examples/openenv_envs/counter_server.py``: an OpenEnv ``Environment`` served by openenv's own
``create_fastapi_app``. grove starts it (``server.app`` with uvicorn, or ``server.command``) or reaches one the test
started (``url``); a server that never listens, exits, is full or dies mid-episode fails only what it must.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tests.test_experience_environments import env_args
from tests.test_train_e2e import metric_rows, run_cli

from grove.envs import build_environment
from grove.hubs.openenv.openenv_servers import OpenEnvParams, OpenEnvServerError, OpenEnvServerSpec
from grove.resolve import load_config

pytest.importorskip("openenv")
pytest.importorskip("websockets")

REPO = Path(__file__).resolve().parents[1]
SERVER_DIR = REPO / "examples" / "openenv_envs"
APP = {"app": "counter_server:app", "app_dir": str(SERVER_DIR)}
COUNTER = {"action_field": "command", "observation_field": "text", "admissible_field": "legal_actions",
           "won_if": "solved"}


def counter_suite(**params):
    return build_environment("openenv", {"server": APP, **COUNTER, **params})


@pytest.fixture(scope="module")
def counter_url():
    """A counter server this test module starts itself (``python counter_server.py --port N``)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = subprocess.Popen([sys.executable, str(SERVER_DIR / "counter_server.py"), "--port", str(port)])
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert process.poll() is None and time.monotonic() < deadline, "the counter server did not start"
                time.sleep(0.1)
        yield url
    finally:
        process.terminate()
        process.wait(10)


def test_a_started_server_plays_episodes_with_anchors_and_stops_with_the_suite():
    suite = counter_suite(anchor_field="value", num_train_tasks=3, num_eval_tasks=2)
    try:
        assert list(suite.train_tasks) == [0, 1, 2] and list(suite.eval_tasks) == [100000, 100001]
        a, b = suite.make(), suite.make()
        first = a.reset(1, seed=7)  # task 1: target 1 + 1 % 3 = 2
        assert first.text == "The counter shows 0. Make it show 2."
        assert first.anchor == 0 and first.admissible_actions == ("inc", "dec")
        assert b.reset(1, seed=9).anchor == 0  # the same state in another copy (its own session): the same anchor
        assert a.step("inc").observation.anchor == 1
        back = a.step("dec")
        assert back.observation.anchor == 0 and back.reward == 0.0 and not back.done
        assert not b.step("inc").done
        won = b.step("inc")
        assert won.done and won.reward == 1.0 and won.info == {"won": True, "truncated": False}
        with pytest.raises(RuntimeError, match="after the episode ended"):
            b.step("inc")
        (server,) = suite.make.processes
    finally:
        suite.make.close()
    assert server.process.poll() is not None  # stopped with the suite
    assert not server.log.exists()
    with pytest.raises(OpenEnvServerError, match="stopped"):
        a.reset(0, 0)


def test_url_mode_reaches_a_server_the_test_started(counter_url):
    suite = build_environment("openenv", {"url": counter_url, "action_field": "command", "won_if": 1.0,
                                          "max_steps": 2})
    env = suite.make()
    first = env.reset(0, 0)  # no observation_field: the whole observation as JSON; no anchor_field: singletons
    assert json.loads(first.text) == {"text": "The counter shows 0. Make it show 1.", "value": 0, "target": 1,
                                      "legal_actions": ["inc", "dec"], "solved": False}
    assert first.admissible_actions is None
    stay = env.step("wait")
    assert stay.observation.text == first.text and stay.observation.anchor != first.anchor
    truncated = env.step("wait")
    assert truncated.done and truncated.info == {"won": False, "truncated": True}
    assert env.reset(0, 0).anchor not in {first.anchor, stay.observation.anchor}
    assert env.step("inc").info["won"]  # the final reward reaches won_if: 1.0
    suite.make.close()  # a url's server is not grove's to stop
    socket.create_connection(("127.0.0.1", int(counter_url.rsplit(":", 1)[1])), timeout=1).close()


def test_a_state_field_anchors_and_wrong_fields_are_named_at_start(counter_url):
    suite = build_environment("openenv", {"url": counter_url, **COUNTER, "anchor_field": "state.value"})
    env = suite.make()
    assert env.reset(2, 0).anchor == 0 and env.step("dec").observation.anchor == -1
    with pytest.raises(ValueError, match="action_field 'message' is not a field of the server's action") as info:
        build_environment("openenv", {"url": counter_url, "observation_field": "txt"})
    assert "observation_field 'txt'" in str(info.value) and "its fields: legal_actions, solved, target, text" in str(
        info.value)
    with pytest.raises(ValueError, match="exactly one of url"):
        build_environment("openenv", {"url": counter_url, "server": APP})


def test_the_example_config_loads_and_the_server_params_are_checked():
    cfg = load_config(REPO / "examples" / "openenv_gigpo.yaml")
    assert cfg.env.id == "openenv" and cfg.algorithm.advantage.id == "gigpo"
    assert OpenEnvParams.model_validate(cfg.env.params).server.app == "counter_server:app"
    with pytest.raises(ValueError, match="must contain '{port}'"):
        OpenEnvServerSpec(command=["serve", "--port", "8000"])
    with pytest.raises(ValueError, match="exactly one of server.app and server.command"):
        OpenEnvServerSpec(app="m:app", command=["serve", "{port}"])


def test_a_server_that_never_listens_fails_after_the_startup_timeout_with_its_output():
    never = [sys.executable, "-c", "import time; print('warming up', flush=True); time.sleep(60)", "{port}"]
    start = time.monotonic()
    with pytest.raises(OpenEnvServerError, match=r"startup_timeout_s=1 s") as info:
        build_environment("openenv", {"server": {"command": never}, "startup_timeout_s": 1.0})
    assert time.monotonic() - start < 10
    assert "did not answer" in str(info.value) and "warming up" in str(info.value)
    exits = [sys.executable, "-c", "import sys; print('no app here'); sys.exit(4)", "{port}"]
    with pytest.raises(OpenEnvServerError, match="exited with code 4") as info:
        build_environment("openenv", {"server": {"command": exits}})
    assert "no app here" in str(info.value)


def test_a_single_session_server_gets_a_process_per_copy_up_to_max_processes():
    suite = build_environment("openenv", {
        "server": {**APP, "app": "counter_server:single_session_app", "max_processes": 2}, **COUNTER,
    })
    try:
        a, b, c = suite.make(), suite.make(), suite.make()
        a.reset(0, 0)  # task 0: target 1
        b.reset(0, 0)
        assert len(suite.make.processes) == 2
        with pytest.raises(OpenEnvServerError, match="server.max_processes") as info:
            c.reset(0, 0)
        assert info.value.code == "CAPACITY_REACHED"
        assert a.step("inc").done  # the episode's end frees its session
        assert c.reset(0, 0).anchor is not None and len(suite.make.processes) == 2
    finally:
        suite.make.close()


def test_a_server_killed_mid_episode_fails_that_step_and_is_replaced(caplog):
    suite = counter_suite(anchor_field="value")
    try:
        env = suite.make()
        env.reset(2, 0)
        (server,) = suite.make.processes
        os.killpg(server.process.pid, signal.SIGKILL)
        with pytest.raises(OpenEnvServerError, match="exited with code -9"):
            env.step("inc")
        with caplog.at_level(logging.WARNING, logger="grove.hubs.openenv.openenv_servers"):
            assert suite.make().reset(2, 0).anchor == 0
        assert "starting a new one" in caplog.text
        (replacement,) = suite.make.processes
        assert replacement.url != server.url
    finally:
        suite.make.close()


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    from grove.models.tiny import create_tiny_model_dir

    return create_tiny_model_dir(tmp_path_factory.mktemp("tiny") / "model", seed=0)


def openenv_run(tiny_model: Path, out: Path, **server) -> list[dict]:
    """Two GiGPO steps (2 tasks x 3 copies, up to 4 turns) on the counter server; the metric rows."""
    params = {"server": {**APP, **server}, **COUNTER, "anchor_field": "value", "num_train_tasks": 4}
    env = {"id": "openenv", "params": params, "max_turns": 4, "action_parser": {"id": "raw"}}
    result = run_cli(["train", *env_args(tiny_model, out, **{"env": json.dumps(env), "train.steps": 2})])
    assert result.exit_code == 0, result.output
    return metric_rows(out)


def test_two_gigpo_steps_on_a_tiny_model(tiny_model, tmp_path):
    rows = openenv_run(tiny_model, tmp_path / "run")
    assert [r["step"] for r in rows] == [1, 2]
    assert all(r["environment_errors"] == 0 and r["anchor_groups"] >= 2 for r in rows)
    assert all(r["anchor_steps_in_shared_groups"] > 0 for r in rows)  # random actions leave the counter: shared


def test_a_server_that_dies_mid_step_ends_those_trajectories_not_the_run(tiny_model, tmp_path):
    crash = tmp_path / "crash-at"
    crash.write_text("3")  # the server exits at its 3rd step: in the first turn of the first training step
    rows = openenv_run(tiny_model, tmp_path / "run", env={"COUNTER_CRASH_FILE": str(crash)})
    assert [r["step"] for r in rows] == [1, 2] and not crash.exists()
    assert rows[0]["environment_errors/raised"] > 0 and rows[1]["environment_errors"] == 0
    records = "\n".join(p.read_text() for p in (tmp_path / "run").rglob("*.jsonl"))
    assert "exited with code 3" in records and "COUNTER_CRASH_FILE" in records


def test_grove_train_says_in_one_line_that_the_server_did_not_start(tiny_model, tmp_path):
    from typer.testing import CliRunner

    from grove.cli import app

    exits = [sys.executable, "-c", "import sys; print('no app here'); sys.exit(4)", "{port}"]
    config = tmp_path / "openenv.yaml"
    config.write_text(f"env: {{id: openenv, params: {{server: {{command: {exits!r}}}}}}}\noutput_dir: {tmp_path / 'run'}\n"
                      f"model: {{name: {tiny_model}}}\nlogging: {{progress: false}}\n")
    result = CliRunner().invoke(app, ["train", str(config)])
    assert result.exit_code == 2, result.output
    assert "error:" in result.output and "exited with code 4" in result.output and "Traceback" not in result.output
