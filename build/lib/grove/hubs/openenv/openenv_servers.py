"""OpenEnv environment servers (Meta's ``openenv-core``) as grove environments: ``openenv``.

A running server (``url``) or one grove starts on 127.0.0.1 (``server``), spoken to in OpenEnv's own protocol
(openenv-core 0.3.0's ``EnvClient``, spoken here: ``openenv`` itself is not imported): one WebSocket session
(``/ws``) per copy, as HTTP ``/step`` keeps no episode. A failing copy raises :class:`OpenEnvServerError`, which ends
its trajectory only (grove's environment fault path). Lifecycle, capacity, faults, anchors: ``docs/hub-openenv.md``.
"""

from __future__ import annotations

import contextlib
import inspect
import itertools
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import weakref
from collections.abc import Hashable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from grove.envs.base import EnvironmentSuite, EnvironmentUnavailableError, Observation, Transition
from grove.registry import ENVIRONMENTS

__all__ = ["OpenEnvEnvironment", "OpenEnvParams", "OpenEnvServerError", "OpenEnvServerSpec", "openenv_suite"]

log = logging.getLogger(__name__)

EVAL_TASK_OFFSET = 100_000
CLOSE_WAIT_S = 2.0  # how long ending a session may take
_episode_ids = itertools.count()
# runs ``server.app``; exits once grove's end of its stdin closes (grove ended, even by SIGKILL)
_LAUNCHER = ("import os, sys, threading, uvicorn; sys.path.insert(0, sys.argv[2] or '.')\n"
             "threading.Thread(target=lambda: (list(iter(lambda: os.read(0, 4096), b'')), os._exit(0)), daemon=True).start()\n"
             "uvicorn.run(sys.argv[1], host='127.0.0.1', port=int(sys.argv[3]), log_level='warning')")


class OpenEnvServerError(EnvironmentUnavailableError):
    """A server did not start, could not be reached, died or refused; ``code``: OpenEnv's error code, if any."""

    def __init__(self, message: str, code: str = "") -> None:
        super().__init__(message)
        self.code = code


class OpenEnvServerSpec(BaseModel):
    """How grove starts an OpenEnv server on 127.0.0.1 (``server`` of :class:`OpenEnvParams`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    app: str | None = Field(None, pattern=r"^[\w.]+:[\w.]+$", description="An ASGI app 'module:app' run by uvicorn.")
    app_dir: str | None = Field(None, description="A directory put first on the app's import path.")
    command: list[str] | None = Field(None, min_length=1, description="A server's command line; '{port}': the port.")
    cwd: str | None = Field(None, description="The server's working directory (default: grove's).")
    env: dict[str, str] = Field(default_factory=dict, description="Environment variables set for the server.")
    max_processes: int = Field(1, ge=1, description="Processes at most: a session all refuse for capacity adds one.")
    max_restarts: int = Field(3, ge=0, description="Processes that may die and be replaced.")

    @model_validator(mode="after")
    def _one_way(self) -> OpenEnvServerSpec:
        if (self.app is None) == (self.command is None):
            raise ValueError("give exactly one of server.app and server.command")
        if self.command is not None and not any("{port}" in part for part in self.command):
            raise ValueError("server.command must contain '{port}' (grove picks a free port)")
        return self


class OpenEnvParams(BaseModel):
    """Parameters of the ``openenv`` environment."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    url: str | None = Field(None, pattern=r"^(https?|wss?)://", description="A running server's address.")
    server: OpenEnvServerSpec | None = Field(None, description="A server to start (exactly one of url, server).")
    startup_timeout_s: float = Field(60.0, gt=0, description="Seconds for the server to answer /health.")
    request_timeout_s: float = Field(60.0, gt=0, description="Seconds for a connection or a reply.")
    action_field: str = Field("message", description="The Action field that gets the action text.")
    action_params: dict[str, Any] = Field(default_factory=dict, description="Other Action fields, each step.")
    observation_field: str | None = Field(None, description="The Observation's text field; None: all of it as JSON.")
    anchor_field: str | None = Field(None, description="GiGPO's anchor: an observation field or 'state.<field>'; "
                                     "None: each step its own (GiGPO reduces to episode-level GRPO).")
    admissible_field: str | None = Field(None, description="An observation field listing the legal actions.")
    won_if: float | str | None = Field(None, description="Success: a final reward reaching it, or an observation flag.")
    reset_params: dict[str, Any] = Field(default_factory=dict, description="More keyword arguments of reset.")
    max_steps: int = Field(50, ge=1, description="Steps before the episode is truncated.")
    num_train_tasks: int = Field(1000, ge=1, description="Training task ids 0..n-1 (the seed sent to reset).")
    num_eval_tasks: int = Field(100, ge=0, description="Held-out task ids from 100000 up.")
    instructions: str = Field("You act in an environment through text. Each turn, read the observation and answer "
                              "with one action inside <action>...</action>.", description="Opens every prompt.")

    @model_validator(mode="after")
    def _one_server(self) -> OpenEnvParams:
        if (self.url is None) == (self.server is None):
            raise ValueError("give exactly one of url (a running server) and server (one to start)")
        return self


def _is_loopback(url: str) -> bool:
    return url.split("://", 1)[-1].split("/", 1)[0].rsplit(":", 1)[0] in ("127.0.0.1", "localhost", "[::1]")


def _http_get(url: str, timeout: float) -> Any:
    handlers = [urllib.request.ProxyHandler({})] if _is_loopback(url) else []  # no proxy for this machine
    with urllib.request.build_opener(*handlers).open(url, timeout=timeout) as response:
        return json.loads(response.read())


def _wait_healthy(url: str, timeout: float, process: _Process | None = None) -> None:
    """Until ``url/health`` answers; ``OpenEnvServerError`` past ``timeout``, or once ``process`` exited."""
    deadline = time.monotonic() + timeout
    while True:
        if process is not None and process.process.poll() is not None:
            raise OpenEnvServerError(f"the OpenEnv server ({process.what}) {process.ended(0)}")
        try:
            return _http_get(f"{url}/health", min(2.0, timeout))
        except Exception as exc:  # noqa: BLE001 - not listening yet
            if time.monotonic() > deadline:
                what = f"({process.what}) " if process else ""
                output = f"; it was stopped. Its last output:\n{process.output() or '(none)'}" if process else ""
                raise OpenEnvServerError(f"the OpenEnv server {what}did not answer {url}/health within "
                                         f"startup_timeout_s={timeout:g} s ({exc}){output}") from None
            time.sleep(0.1)


class _Process:
    """A server process on 127.0.0.1 (its own process group), its output kept in a file."""

    def __init__(self, spec: OpenEnvServerSpec, startup_timeout_s: float) -> None:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        argv = [part.replace("{port}", str(port)) for part in spec.command or ()]
        self.what = f"server.app {spec.app}" if spec.app else f"server.command {' '.join(argv)}"
        if spec.app is not None:
            argv = [sys.executable, "-c", _LAUNCHER, spec.app, spec.app_dir or "", str(port)]
        handle, name = tempfile.mkstemp(prefix="grove-openenv-", suffix=".log")
        self.log = Path(name)
        with os.fdopen(handle, "ab") as out:
            self.process = subprocess.Popen(
                argv, stdin=subprocess.PIPE if spec.app else subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                cwd=spec.cwd, env={**os.environ, **spec.env}, start_new_session=True,
            )
        try:
            _wait_healthy(self.url, startup_timeout_s, self)
        except BaseException:
            self.stop()
            raise

    def output(self) -> str:
        text = self.log.read_bytes()[-20_000:].decode("utf-8", "replace") if self.log.is_file() else ""
        return "\n".join(text.strip().splitlines()[-20:])

    def ended(self, wait_s: float) -> str:
        """'exited with code N; its last output: ...' once the process ended (waiting up to ``wait_s``), else ''."""
        with contextlib.suppress(subprocess.TimeoutExpired):
            return f"exited with code {self.process.wait(wait_s)}; its last output:\n{self.output() or '(none)'}"
        return ""

    def stop(self) -> None:
        for sig in (signal.SIGTERM, signal.SIGKILL):  # to the whole group: a command's children too
            with contextlib.suppress(ProcessLookupError, PermissionError, subprocess.TimeoutExpired):
                os.killpg(self.process.pid, sig)
                self.process.wait(5)
            if self.process.poll() is not None:
                break
        if self.process.stdin is not None:
            self.process.stdin.close()
        self.log.unlink(missing_ok=True)


class _Servers:
    """The suite's ``make`` (a new copy per call) and where the copies' sessions go: the ``url``, or the processes
    grove started, added and replaced on demand; ``close()`` stops them (so do garbage collection and exit)."""

    def __init__(self, params: OpenEnvParams) -> None:
        self.params, self.spec, self.lock = params, params.server, threading.Lock()
        self.processes: list[_Process] = []
        self.restarts, self.closed = 0, False
        self._finalizer = weakref.finalize(self, lambda ps: [p.stop() for p in ps], self.processes)
        if self.spec is not None:
            self.processes.append(_Process(self.spec, params.startup_timeout_s))
        else:
            _wait_healthy(self.urls()[0], params.startup_timeout_s)

    def __call__(self) -> OpenEnvEnvironment:
        return OpenEnvEnvironment(self.params, self)

    def urls(self) -> list[str]:
        """The servers a new session may try: the url, or the live processes (a dead one is replaced first)."""
        if self.spec is None:
            url = (self.params.url or "").rstrip("/")
            return [url.replace("ws://", "http://", 1).replace("wss://", "https://", 1)]
        with self.lock:
            if self.closed:
                raise OpenEnvServerError("this suite's OpenEnv servers were stopped (close())")
            for dead in [p for p in self.processes if p.process.poll() is not None]:
                self.processes.remove(dead)
                self.restarts, how = self.restarts + 1, dead.ended(0)
                dead.stop()
                if self.restarts > self.spec.max_restarts:
                    raise OpenEnvServerError(f"the OpenEnv server ({dead.what}) died {self.restarts} times, more "
                                             f"than server.max_restarts={self.spec.max_restarts}; the last one {how}")
                log.warning("the OpenEnv server at %s %s\nstarting a new one", dead.url, how)
            if not self.processes:
                self.processes.append(_Process(self.spec, self.params.startup_timeout_s))
            return [p.url for p in self.processes]

    def grow(self) -> str | None:
        """A new process, for a session all live ones refused; None with a url or at ``server.max_processes``."""
        with self.lock:
            if self.spec is None or self.closed or len(self.processes) >= self.spec.max_processes:
                return None
            self.processes.append(_Process(self.spec, self.params.startup_timeout_s))
            return self.processes[-1].url

    def describe(self, url: str) -> str:
        """'; the server exited with code ...' when grove started the server at ``url`` and it ended."""
        text = next((p.ended(1.0) for p in list(self.processes) if p.url == url), "")
        return f"; the server {text}" if text else ""

    def close(self) -> None:
        self.closed = True
        self._finalizer()


def _connect(url: str, timeout: float) -> Any:
    try:
        from websockets.sync.client import connect
    except ImportError as exc:
        raise OpenEnvServerError("the openenv environment needs the websockets package") from exc
    taken = inspect.signature(connect).parameters  # legacy: a plain connection (websockets >= 16), grove closes it
    options = {k: v for k, v in {"legacy": True, "proxy": None if _is_loopback(url) else True}.items() if k in taken}
    return connect(url.replace("http", "ws", 1) + "/ws", open_timeout=timeout, close_timeout=CLOSE_WAIT_S,
                   max_size=None, **options)


def _release(link: list[Any]) -> None:
    """End the session in ``link[0]``: OpenEnv's close message; the server frees the session, then closes."""
    session, link[0] = link[0], None
    for end in [lambda c: c.send('{"type": "close"}'), lambda c: c.recv(CLOSE_WAIT_S), lambda c: c.close()]:
        if session is not None:
            with contextlib.suppress(Exception):  # the socket is closed either way
                end(session[0])


def _hashable(value: Any) -> Hashable:
    return value if isinstance(value, str | int | float | bool | None) else json.dumps(value, sort_keys=True)


def _field(values: dict[str, Any], name: str, param: str, where: str = "observation") -> Any:
    if name not in values:
        raise OpenEnvServerError(f"{param} {name!r} is not in the server's {where} (it has: {', '.join(values)})")
    return values[name]


class OpenEnvEnvironment:
    """One copy: a WebSocket session of its own, opened by ``reset`` and ended with the episode (or the copy)."""

    def __init__(self, params: OpenEnvParams, servers: _Servers) -> None:
        self.params, self.servers = params, servers
        self._link: list[Any] = [None]  # (connection, url) of the open session, shared with the finalizer
        weakref.finalize(self, _release, self._link)
        self._id, self._steps, self._done = -1, 0, True  # _id: the episode's, for anchors never shared

    def reset(self, task_id: int, seed: int) -> Observation:
        _release(self._link)
        message = {"type": "reset", "data": {**self.params.reset_params, "seed": task_id}}
        reply = next((r for url in self.servers.urls() if (r := self._open(url, message)) is not None), None)
        if reply is None and (url := self.servers.grow()) is not None:
            reply = self._open(url, message)
        if reply is None:
            raise OpenEnvServerError("every OpenEnv server refused a new session: all are at their capacity "
                                     "(max_concurrent_envs); serve more sessions per process, or raise "
                                     "server.max_processes to the copies played at once", "CAPACITY_REACHED")
        self._id, self._steps, self._done = next(_episode_ids), 0, False
        return self._observation(reply)

    def _open(self, url: str, message: dict[str, Any]) -> dict[str, Any] | None:
        """A new session at ``url`` answering ``message`` (a reset); None when refused for capacity."""
        try:
            self._link[0] = (_connect(url, self.params.request_timeout_s), url)
        except Exception as exc:  # noqa: BLE001 - cannot connect: this trajectory ends
            raise OpenEnvServerError(f"cannot open a session at {url}/ws: {exc}{self.servers.describe(url)}") from None
        try:
            return self._call(message, "reset")
        except OpenEnvServerError as exc:
            _release(self._link)
            if exc.code == "CAPACITY_REACHED":
                return None
            raise

    def _call(self, message: dict[str, Any], what: str) -> dict[str, Any]:
        """Send ``message`` in the open session and return the reply's data; errors name the server and ``what``."""
        if self._link[0] is None:
            raise OpenEnvServerError(f"{what} without a session: reset() first")
        connection, url = self._link[0]
        try:
            with contextlib.suppress(Exception):  # a server that refused the session has answered and closed
                connection.send(json.dumps(message))
            reply = json.loads(connection.recv(timeout=self.params.request_timeout_s))
        except Exception as exc:  # noqa: BLE001 - no answer (request_timeout_s), or the server closed or died
            self._link[0] = None
            connection.close()
            late = f" within request_timeout_s={self.params.request_timeout_s:g} s" * isinstance(exc, TimeoutError)
            raise OpenEnvServerError(f"the OpenEnv server at {url} did not answer {what}{late} "
                                     f"({type(exc).__name__}: {exc}){self.servers.describe(url)}") from None
        data = reply.get("data") or {}
        if reply.get("type") == "error":
            code, errors = str(data.get("code", "UNKNOWN")), f" {data['errors']}" if data.get("errors") else ""
            raise OpenEnvServerError(f"the OpenEnv server at {url} answered {what} with an error: "
                                     f"{data.get('message')} (code {code}){errors}", code)
        return data

    def step(self, action: str) -> Transition:
        if self._done:
            raise RuntimeError("step() after the episode ended; call reset() first")
        p = self.params
        reply = self._call({"type": "step", "data": {**p.action_params, p.action_field: action}}, "step")
        self._steps += 1
        observation = self._observation(reply)
        reward, done = float(reply.get("reward") or 0.0), bool(reply.get("done", False))  # grove checks the reward
        truncated = not done and self._steps >= p.max_steps
        won = (bool(_field(reply["observation"], p.won_if, "won_if")) if isinstance(p.won_if, str)
               else p.won_if is not None and done and reward >= p.won_if)
        self._done = done or truncated
        if self._done:
            _release(self._link)  # the server's session is free for another copy
        return Transition(observation, reward, self._done, {"won": won, "truncated": truncated})

    def _observation(self, reply: dict[str, Any]) -> Observation:
        p, fields = self.params, reply.get("observation")
        if not isinstance(fields, dict):
            raise OpenEnvServerError(f"the OpenEnv server sent an observation of type {type(fields).__name__}")
        text = fields if p.observation_field is None else _field(fields, p.observation_field, "observation_field")
        admissible = p.admissible_field and tuple(str(a) for a in _field(fields, p.admissible_field, "admissible_field"))
        if p.anchor_field is None:
            anchor: Hashable = ("openenv", self._id, self._steps)  # never shared: singleton anchor groups
        elif p.anchor_field.startswith("state."):
            state = self._call({"type": "state"}, "state")
            anchor = _hashable(_field(state, p.anchor_field[6:], "anchor_field", "state"))
        else:
            anchor = _hashable(_field(fields, p.anchor_field, "anchor_field"))
        text = text if isinstance(text, str) else json.dumps(text, sort_keys=True, ensure_ascii=False)
        return Observation(text, anchor, admissible or None)


def _check_schema(url: str, params: OpenEnvParams) -> None:
    """The configured fields against the server's ``/schema``: ``ValueError`` naming each param that does not fit."""
    try:
        schema = _http_get(f"{url}/schema", params.request_timeout_s)
    except Exception as exc:  # noqa: BLE001
        raise OpenEnvServerError(f"cannot read {url}/schema ({exc}): is it an OpenEnv server?") from None
    action, observation, state = (schema.get(k) or {} for k in ("action", "observation", "state"))
    observed = set(observation.get("properties") or {}) - {"reward", "done", "metadata"}  # sent beside, not in it
    anchor, stated = params.anchor_field, (params.anchor_field or "").startswith("state.")
    checks = [
        ("action_field", params.action_field, set(action.get("properties") or {}), "action"),
        ("observation_field", params.observation_field, observed, "observation"),
        ("admissible_field", params.admissible_field, observed, "observation"),
        ("won_if", params.won_if if isinstance(params.won_if, str) else None, observed, "observation"),
        ("anchor_field", None if stated else anchor, observed, "observation"),  # a state allowing extra fields:
        ("anchor_field", anchor[6:] if stated and not state.get("additionalProperties") else None,  # any name
         set(state.get("properties") or {}), "state"),
    ]
    problems = [f"{param} {name!r} is not a field of the server's {where} (its fields: {', '.join(sorted(fields))})"
                for param, name, fields, where in checks if name is not None and name not in fields]
    missing = set(action.get("required") or ()) - {params.action_field} - set(params.action_params)
    if missing:
        problems.append(f"the server's action also requires {sorted(missing)}: give them in action_params")
    if problems:
        raise ValueError(f"openenv server at {url}: " + "; ".join(problems))


@ENVIRONMENTS.register("openenv", params=OpenEnvParams)
def openenv_suite(params: OpenEnvParams) -> EnvironmentSuite:
    """Reach (or start) the server, check the fields against its schema; ``suite.make.close()`` stops it."""
    if params.anchor_field is None:
        log.warning("openenv: no anchor_field, so every step is its own anchor and GiGPO is episode-level GRPO")
    servers = _Servers(params)
    try:
        _check_schema(servers.urls()[0], params)
    except BaseException:
        servers.close()
        raise
    evaluation = range(EVAL_TASK_OFFSET, EVAL_TASK_OFFSET + params.num_eval_tasks)
    return EnvironmentSuite("openenv", servers, range(params.num_train_tasks), evaluation, params.instructions,
                            metadata={"params": params.model_dump()})
