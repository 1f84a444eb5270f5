"""A user's reward cannot end the run silently or crash it with a traceback: rewards that call ``sys.exit`` or raise
``KeyboardInterrupt`` (in the trainer and in a worker), that return ``None`` for every objective of a sample, or
values beyond float32; and reward workers that must die with a killed trainer.

The rewards are user modules loaded by import path (``tests/faulty_rewards.py``); most combinations are scored
directly, a few run ``grove train`` end to end on a tiny model."""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch
from tests.test_experience_completion_collection import ScriptedEngine, collect_experience, make_source
from tests.test_experience_completion_collection import settings as collect_settings
from tests.test_train_e2e import base_overrides

import grove.builtin_components  # noqa: F401
from forked_processes import run_grove
from grove.models.tiny import create_tiny_model_dir
from grove.registry import ADVANTAGE_ESTIMATORS, REWARD_COMBINERS
from grove.rewards.scoring import RewardFunctionError, compute_rewards, resolve_reward
from grove.user_code import UserCodeExit, grove_handles_stop_signals

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
PYTHONPATH = os.pathsep.join(filter(None, [str(TESTS), str(ROOT / "src"), os.environ.get("PYTHONPATH")]))


@pytest.fixture(scope="module", autouse=True)
def faulty_importable():
    """``faulty_rewards`` importable here and in spawned reward workers (started lazily, possibly in a later test
    of this module, hence module scope)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(TESTS))
        mp.setenv("PYTHONPATH", PYTHONPATH)
        yield


def score(spec, completions, *, step=5, stats=None, skipped=None):
    return compute_rewards([spec], [f"p{i}" for i in range(len(completions))], completions, {}, step=step,
                           stats=stats, skipped=skipped)[:, 0]


# ----------------------------------------------------------------------------- user code ending the process

#: reward -> how the failure reads (every one misbehaves on a completion of even length)
ENDINGS = {
    "exits_0": "called sys.exit(0) instead of returning",
    "exits_3": "called sys.exit(3) instead of returning",
    "exits_with_message": "called sys.exit('reward gave up on an even completion') instead of returning",
    "raises_system_exit": "called sys.exit() instead of returning",
    "raises_keyboard_interrupt": "raised KeyboardInterrupt instead of returning",
    "os_exits_0": "worker process died (exit code 0)",  # ends the process at once: only survivable in a worker
}
CASES = [
    (fn, isolation, on_error)
    for fn in ENDINGS
    for isolation in ("none", "process")
    for on_error in ("raise", "zero", "skip")
    if not (fn == "os_exits_0" and isolation == "none")
]


@pytest.fixture(scope="module")
def worker_specs():
    """One isolated spec (one worker process) per reward, shared by its on_error variants."""
    specs = {}

    def get(fn):
        if fn not in specs:
            specs[fn] = resolve_reward(f"faulty_rewards:{fn}", isolation="process")
        return specs[fn]

    yield get
    for spec in specs.values():
        spec.worker.close()


@pytest.mark.parametrize(("fn", "isolation", "on_error"), CASES, ids=["-".join(c) for c in CASES])
def test_user_code_ending_the_process_is_a_failure_of_that_reward(fn, isolation, on_error, worker_specs):
    """Each way of ending the process ends in the reward's ``on_error`` (counted, scoring goes on) or in a
    ``RewardFunctionError`` naming the reward, the step and the sample; never in an exit."""
    if isolation == "process":
        spec = dataclasses.replace(worker_specs(fn), on_error=on_error)
    else:
        spec = resolve_reward(f"faulty_rewards:{fn}", on_error=on_error)
    completions = ["a", "bb", "ccc"]  # sample 1 misbehaves
    stats: dict[str, float] = {}
    skipped: set[int] = set()
    with grove_handles_stop_signals():  # as inside the training loop
        if on_error == "raise":
            with pytest.raises(RewardFunctionError) as info:
                score(spec, completions, stats=stats, skipped=skipped)
            message = str(info.value)
            assert re.match(rf"reward '{fn}' at step 5 (raised|failed) on sample 1: ", message), message
            assert ENDINGS[fn] in message and "prompt='p1', completion='bb'" in message, message
            if isolation == "none":
                assert isinstance(info.value.__cause__, UserCodeExit)
            return
        got = score(spec, completions, stats=stats, skipped=skipped)
    assert got[[0, 2]].tolist() == [1.0, 1.0]
    if on_error == "zero":
        assert got[1] == 0.0 and skipped == set()
    else:
        assert torch.isnan(got[1]) and skipped == {1}
    assert stats[f"reward_errors/{fn}"] == 1.0


def test_the_first_failure_log_says_the_reward_called_sys_exit(caplog):
    spec = resolve_reward("faulty_rewards:exits_0", on_error="zero")
    with caplog.at_level(logging.WARNING, logger="grove.rewards"):
        assert score(spec, ["bb", "c"]).tolist() == [0.0, 1.0]
    assert "raised on sample 0: UserCodeExit: reward 'exits_0' called sys.exit(0) instead of returning" in caplog.text


def test_a_keyboard_interrupt_outside_grove_signal_handlers_may_be_ctrl_c(worker_specs):
    """Outside the training loop's handlers a KeyboardInterrupt in the trainer's process may be the user's Ctrl-C
    and stops scoring; a worker ignores SIGINT, so one raised there is always the reward's own failure."""
    with pytest.raises(KeyboardInterrupt):
        score(resolve_reward("faulty_rewards:raises_keyboard_interrupt", on_error="zero"), ["bb"])
    spec = dataclasses.replace(worker_specs("raises_keyboard_interrupt"), on_error="zero")
    assert score(spec, ["bb", "c"]).tolist() == [0.0, 1.0]


def test_a_worker_survives_sys_exit_in_its_reward(worker_specs):
    """``sys.exit`` in an isolated reward is an error sent back; the worker process stays up (no restart)."""
    spec = dataclasses.replace(worker_specs("exits_3"), on_error="zero")
    stats: dict[str, float] = {}
    for _ in range(2):
        assert score(spec, ["bb", "c"], stats=stats).tolist() == [0.0, 1.0]
    assert stats["reward_worker_restarts/exits_3"] == 0.0 and stats["reward_errors/exits_3"] == 2.0


# ----------------------------------------------------------------------------- values beyond float32


@pytest.mark.parametrize("isolation", ["none", "process"])
def test_a_value_beyond_float32_is_a_bad_value_of_that_reward(isolation):
    completions = ["a", "bb", "ccc"]
    strict = resolve_reward("faulty_rewards:huge_on_even_length", isolation=isolation)
    zero, skip = (dataclasses.replace(strict, on_error=on_error) for on_error in ("zero", "skip"))  # one worker
    with pytest.raises(RewardFunctionError, match=r"reward 'huge_on_even_length' at step 5 returned a bad value for "
                       r"sample 1: reward value 1e\+300 overflows float32 .*it would become \+inf.*completion='bb'"):
        score(strict, completions)
    stats: dict[str, float] = {}
    assert score(zero, completions, stats=stats).tolist() == [1.0, 0.0, 3.0]
    assert stats["reward_errors/huge_on_even_length"] == 1.0
    skipped: set[int] = set()
    got = score(skip, completions, skipped=skipped)
    assert got[[0, 2]].tolist() == [1.0, 3.0] and torch.isnan(got[1]) and skipped == {1}
    if strict.worker is not None:
        strict.worker.close()


def test_an_int_beyond_any_float_is_a_bad_value_not_an_overflow_error():
    with pytest.raises(RewardFunctionError, match=r"returned a bad value for sample 1: reward value \(int, magnitude "
                       r"≥ 2\*\*1024\) overflows float32"):
        score(resolve_reward("faulty_rewards:huge_int_on_even_length"), ["a", "bb"])
    zero = resolve_reward("faulty_rewards:huge_int_on_even_length", on_error="zero")
    assert score(zero, ["a", "bb", "ccc"]).tolist() == [1.0, 0.0, 3.0]


def test_float32_max_itself_is_accepted():
    assert score(resolve_reward("faulty_rewards:near_float32_max"), ["a"]).tolist() == [pytest.approx(3e38)]


def test_a_weighted_sum_beyond_float32_names_the_rewards():
    """3e38 fits float32, but weighted by 10 (or added to another 3e38) the combined reward would be inf."""
    script = {0: ["1", "22", "333"], 1: ["4444", "5", "777"]}
    heavy = collect_settings(
        groups=2, group_size=3, rewards=[resolve_reward("faulty_rewards:near_float32_max", weight=10.0)]
    )
    with pytest.raises(RewardFunctionError, match=r"step 3: the weighted rewards of sample 0 \(near_float32_max "
                       r"3e\+38 × weight 10\) add up to 3e\+39 in magnitude, beyond float32's largest value 3\.403e\+38"
                       r".*\(6 sample\(s\) of the round\); scale these rewards or their weights down; "
                       r"prompt='q0', completion='1'"):
        collect_experience(ScriptedEngine(script), make_source([0, 1]), heavy, torch.Generator(), step=3)
    two = collect_settings(
        groups=2, group_size=3,
        rewards=[
            resolve_reward("faulty_rewards:near_float32_max", name="a"),
            resolve_reward("faulty_rewards:near_float32_max", name="b"),
        ],
    )
    with pytest.raises(RewardFunctionError, match=r"\(a 3e\+38 × weight 1, b 3e\+38 × weight 1\) add up to 6e\+38"):
        collect_experience(ScriptedEngine(script), make_source([0, 1]), two, torch.Generator(), step=3)
    # one at weight 1 (and another logged only, weight 0) fits
    fits = collect_settings(
        groups=2, group_size=3,
        rewards=[
            resolve_reward("faulty_rewards:near_float32_max", name="a"),
            resolve_reward("faulty_rewards:near_float32_max", name="b", weight=0.0),
        ],
    )
    exp = collect_experience(ScriptedEngine(script), make_source([0, 1]), fits, torch.Generator(), step=3)
    assert torch.isfinite(exp.scores).all() and torch.isfinite(exp.batch.advantages).all()


# ----------------------------------------------------------------------------- None for every objective

COMBINERS = {
    "sum_then_normalize": {},
    "normalize_then_sum": {"renormalize": "none"},
    "variance_weighted": {},
    "gated": {"constraints": ["format"]},
    "ensemble_min": {},
    "mean_minus_std": {},
}


def none_settings(combiner: str, group_size: int, **overrides):
    return collect_settings(
        groups=2,
        group_size=group_size,
        rewards=[resolve_reward("faulty_rewards:none_checks_on_even_length")],
        combiner=REWARD_COMBINERS.get(combiner),
        combiner_params=REWARD_COMBINERS.validate_params(combiner, COMBINERS[combiner]),
        **overrides,
    )


@pytest.mark.parametrize("combiner", sorted(COMBINERS))
def test_samples_no_reward_applies_to_are_left_out_under_every_combiner(combiner, caplog):
    """A sample whose every objective is None cannot be scored: it leaves the step (counted, warned about once),
    and each group's advantages are those of the group without it."""
    with_none = {0: ["1", "22", "333", "5"], 1: ["4444", "5", "777", "9"]}  # even lengths: every objective None
    without = {0: ["1", "333", "5"], 1: ["5", "777", "9"]}
    settings = none_settings(combiner, 4)
    with caplog.at_level(logging.WARNING, logger="grove.rewards"):
        exp = collect_experience(ScriptedEngine(with_none), make_source([0, 1]), settings, torch.Generator(), step=1)
        again = collect_experience(ScriptedEngine(with_none), make_source([0, 1]), settings, torch.Generator(), step=2)
    ref = collect_experience(
        ScriptedEngine(without), make_source([0, 1]), none_settings(combiner, 3), torch.Generator(), step=1
    )
    assert [m["completion"] for m in exp.batch.metadata] == ["1", "333", "5", "5", "777", "9"]
    assert exp.stats["reward_excluded_samples"] == 2 and again.stats["reward_excluded_samples"] == 2
    assert torch.isfinite(exp.scores).all() and torch.isfinite(exp.batch.advantages).all()
    torch.testing.assert_close(exp.scores, ref.scores)
    torch.testing.assert_close(exp.batch.advantages[:, 0], ref.batch.advantages[:, 0])
    warnings = [r.getMessage() for r in caplog.records if "left out of the step" in r.getMessage()]
    assert len(warnings) == 1, warnings  # once per run
    assert "step 1: 2 of 8 samples are left out" in warnings[0] and "'none_checks_on_even_length'" in warnings[0]


def test_a_reward_returning_none_for_a_sample_is_not_an_on_error_failure():
    """None is 'does not apply' whatever on_error says: not counted as an error, with skip or raise alike."""
    script = {0: ["1", "22", "333"], 1: ["4444", "5", "777"]}
    for on_error in ("raise", "skip", "zero"):
        spec = resolve_reward("faulty_rewards:none_on_even_length", on_error=on_error)
        s = collect_settings(groups=2, group_size=3, rewards=[spec])
        exp = collect_experience(ScriptedEngine(script), make_source([0, 1]), s, torch.Generator(), step=1)
        assert [m["completion"] for m in exp.batch.metadata] == ["1", "333", "5", "777"]
        assert exp.stats["reward_excluded_samples"] == 2 and exp.stats.get("reward_errors/none_on_even_length", 0) == 0
        torch.testing.assert_close(exp.batch.advantages[:, 0], torch.tensor([-0.7071, 0.7071, -0.7071, 0.7071]),
                                   atol=1e-4, rtol=0)


def test_a_round_no_sample_of_which_can_be_scored_is_an_error_naming_the_reward():
    s = collect_settings(groups=2, group_size=3, rewards=[resolve_reward("faulty_rewards:always_none")])
    with pytest.raises(RewardFunctionError, match=r"step 4: no weighted reward applies to any of the 6 samples of the "
                       r"round \(the weighted rewards \('always_none'\) returned None \('does not apply'\) for every "
                       r"objective; .*nothing to train on"):
        collect_experience(ScriptedEngine({0: ["1", "2", "3"], 1: ["4", "5", "6"]}), make_source([0, 1]), s,
                           torch.Generator(), step=4)


def test_rewards_all_logged_only_are_an_error_saying_so():
    s = collect_settings(groups=2, group_size=3, rewards=[resolve_reward("faulty_rewards:pid", weight=0.0)])
    with pytest.raises(RewardFunctionError, match=r"step 1: every reward has weight 0 \(logged only\), so none of the 6 "
                       r"samples of the round can be scored; give at least one reward"):
        collect_experience(ScriptedEngine({0: ["1", "2", "3"], 1: ["4", "5", "6"]}), make_source([0, 1]), s,
                           torch.Generator(), step=1)


def test_dynamic_sampling_counts_a_group_that_lost_samples_as_a_group():
    """Two informative groups, one of which lost a sample nothing applies to, fill a step of two groups."""
    script = {0: ["1", "22", "333"], 1: ["5", "777", "9"]}
    s = collect_settings(
        groups=2, group_size=3, max_rounds=3,
        rewards=[resolve_reward("faulty_rewards:none_on_even_length")],
    )
    engine = ScriptedEngine(script)
    exp = collect_experience(engine, make_source([0, 1, 0, 1, 0, 1]), s, torch.Generator(), step=1)
    assert engine.calls == 1 and exp.stats["dynamic_sampling_rounds"] == 1
    assert exp.stats["dynamic_sampling_filled_groups"] == 0 and exp.batch.num_samples == 5


def test_a_greedy_baseline_no_reward_applies_to_counts_as_zero():
    """ReMax: an unscorable greedy completion is a baseline of 0 (documented), not a combiner error."""
    script = {0: ["1", "333"], 1: ["5", "777"]}  # the greedy completion is the first: both odd...
    even_greedy = {0: ["22", "333", "1"], 1: ["5", "777", "9"]}  # ...here prompt 0's greedy completion is even
    s = collect_settings(
        groups=2, group_size=2, greedy_baseline=True,
        rewards=[resolve_reward("faulty_rewards:none_on_even_length")],
        advantage_fn=ADVANTAGE_ESTIMATORS.get("remax"),
        advantage_params=ADVANTAGE_ESTIMATORS.validate_params("remax", {}),
    )
    exp = collect_experience(ScriptedEngine(script), make_source([0, 1]), s, torch.Generator(), step=1)
    assert torch.isfinite(exp.batch.advantages).all()
    exp = collect_experience(ScriptedEngine(even_greedy), make_source([0, 1]), s, torch.Generator(), step=1)
    assert exp.batch.baseline_scores[0] == 0.0 and torch.isfinite(exp.batch.advantages).all()


# ----------------------------------------------------------------------------- end to end: grove train


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    return create_tiny_model_dir(tmp_path_factory.mktemp("tiny") / "model", seed=0)


def train(model: Path, out: Path, rewards: str, **extra) -> subprocess.CompletedProcess:
    """``grove train`` in a process of its own on the tiny model (2 steps), with user rewards importable from
    tests/."""
    values = {
        "rewards": rewards, "train.steps": 2, "eval.before_training": False, "logging.tensorboard": False, **extra
    }
    env = {**os.environ, "PYTHONPATH": PYTHONPATH}
    argv = ["train", "examples/arithmetic.yaml", *base_overrides(model, out, **values)]
    return run_grove(argv, env, ROOT, out.parent / f"{out.name}-logs")


def metric_rows(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def error_line(result: subprocess.CompletedProcess) -> str:
    """The one ``error: ...`` line of a failed run (and no traceback)."""
    assert "Traceback" not in result.stderr, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1, result.stderr
    return lines[0]


@pytest.mark.parametrize(
    ("fn", "ending"),
    [("exits_0", "called sys.exit(0)"), ("raises_keyboard_interrupt", "raised KeyboardInterrupt")],
)
def test_train_stops_with_an_error_naming_a_reward_that_ends_the_process(tiny_model, tmp_path, fn, ending):
    result = train(tiny_model, tmp_path / "run", f"[{{id: 'faulty_rewards:{fn}'}}]")
    assert result.returncode == 2, result.stderr
    line = error_line(result)
    assert re.match(rf"error: reward '{fn}' at step 1 raised on sample \d+: UserCodeExit: reward '{fn}' {re.escape(ending)}"
                    r" instead of returning", line), line


def test_train_goes_on_past_sys_exit_with_on_error_zero_and_in_a_worker(tiny_model, tmp_path):
    out = tmp_path / "run"
    rewards = ("[{id: 'faulty_rewards:exits_3', on_error: zero}, "
               "{id: 'faulty_rewards:exits_with_message', on_error: skip, isolation: process}]")
    result = train(tiny_model, out, rewards)
    assert result.returncode == 0, result.stderr
    rows = metric_rows(out)
    assert [r["step"] for r in rows] == [1, 2]
    assert sum(r["reward_errors/exits_3"] for r in rows) > 0 and sum(r["reward_errors/exits_with_message"] for r in rows) > 0
    assert all(r["reward_worker_restarts/exits_with_message"] == 0 for r in rows)  # the worker survived sys.exit
    assert all(math.isfinite(r["loss"]) for r in rows)
    assert [p.name for p in (out / "checkpoints").iterdir()] == ["step-000002"]
    assert "called sys.exit(3) instead of returning" in result.stderr  # the first failure, logged once


def test_train_leaves_out_samples_no_reward_applies_to_and_evaluates_them(tiny_model, tmp_path):
    out = tmp_path / "run"
    result = train(tiny_model, out, "[{id: 'faulty_rewards:none_checks_on_even_length'}]",
                   **{"eval.before_training": True})
    assert result.returncode == 0, result.stderr
    rows = metric_rows(out)
    assert [r["step"] for r in rows] == [1, 2]
    assert sum(r["reward_excluded_samples"] for r in rows) > 0
    assert all(math.isfinite(r["loss"]) for r in rows)
    assert result.stderr.count("left out of the step") == 1  # warned once per run
    evals = [json.loads(line) for line in (out / "eval.jsonl").read_text().splitlines()]
    assert [e["step"] for e in evals] == [0, 2]
    assert all(e["objective/format/n"] < e["total"] for e in evals)  # the held-out samples None applies to


def test_train_stops_with_an_error_when_no_reward_applies_to_a_round(tiny_model, tmp_path):
    result = train(tiny_model, tmp_path / "run", "[{id: 'faulty_rewards:always_none'}]")
    assert result.returncode == 2, result.stderr
    assert error_line(result).startswith(
        "error: step 1: no weighted reward applies to any of the 12 samples of the round (the weighted rewards "
        "('always_none') returned None"
    )


def test_train_goes_on_past_values_beyond_float32_and_stops_on_an_overflowing_weighted_sum(tiny_model, tmp_path):
    out = tmp_path / "huge"
    result = train(tiny_model, out, "[{id: 'faulty_rewards:huge_on_even_length', on_error: zero}]")
    assert result.returncode == 0, result.stderr
    rows = metric_rows(out)
    assert [r["step"] for r in rows] == [1, 2]
    assert sum(r["reward_errors/huge_on_even_length"] for r in rows) > 0
    assert all(r["skipped_optimizer_steps"] == 0 and math.isfinite(r["loss"]) for r in rows)

    result = train(tiny_model, tmp_path / "heavy", "[{id: 'faulty_rewards:near_float32_max', weight: 10}]")
    assert result.returncode == 2, result.stderr
    assert error_line(result).startswith(
        "error: step 1: the weighted rewards of sample 0 (near_float32_max 3e+38 × weight 10) add up to 3e+39"
    )


# ----------------------------------------------------------------------------- workers die with the trainer

_TRAINER = textwrap.dedent(
    """
    import sys, threading
    from grove.rewards.scoring import resolve_reward

    spec = resolve_reward("faulty_rewards:hangs", isolation="process")

    def hang():
        spec.worker.call({"prompts": ["p"], "completions": ["warm"]})  # starts the worker
        print("ready", flush=True)
        spec.worker.call({"prompts": ["p"], "completions": ["HANG"]})  # hangs for a minute

    if sys.argv[1] == "main":
        hang()
    else:  # a worker started from another thread: only the watchdog can notice the trainer's death
        thread = threading.Thread(target=hang)
        thread.start()
        thread.join()
    """
)


def _children(pid: int) -> list[tuple[int, str]]:
    """``(pid, start time)`` of the processes whose parent is ``pid`` (a /proc scan)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.append((int(entry.name), fields[19]))
    return found


def _alive(pid: int, start: str) -> bool:
    """The process (the same one: same start time) still runs (a zombie has ended)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return False
    return fields[19] == start and fields[0] != "Z"


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc to find the processes")
@pytest.mark.parametrize("thread", ["main", "other"])
def test_a_killed_trainer_leaves_no_reward_worker_or_resource_tracker(tmp_path, thread):
    trainer = subprocess.Popen(
        [sys.executable, "-c", _TRAINER, thread], cwd=ROOT, env={**os.environ, "PYTHONPATH": PYTHONPATH},
        stdout=subprocess.PIPE, text=True,
    )
    children: list[tuple[int, str]] = []
    try:
        assert trainer.stdout.readline().strip() == "ready"
        children = _children(trainer.pid)
        assert len(children) == 2, children  # the reward worker and multiprocessing's resource tracker
        os.kill(trainer.pid, signal.SIGKILL)
        trainer.wait(10)
        deadline = time.monotonic() + 10
        while any(_alive(*c) for c in children) and time.monotonic() < deadline:
            time.sleep(0.1)
        left = [pid for pid, start in children if _alive(pid, start)]
        assert not left, f"processes outlived the killed trainer: {left}"
    finally:
        for pid, start in children:  # whatever outlived it is ended here (by pid, the processes recorded above)
            if _alive(pid, start):
                os.kill(pid, signal.SIGKILL)
        if trainer.poll() is None:
            trainer.kill()
        trainer.stdout.close()
