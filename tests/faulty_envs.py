"""Misbehaving environments for tests/test_environment_faults.py, loaded by import path (``faulty_envs:faulty``) as a
user's own would be.

``faulty`` is the corridor of ``agent_envs`` (walk right to the end) whose copies misbehave on **odd task ids** only
(even ones play normally, so a test can see the rest of the run go on), in ``where`` (``make``, ``reset`` or
``step``) from step ``at`` on. ``fault``:

In ``make`` (the task is not known yet) every other copy made misbehaves.

* ``exit``: ``sys.exit(3)``; ``interrupt``: ``raise KeyboardInterrupt``; ``raise``: ``RuntimeError``;
* ``hang``: sleep ``hang_s`` seconds, then behave;
* ``jitter``: every step sleeps 0–40 ms (varying by task and step, so threads finish in a shuffled order), and
  raises ``RuntimeError`` at step ``at`` on odd task ids;
* a key of :data:`MALFORMED_STEP` / :data:`MALFORMED_RESET`: return that malformed result;
* ``long``: an observation of ``words`` words (``chars``: of that many characters) instead of the corridor;
* ``none``: behave.

``all_tasks: true`` makes every copy misbehave; ``instructions_words`` gives the suite instructions of that many
words. ``scripted`` replays a list of step results per task (the fuzzer's).
"""

from __future__ import annotations

import itertools
import math
import sys
import time
from types import MappingProxyType

import numpy as np

from grove.envs.base import EnvironmentSuite, Observation, Transition

OK_OBS = Observation(text="P___", anchor=0, admissible_actions=("left", "right"))


def _obs(anchor=0, **changes) -> Observation:
    return Observation(**{"text": "P___", "anchor": anchor, "admissible_actions": ("left", "right"), **changes})


# name -> (malformed step result, the kind the rollout must name, a phrase its message must hold)
MALFORMED_STEP = {
    "observation_is_str": (lambda: Transition("P___", 0.0, False, {}), "observation", "observation of type str"),
    "observation_is_none": (lambda: Transition(None, 0.0, False, {}), "observation", "of type NoneType"),
    "observation_is_dict": (lambda: Transition({"text": "P"}, 0.0, False, {}), "observation", "of type dict"),
    "text_is_bytes": (lambda: Transition(_obs(text=b"P___"), 0.0, False, {}), "text", "text is of type bytes"),
    "text_is_none": (lambda: Transition(_obs(text=None), 0.0, False, {}), "text", "text is of type NoneType"),
    "anchor_is_list": (lambda: Transition(_obs(anchor=[1, 2]), 0.0, False, {}), "anchor", "unhashable list"),
    "anchor_holds_a_dict": (lambda: Transition(_obs(anchor=(1, {})), 0.0, False, {}), "anchor", "unhashable tuple"),
    "admissible_is_str": (
        lambda: Transition(_obs(admissible_actions="left right"), 0.0, False, {}), "admissible_actions", "tuple of str",
    ),
    "admissible_holds_ints": (
        lambda: Transition(_obs(admissible_actions=(1, 2)), 0.0, False, {}), "admissible_actions", "tuple of str",
    ),
    "reward_is_str": (lambda: Transition(OK_OBS, "1.0", False, {}), "reward", "reward '1.0' of type str"),
    "reward_is_none": (lambda: Transition(OK_OBS, None, False, {}), "reward", "of type NoneType"),
    "reward_is_nan": (lambda: Transition(OK_OBS, math.nan, False, {}), "reward", "must be finite"),
    "reward_is_inf": (lambda: Transition(OK_OBS, np.float32("inf"), False, {}), "reward", "must be finite"),
    "reward_is_complex": (lambda: Transition(OK_OBS, 1j, False, {}), "reward", "of type complex"),
    "reward_is_an_array": (lambda: Transition(OK_OBS, np.zeros(2), False, {}), "reward", "of type ndarray"),
    "done_is_no": (lambda: Transition(OK_OBS, 0.0, "no", {}), "done", "done = 'no' of type str"),
    "done_is_float": (lambda: Transition(OK_OBS, 0.0, 1.0, {}), "done", "of type float"),
    "done_is_none": (lambda: Transition(OK_OBS, 0.0, None, {}), "done", "of type NoneType"),
    "info_is_none": (lambda: Transition(OK_OBS, 0.0, False, None), "info", "info of type NoneType"),
    "info_is_list": (lambda: Transition(OK_OBS, 0.0, False, []), "info", "info of type list"),
    "won_is_str": (lambda: Transition(OK_OBS, 0.0, False, {"won": "no"}), "info", "info['won']"),
    "three_tuple": (lambda: (OK_OBS, 0.0, False), "transition", "a tuple of 3 items"),
    "gymnasium_five_tuple": (lambda: (OK_OBS, 0.0, False, False, {}), "transition", "done = terminated or truncated"),
    "list_of_four": (lambda: [OK_OBS, 0.0, False, {}], "transition", "returned a list"),
    "returns_none": (lambda: None, "transition", "returned a NoneType"),
}

# name -> (malformed reset result, kind, phrase)
MALFORMED_RESET = {
    "observation_is_str": (lambda: "P___", "observation", "observation of type str"),
    "observation_is_none": (lambda: None, "observation", "of type NoneType"),
    "gymnasium_pair": (lambda: (OK_OBS, {}), "observation", "of type tuple"),
    "text_is_int": (lambda: _obs(text=7), "text", "text is of type int"),
    "anchor_is_dict": (lambda: _obs(anchor={"x": 1}), "anchor", "unhashable dict"),
    "admissible_is_str": (lambda: _obs(admissible_actions="left"), "admissible_actions", "tuple of str"),
}

# name -> a step result of unusual but valid types (never counted as malformed)
VALID_STEP = {
    "plain_tuple": lambda: (OK_OBS, 0.0, False, {}),
    "numpy_float_reward": lambda: Transition(OK_OBS, np.float32(0.5), False, {}),
    "numpy_int_reward": lambda: Transition(OK_OBS, np.int64(1), False, {}),
    "bool_reward": lambda: Transition(OK_OBS, True, False, {}),
    "int_reward": lambda: Transition(OK_OBS, -2, False, {}),
    "numpy_bool_done": lambda: Transition(OK_OBS, 0.0, np.bool_(False), {}),
    "mapping_info": lambda: Transition(OK_OBS, 0.0, False, MappingProxyType({"won": False})),
    "numpy_bool_won": lambda: Transition(OK_OBS, 0.0, False, {"won": np.bool_(False)}),
    "list_admissible": lambda: Transition(_obs(admissible_actions=["left", "right"]), 0.0, False, {}),
    "no_admissible": lambda: Transition(_obs(admissible_actions=None), 0.0, False, {}),
    "tuple_anchor": lambda: Transition(_obs(anchor=("room", 3)), 0.0, False, {}),
    "done_true": lambda: Transition(OK_OBS, 1.0, True, {"won": True}),
}


def words(n: int) -> str:
    return " ".join(f"word{i % 97}" for i in range(n))


class Faulty:
    def __init__(
        self, fault: str, where: str, at: int, all_tasks: bool, length: int, hang_s: float, text: str, copy: int
    ) -> None:
        self.fault, self.where, self.at, self.all_tasks = fault, where, at, all_tasks
        self.length, self.hang_s, self.long_text = length, hang_s, text
        self.position = self.task_id = self.steps = 0
        if where == "make" and (all_tasks or copy % 2 == 1):  # the task is not known yet: every other copy made
            self._misbehave()

    def _bad(self) -> bool:
        return self.all_tasks or self.task_id % 2 == 1

    def _misbehave(self):
        if self.fault == "exit":
            sys.exit(3)
        if self.fault == "interrupt":
            raise KeyboardInterrupt
        if self.fault == "raise":
            raise RuntimeError(f"faulty environment broke in {self.where}")
        if self.fault == "hang":
            time.sleep(self.hang_s)
            return None
        if self.fault == "long":
            return Observation(text=self.long_text, anchor=-1)
        return None

    def _observation(self) -> Observation:
        cells = ["_"] * (self.length + 1)
        cells[self.position] = "P"
        return Observation(text="".join(cells), anchor=self.position, admissible_actions=("left", "right"))

    def reset(self, task_id: int, seed: int):
        self.task_id, self.position, self.steps = task_id, 0, 0
        if self.where == "reset" and self._bad():
            if self.fault in MALFORMED_RESET:
                return MALFORMED_RESET[self.fault][0]()
            self._misbehave()
        return self._observation()

    def step(self, action: str):
        self.steps += 1
        if self.fault == "jitter":
            time.sleep(((self.task_id * 7 + self.steps * 3) % 5) * 0.01)
            if self.steps == self.at and self._bad():
                raise RuntimeError(f"jitter environment broke at step {self.steps}")
        self.position = min(self.length, self.position + 1) if action.strip() != "left" else max(0, self.position - 1)
        if self.where == "step" and self.steps >= self.at and self._bad():
            if self.fault in MALFORMED_STEP:
                return MALFORMED_STEP[self.fault][0]()
            bad = self._misbehave()
            if isinstance(bad, Observation):  # a long observation
                return Transition(bad, 0.0, False, {})
            if bad is not None:
                return bad
        won = self.position == self.length
        return Transition(self._observation(), 1.0 if won else 0.0, won, {"won": won})


def faulty(params: dict) -> EnvironmentSuite:
    fault = params.get("fault", "none")
    where = params.get("where", "step")
    at = int(params.get("at", 1))
    all_tasks = bool(params.get("all_tasks", False))
    length = int(params.get("length", 6))
    hang_s = float(params.get("hang_s", 3.0))
    text = "x" * int(params["chars"]) if "chars" in params else words(int(params.get("words", 700)))
    made = itertools.count()
    return EnvironmentSuite(
        name=params.get("name", "faulty"),
        make=lambda: Faulty(fault, where, at, all_tasks, length, hang_s, text, next(made)),
        train_tasks=list(range(8)),
        eval_tasks=list(range(100, 104)),
        instructions=words(int(params["instructions_words"])) if "instructions_words" in params
        else "Walk right to the end of the corridor. Answer with left or right.",
    )


def exiting_factory(params: dict) -> EnvironmentSuite:
    """A factory that ends the process instead of returning a suite."""
    sys.exit(0)


SUMMARIES = {
    "exit": lambda records: sys.exit(0),
    "none": lambda records: None,
    "strings": lambda records: {"routing_accuracy": "high"},
}


def bad_summarize(params: dict) -> EnvironmentSuite:
    """A corridor whose ``summarize`` hook misbehaves: ``summary: exit`` (``sys.exit(0)``), ``none`` (returns
    ``None``) or ``strings`` (a metric that is not a number)."""
    suite = faulty(params)
    return EnvironmentSuite(
        name="bad_summarize", make=suite.make, train_tasks=suite.train_tasks, eval_tasks=suite.eval_tasks,
        instructions=suite.instructions, summarize=SUMMARIES[params.get("summary", "exit")],
    )


def scripted(params: dict) -> EnvironmentSuite:
    """Copies that replay ``params["results"][task_id]`` (see :class:`Scripted`)."""
    resets, results = params.get("resets", {}), params["results"]
    return EnvironmentSuite(
        name=params.get("name", "scripted"), make=lambda: Scripted(resets, results), train_tasks=sorted(results),
        eval_tasks=[10_000], instructions="Answer with anything.",
    )


class Scripted:
    """Replays ``results[task_id][k]`` as the result of the k-th step (a ``("valid", name)`` or ``("malformed",
    name)`` pair naming an entry of :data:`VALID_STEP` / :data:`MALFORMED_STEP`); ``resets[task_id]`` likewise."""

    def __init__(self, resets: dict, results: dict) -> None:
        self.resets, self.results = resets, results
        self.task_id, self.steps = 0, 0

    def reset(self, task_id: int, seed: int):
        self.task_id, self.steps = task_id, 0
        kind, name = self.resets.get(task_id, ("valid", None))
        return MALFORMED_RESET[name][0]() if kind == "malformed" else OK_OBS

    def step(self, action: str):
        kind, name = self.results[self.task_id][self.steps]
        self.steps += 1
        return MALFORMED_STEP[name][0]() if kind == "malformed" else VALID_STEP[name]()
