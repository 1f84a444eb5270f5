"""``verifiers``: a Prime Intellect verifiers environment (``pip install verifiers==0.4.0``) played turn by turn.

In verifiers 0.4.0 (``verifiers.v1``) a multi-turn environment is a ``vf.Env`` whose ``run(task, agents)`` holds the
exchange: it opens ``agents.<seat>.interaction(task)`` and awaits ``interaction.turn(message)``, which returns the
model's reply; leaving the interaction ends it, and the task's ``@vf.reward`` functions score the trace. grove plays
that seat: each copy runs ``setup``/``run``/``finalize`` in an event loop of its own, suspended at every turn. The
turn's user message (a prompted task's first turn: its prompt) is the observation, the model's message the action
(``action_parser: {id: full_text}``), the episode ends when ``run`` returns (the env's ``is_completed``) or the seat's
``max_turns`` or a ``@vf.stop`` on the trace refuses a turn, and the terminal reward is verifiers' weighted reward of
the trace (``Trace.reward``); ``info["won"]``: it reached ``win_threshold`` (default: the full score, every recorded
reward at 1). A plain ``vf.Taskset`` (or verifiers' ``SingleAgentEnv``) plays one turn per task.

Anchors: ``none`` (default) makes every observation its own anchor, so GiGPO's step advantage is 0 and it reduces to
episode-level GRPO; ``state_key:<key>`` anchors on the field ``<key>`` of ``trace.state``, else ``trace.info[<key>]``
(an unhashable value keyed by its JSON text). Not run (grove has no sandbox or model client): other seats, the task's
``setup``/``finalize``, rewards needing a ``runtime``, ``Request``/``Response`` stops, tools. See docs/hub-verifiers.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import random
from collections import namedtuple
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from grove.envs.base import EnvironmentSuite, EpisodeRecord, Observation, Transition
from grove.hubs.verifiers.verifiers_loading import import_verifiers, load_verifiers
from grove.registry import ENVIRONMENTS

_UNIQUE_ANCHORS = itertools.count()


class VerifiersEnvParams(BaseModel):
    """Parameters of the ``verifiers`` environment."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    environment: str = Field(
        description="'package.module:function' returning a vf.Env or vf.Taskset (called with kwargs), or an "
        "installed verifiers taskset id (vf.load_environment: the taskset's own Env, else one turn per task)."
    )
    kwargs: dict[str, Any] = Field(default_factory=dict, description="The function's kwargs, or the taskset's config.")
    eval_kwargs: dict[str, Any] | None = Field(None, description="Eval tasks: the environment built with these kwargs.")
    eval_fraction: float = Field(0.1, ge=0, lt=1, description="Tasks held out for eval (chosen by seed).")
    seed: int = Field(0, description="Seed choosing the held-out tasks.")
    max_tasks: int | None = Field(None, ge=1, description="Tasks read from each taskset; required when infinite.")
    seat: str | None = Field(None, description="The agent seat grove plays; null: the env's only seat.")
    win_threshold: float | None = Field(None, description="info['won'] from this reward up; null: the full score.")
    anchor: str = Field("none", pattern=r"^(none|state_key:\S+)$", description="'none' or 'state_key:<key>'.")
    instructions: str | None = Field(None, description="The prompt's first part; null: the first task's system prompt.")


def _tasks(params: VerifiersEnvParams, taskset: Any) -> list[Any]:
    if params.max_tasks is None and not taskset.bounded:
        raise ValueError(f"env.params.max_tasks: the taskset {type(taskset).__name__} is infinite; set max_tasks")
    return list(taskset.take(params.max_tasks) if params.max_tasks is not None else taskset)


def _split(params: VerifiersEnvParams) -> tuple[Any, list[Any], list[Any]]:
    """``(Env or None, train tasks, eval tasks)``; a training task equal to an eval task (same key) is dropped."""
    env, taskset = load_verifiers(params.environment, params.kwargs, "env.params")
    tasks = _tasks(params, taskset)
    if params.eval_kwargs is not None:
        train, held = tasks, _tasks(params, load_verifiers(params.environment, params.eval_kwargs, "env.params")[1])
    else:
        n_eval = max(round(params.eval_fraction * len(tasks)), int(params.eval_fraction > 0 and len(tasks) >= 2))
        chosen = set(random.Random(params.seed).sample(range(len(tasks)), n_eval))
        train = [t for i, t in enumerate(tasks) if i not in chosen]
        held = [t for i, t in enumerate(tasks) if i in chosen]
    held_keys = {t.key for t in held}
    train = [t for t in train if t.key not in held_keys]
    if not train:
        raise ValueError(f"env.params: no training task left of the {len(tasks)} read; lower eval_fraction")
    if train[0].config.judges:
        raise ValueError("env.params.environment: its tasks plug LLM judges (TaskConfig.judges), which grove cannot run")
    return env, train, held


# what every copy shares: the Env (None: one turn per task), the tasks by id, the seats (name: AgentConfig), the settings
_Spec = namedtuple("_Spec", "env tasks seats seat win_threshold anchor_key instructions")


class _Seat:
    """An agent of the env's config (``agents.<name>``): the played one's turns are answered by grove."""

    def __init__(self, copy: VerifiersEnvironment, name: str, config: Any) -> None:
        self.copy, self.name, self.config, self.trainable = copy, name, config, True

    def interaction(self, task: Any, **_borrowed: Any) -> _Interaction:
        return self.copy.open(self, task)

    async def run(self, task: Any, **_borrowed: Any) -> Any:
        """One segment: the task's prompt and grove's one reply (verifiers' ``Agent.run`` without tools)."""
        async with self.interaction(task) as talk:
            if task.data.prompt is None:
                raise ValueError(f"seat {self.name!r} runs task {task.data.idx} as one segment, but it has no prompt")
            await talk.turn()
        return talk.trace


class _Agents(dict):
    def __getattr__(self, name: str) -> _Seat:  # agents.<seat>, as verifiers' Agents
        if name not in self:
            raise AttributeError(f"no agent {name!r}; this config declares {sorted(self)}")
        return self[name]


class _Interaction:
    """The played seat's exchange, as ``vf.Interaction``: each ``turn`` asks grove; leaving scores the trace."""

    def __init__(self, copy: VerifiersEnvironment, task: Any, seat: _Seat) -> None:
        from verifiers.v1.session import hook_boundary
        from verifiers.v1.state import state_cls
        from verifiers.v1.trace import AgentInfo, TraceTask

        vf = copy.vf
        self.copy, self.task, self.agent_config = copy, task, seat.config
        self.trace = vf.Trace(
            task=TraceTask(type=type(task).__name__, data=task.data, key=task.key, hash=task.hash),
            agent=AgentInfo(config=seat.config, name=seat.name), state=state_cls(type(task))(),
        )
        self.stops = [fn for fn in task.hooks("stop") if hook_boundary(fn, allow_trace=True) is vf.Trace]
        self.started = self.over = self.closed = False

    async def __aenter__(self) -> _Interaction:
        return self

    async def __aexit__(self, kind: Any, *_: Any) -> None:
        await self.close(failed=kind is not None)

    def _record(self, *messages: Any, sampled: bool = False) -> None:
        from verifiers.v1.graph import MessageNode

        for message in messages:
            parent = len(self.trace.nodes) - 1 if self.trace.nodes else None
            self.trace.nodes.append(MessageNode(parent=parent, message=message, sampled=sampled))

    def _opening(self, message: Any) -> list[Any]:
        """The user-side messages of this turn (the task's system prompt and prompt first, when opening)."""
        from verifiers.v1.dialects import parse_message

        vf, data = self.copy.vf, self.task.data
        prompted = not self.started and data.prompt is not None
        if message is None and not prompted:
            raise ValueError("nothing to run a turn on: a bare turn() takes a prompted task's opening reply")
        if message is not None and prompted:
            raise ValueError("the task's prompt opens this exchange: take its first reply with a bare turn()")
        new = [vf.SystemMessage(content=data.system_prompt)] if not self.started and data.system_prompt else []
        given = data.prompt if prompted else message
        if isinstance(given, str):
            return [*new, vf.UserMessage(content=given)]
        return [*new, *(parse_message(m) if isinstance(m, dict) else m for m in given)]

    async def turn(self, message: Any = None) -> Any:
        from verifiers.v1.types import content_text

        vf = self.copy.vf
        if self.closed or self.over:
            raise RuntimeError("the exchange is over (the run ended); read interaction.trace")
        new = self._opening(message)
        self.started = True
        self._record(*new)
        if await self._refused():
            self.over = True
            return vf.Segment(messages=[], terminated=True)
        shown = [m for m in new if not (m.role == "system" and m.content == self.copy.spec.instructions)]
        reply = await self.copy.ask("\n\n".join(content_text(m.content) for m in shown))
        self._record(vf.AssistantMessage(content=reply), sampled=True)
        return vf.Segment(messages=[self.trace.nodes[-1].message])

    async def _refused(self) -> bool:
        """The seat's ``max_turns`` and the task's ``@vf.stop`` predicates on the trace, checked before each turn."""
        from verifiers.v1.session import call_hook

        limit = self.agent_config.max_turns
        if limit is not None and self.trace.num_turns >= limit:
            self.trace.stop("max_turns")
            return True
        for stop in self.stops:
            if await call_hook(stop, {self.copy.vf.Trace: self.trace}):
                self.trace.stop(stop.__name__)
                return True
        return False

    async def close(self, failed: bool = False) -> Any:
        if not self.closed:
            self.closed = True
            if not failed:
                if self.trace.stop_condition is None:
                    self.trace.stop("user_closed")
                await self.task.score(self.trace)
            self.trace.is_completed, self.trace.ok = True, not failed
        return self.trace


class VerifiersEnvironment:
    """One copy: per ``reset`` a verifiers episode (the env's ``setup``, ``run``, ``finalize``) as a task of an event
    loop of its own, suspended at each turn of the played seat until ``step`` answers it."""

    def __init__(self, spec: _Spec) -> None:
        self.vf, self.spec, self.loop = import_verifiers("the verifiers environment"), spec, None
        self.task = self.talk = self.signal = self.reply = None  # the episode in progress: task, exchange, futures

    def reset(self, task_id: int, seed: int) -> Observation:
        self.close()
        if not 0 <= task_id < len(self.spec.tasks):
            raise ValueError(f"verifiers task id {task_id} is not in 0..{len(self.spec.tasks) - 1}")
        self.task, self.talk, self.loop = self.spec.tasks[task_id], None, asyncio.new_event_loop()
        self.main = self.loop.create_task(self._play())
        event = self._advance(None)
        if not isinstance(event, str):
            raise RuntimeError(f"the environment's run() ended before seat {self.spec.seat!r} was asked anything")
        return Observation(event, self._anchor(self.talk.trace))

    def step(self, action: str) -> Transition:
        if self.loop is None:
            raise RuntimeError("step() without an episode in progress: call reset() first")
        event = self._advance(action)
        if isinstance(event, str):
            return Transition(Observation(event, self._anchor(self.talk.trace)), 0.0, False, {})
        return self._finish(event)

    def open(self, seat: _Seat, task: Any) -> _Interaction:
        if seat.name != self.spec.seat:
            raise RuntimeError(
                f"the environment plays seat {seat.name!r}, which needs a model of its own: grove plays seat "
                f"{self.spec.seat!r} only (env.params.seat)"
            )
        if self.talk is not None:
            raise RuntimeError(f"the environment opened seat {seat.name!r} twice; grove plays one exchange per episode")
        self.talk = _Interaction(self, task, seat)
        return self.talk

    async def _play(self) -> Any:
        env, vf = self.spec.env, self.vf
        agents = _Agents({name: _Seat(self, name, config) for name, config in self.spec.seats.items()})
        if env is None:
            await getattr(agents, self.spec.seat).run(self.task)
        else:
            await env.setup(agents)
            await env.run(self.task, agents)
        if self.talk is None:
            raise RuntimeError(f"the environment's run() never opened an exchange with seat {self.spec.seat!r}")
        if env is not None:
            episode = vf.Episode(env=vf.EnvInfo(id=env.config.env_id), task=self.talk.trace.task, traces=[self.talk.trace])
            await env.finalize(self.task, episode)
        return self.talk.trace

    async def ask(self, text: str) -> str:
        """Hand a turn's observation to ``reset``/``step`` and wait for the reply."""
        if self.signal is None or self.signal.done():
            raise RuntimeError("turns of the exchange run one at a time")
        self.reply = self.loop.create_future()
        self.signal.set_result(text)
        return await self.reply

    def _advance(self, action: str | None) -> str | Any:
        """Answer the pending turn and run until the next one (its observation text) or the end of the episode (the
        seat's trace); an exception of the run (or of reading the anchor) closes the episode and is raised here."""
        try:
            if action is not None:
                self.reply.set_result(action)
            self.signal = self.loop.create_future()
            self.loop.run_until_complete(asyncio.wait({self.signal, self.main}, return_when=asyncio.FIRST_COMPLETED))
            if self.signal.done():
                return self.signal.result()
            result = self.main.result()
        except BaseException:
            self.close()
            raise
        self.close()
        return result

    def close(self) -> None:
        """End the episode in progress, if any (its run is cancelled) and close its event loop."""
        loop, self.loop = self.loop, None
        if loop is None or loop.is_closed():
            return
        pending = asyncio.all_tasks(loop)
        for task in pending:
            task.cancel()
        if pending:
            loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # a copy collected mid-episode (truncated): nothing to report to
            self.close()

    def _finish(self, trace: Any) -> Transition:
        rewards = {name: r for name, r in trace.rewards.items() if r is not None}
        total = float(trace.reward)
        full = self.spec.win_threshold
        if full is None:
            full = sum(r.weight for r in rewards.values() if r.weight > 0)
        info = {
            "won": bool(rewards) and total >= full - 1e-9, "truncated": bool(trace.is_truncated),
            "verifiers_reward": total, "verifiers_rewards": {name: r.score for name, r in rewards.items()},
            "stop_condition": trace.stop_condition,
        }
        return Transition(Observation("", self._anchor(trace)), total, True, info)

    def _anchor(self, trace: Any) -> Any:
        key = self.spec.anchor_key
        if key is None:
            return ("verifiers-step", next(_UNIQUE_ANCHORS))
        if key in type(trace.state).model_fields:
            value = getattr(trace.state, key)
        elif key in trace.info:
            value = trace.info[key]
        else:
            self.close()
            raise ValueError(
                f"env.params.anchor 'state_key:{key}': the trace has no state field or info entry {key!r} (state "
                f"fields: {sorted(type(trace.state).model_fields)}, info keys: {sorted(trace.info)})"
            )
        try:
            hash(value)
            return value
        except TypeError:
            return json.dumps(value, sort_keys=True, default=str)


def _summarize(records: Sequence[EpisodeRecord]) -> dict[str, float]:
    """The mean score of each verifiers reward over the episodes that recorded it (``verifiers/<name>``)."""
    values: dict[str, list[float]] = {}
    for last in (record.infos[-1] for record in records if record.infos):
        for name, score in (last.get("verifiers_rewards") or {}).items():
            values.setdefault(name, []).append(float(score))
    return {f"verifiers/{name}": sum(v) / len(v) for name, v in values.items()}


@ENVIRONMENTS.register(
    "verifiers",
    params=VerifiersEnvParams,
)
def verifiers_suite(params: VerifiersEnvParams) -> EnvironmentSuite:
    """The suite of a verifiers environment: its tasks split into training and eval ids, one seat played by grove."""
    from verifiers.v1.configs.agent import agent_config_fields

    env, train, held = _split(params)
    vf = import_verifiers("the verifiers environment")
    seats = dict(agent_config_fields(env.config)) if env is not None else {"agent": vf.AgentConfig()}
    seat = params.seat or (next(iter(seats)) if len(seats) == 1 else None)
    if seat not in seats:
        problem = f"no seat {params.seat!r}" if params.seat else "several seats"
        raise ValueError(f"env.params.seat: {problem}; the environment has {sorted(seats)}: name the one grove plays")
    instructions = params.instructions if params.instructions is not None else (train[0].data.system_prompt or "")
    spec = _Spec(
        env=env, tasks=(*train, *held), seats=seats, seat=seat, win_threshold=params.win_threshold,
        anchor_key=params.anchor.partition(":")[2].strip() or None, instructions=instructions,
    )
    return EnvironmentSuite(
        name=f"verifiers:{params.environment}", make=lambda: VerifiersEnvironment(spec),
        train_tasks=range(len(train)), eval_tasks=range(len(train), len(train) + len(held)), instructions=instructions,
        metadata={"environment": params.environment, "seat": seat, "env": type(env).__name__ if env else None},
        summarize=_summarize,
    )
