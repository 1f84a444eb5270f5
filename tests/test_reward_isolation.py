"""Rewards that fail, hang or crash (``on_error``, ``isolation: process``, ``timeout_s``), and environment calls
that hang (``env.step_timeout_s``): the run goes on, the failures are counted."""

from __future__ import annotations

import json
import logging
import math
import os
import time
from pathlib import Path

import pytest
import torch
from pydantic import ValidationError
from tests.test_experience_completion_collection import ScriptedEngine, collect_experience, make_source
from tests.test_experience_completion_collection import settings as collect_settings

import grove.builtin_components  # noqa: F401
from grove.config.env_section import EnvConfig
from grove.config.sections import RewardConfig
from grove.envs.actions import ParsedAction
from grove.envs.base import EnvironmentSuite, Observation, Transition
from grove.experience.episodes import EpisodeSettings, run_episodes
from grove.experience.per_step_prompts import PerStepPrompter
from grove.rewards.scoring import (
    RewardFunctionError,
    RewardLoadError,
    compute_rewards,
    resolve_reward,
    resolve_rewards,
)
from grove.rollout.engine import SamplingParams
from grove.rollout.hf_engine import TransformersEngine

TESTS = Path(__file__).resolve().parent


@pytest.fixture(autouse=True)
def faulty_importable(monkeypatch):
    """``faulty_rewards`` importable here and in spawned reward workers."""
    monkeypatch.syspath_prepend(str(TESTS))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")])))


def score(spec, completions, *, step=1, stats=None, skipped=None):
    return compute_rewards([spec], [f"p{i}" for i in range(len(completions))], completions, {}, step=step,
                           stats=stats, skipped=skipped)[:, 0]


def lengths(completions):
    return torch.tensor([float(len(c)) for c in completions])


# ----------------------------------------------------------------------------- config


def test_config_keys_and_their_validation():
    r = RewardConfig(id="faulty_rewards:hangs", isolation="process", timeout_s=2, on_error="zero")
    assert (r.isolation, r.timeout_s, r.on_error, r.params) == ("process", 2.0, "zero", {})
    default = RewardConfig(id="answer_match", extract="last_number")
    assert (default.on_error, default.isolation, default.timeout_s) == ("raise", "none", None)
    assert default.params == {"extract": "last_number"}  # the new keys are not reward parameters
    with pytest.raises(ValidationError, match="timeout_s needs isolation: process.*set isolation: process"):
        RewardConfig(id="faulty_rewards:hangs", timeout_s=2)
    with pytest.raises(ValidationError, match="on_error"):
        RewardConfig(id="faulty_rewards:hangs", on_error="ignore")
    with pytest.raises(ValidationError, match="timeout_s"):
        RewardConfig(id="faulty_rewards:hangs", isolation="process", timeout_s=0)
    with pytest.raises(ValidationError, match="step_timeout_s"):
        EnvConfig(id="frozenlake", step_timeout_s=-1)
    assert EnvConfig(id="frozenlake").step_timeout_s is None

    specs = resolve_rewards([r, default])
    assert (specs[0].on_error, specs[0].isolation, specs[0].timeout_s) == ("zero", "process", 2.0)
    assert specs[0].worker is not None and not specs[0].worker.running  # started lazily
    assert specs[1].worker is None and not specs[1].tolerant


def test_resolve_checks_failure_settings_and_picklability():
    with pytest.raises(RewardLoadError, match="timeout_s needs isolation 'process'"):
        resolve_reward("faulty_rewards:hangs", timeout_s=1.0)
    with pytest.raises(RewardLoadError, match="on_error must be"):
        resolve_reward("faulty_rewards:hangs", on_error="ignore")
    import faulty_rewards

    faulty_rewards.local_lambda = lambda prompts, completions, **kw: [1.0 for _ in completions]
    try:
        with pytest.raises(RewardLoadError, match="cannot be pickled.*isolation: none"):
            resolve_reward("faulty_rewards:local_lambda", isolation="process")
    finally:
        del faulty_rewards.local_lambda
    # a registered reward is sent to its worker as the registered function plus its params
    spec = resolve_reward("answer_match", {"extract": "last_number"}, isolation="process")
    values = compute_rewards([spec], ["q", "q"], ["it is 7", "it is 8"], {"answer": ["7", "7"]}, step=1)
    assert values[:, 0].tolist() == [1.0, 0.0]
    spec.worker.close()


# ----------------------------------------------------------------------------- in-process on_error


def test_raise_is_unchanged_and_names_the_sample():
    spec = resolve_reward("faulty_rewards:raises_on_bad")
    assert not spec.tolerant
    with pytest.raises(RewardFunctionError, match=r"reward 'raises_on_bad' at step 3 raised on sample 1: "
                       r"ZeroDivisionError: boom on a bad completion; prompt='p1', completion='a BAD one'") as info:
        score(spec, ["fine", "a BAD one", "ok"], step=3)
    assert isinstance(info.value.__cause__, ZeroDivisionError)


def test_zero_and_skip_give_only_the_failing_samples_the_fallback(caplog):
    completions = ["fine", "a BAD one", "ok", "BAD"]
    stats: dict[str, float] = {}
    zero = resolve_reward("faulty_rewards:raises_on_bad", on_error="zero", name="zeroed")
    with caplog.at_level(logging.WARNING, logger="grove.rewards"):
        got = score(zero, completions, stats=stats)
        score(zero, completions, stats=stats)  # a second failing call: counted, not logged again
    assert got.tolist() == [4.0, 0.0, 2.0, 0.0]
    assert stats == {"reward_errors/zeroed": 4.0, "reward_timeouts/zeroed": 0.0, "reward_batch_retries/zeroed": 2.0}
    logged = [r for r in caplog.records if r.name == "grove.rewards"]
    assert len(logged) == 1
    message = logged[0].getMessage()
    assert "reward 'zeroed' at step 1 failed on 2 of 4 samples" in message and "raised on sample 1" in message
    assert "ZeroDivisionError: boom" in message and "Traceback" in message  # the traceback, once

    skip = resolve_reward("faulty_rewards:raises_on_bad", on_error="skip")
    skipped: set[int] = set()
    got = score(skip, completions, skipped=skipped)
    assert got[[0, 2]].tolist() == [4.0, 2.0] and torch.isnan(got[[1, 3]]).all()
    assert skipped == {1, 3}


def test_nan_values_are_still_rejected_by_default_and_handled_by_on_error():
    completions = ["one", "ODD two", "three", "ODD"]
    with pytest.raises(RewardFunctionError, match="returned a bad value for sample 1: .*not finite"):
        score(resolve_reward("faulty_rewards:nan_on_odd"), completions)
    stats: dict[str, float] = {}
    zero = score(resolve_reward("faulty_rewards:nan_on_odd", on_error="zero"), completions, stats=stats)
    assert zero.tolist() == [3.0, 0.0, 5.0, 0.0] and stats["reward_errors/nan_on_odd"] == 2
    skipped: set[int] = set()
    skip = score(resolve_reward("faulty_rewards:nan_on_odd", on_error="skip"), completions, skipped=skipped)
    assert skip[[0, 2]].tolist() == [3.0, 5.0] and torch.isnan(skip[[1, 3]]).all() and skipped == {1, 3}


def test_default_settings_add_no_metrics():
    stats: dict[str, float] = {}
    score(resolve_reward("faulty_rewards:pid"), ["a", "b"], stats=stats)
    assert stats == {}


# ----------------------------------------------------------------------------- worker process


def test_process_isolation_scores_in_a_worker_and_recovers_a_raising_sample():
    completions = ["fine", "a BAD one", "ok"]
    spec = resolve_reward("faulty_rewards:raises_on_bad", isolation="process", on_error="zero")
    stats: dict[str, float] = {}
    assert score(spec, completions, stats=stats).tolist() == [4.0, 0.0, 2.0]
    assert stats == {
        "reward_errors/raises_on_bad": 1.0, "reward_timeouts/raises_on_bad": 0.0,
        "reward_worker_restarts/raises_on_bad": 0.0, "reward_batch_retries/raises_on_bad": 1.0,
    }
    pid = resolve_reward("faulty_rewards:pid", isolation="process")
    first = score(pid, ["a", "b"])
    assert first[0] != os.getpid() and torch.equal(score(pid, ["c"]), first[:1])  # one long-lived worker
    # on_error raise under isolation: the sample is still named, with the reward's own exception type
    strict = resolve_reward("faulty_rewards:raises_on_bad", isolation="process")
    with pytest.raises(RewardFunctionError, match="at step 1 raised on sample 1: ZeroDivisionError: boom") as info:
        score(strict, completions)
    assert "raise ZeroDivisionError" in "".join(info.value.__cause__.__notes__)  # the worker's traceback
    for s in (spec, pid, strict):
        s.worker.close()


def test_a_worker_whose_reward_needs_no_torch_starts_without_it():
    """The worker imports the reward's module and grove's worker loop (standard library only), not torch."""
    spec = resolve_reward("faulty_rewards:torch_loaded", isolation="process")
    assert score(spec, ["a", "b"]).tolist() == [0.0, 0.0]
    spec.worker.close()


def test_a_hanging_reward_is_cut_off_and_its_worker_restarted(caplog):
    spec = resolve_reward("faulty_rewards:hangs", isolation="process", timeout_s=2, on_error="zero")
    assert score(spec, ["warm", "up"]).tolist() == [4.0, 2.0]  # starts the worker (not timed)
    stats: dict[str, float] = {}
    start = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="grove.rewards"):
        got = score(spec, ["x", "HANG here", "yz"], stats=stats)
    assert time.monotonic() - start < 10
    assert got.tolist() == [0.0, 0.0, 0.0]  # a timed-out batch fails as a whole (not re-run per sample)
    assert stats == {"reward_errors/hangs": 3.0, "reward_timeouts/hangs": 1.0, "reward_worker_restarts/hangs": 0.0,
                     "reward_batch_retries/hangs": 0.0}
    assert "timed out after 2 s" in caplog.text
    stats = {}
    assert score(spec, ["abc"], stats=stats).tolist() == [3.0]  # a fresh worker
    assert stats["reward_worker_restarts/hangs"] == 1.0 and stats["reward_errors/hangs"] == 0.0

    strict = resolve_reward("faulty_rewards:hangs", isolation="process", timeout_s=1)
    with pytest.raises(RewardFunctionError, match=r"reward 'hangs' at step 7 failed on the batch of 1 samples: "
                       r"timed out after 1 s"):
        score(strict, ["HANG"], step=7)
    for s in (spec, strict):
        s.worker.close()


@pytest.mark.parametrize(
    ("fn", "marker", "exit_code"), [("segfaults", "CRASH", "-11, SIGSEGV"), ("exits", "EXIT", "3")]
)
def test_a_crashing_reward_kills_only_its_worker(fn, marker, exit_code):
    completions = ["fine", f"{marker}!", "ok"]
    skip = resolve_reward(f"faulty_rewards:{fn}", isolation="process", on_error="skip")
    stats: dict[str, float] = {}
    skipped: set[int] = set()
    got = score(skip, completions, stats=stats, skipped=skipped)  # batch crash → one sample per call in the worker
    assert got[[0, 2]].tolist() == [4.0, 2.0] and torch.isnan(got[1]) and skipped == {1}
    assert stats[f"reward_errors/{fn}"] == 1.0 and stats[f"reward_timeouts/{fn}"] == 0.0
    assert stats[f"reward_worker_restarts/{fn}"] == 2.0  # after the batch's crash and after sample 1's
    strict = resolve_reward(f"faulty_rewards:{fn}", isolation="process")
    # on_error raise: the batch is re-scored one sample per call, so the message names the sample that crashed
    with pytest.raises(RewardFunctionError, match=rf"reward '{fn}' at step 2 failed on sample 1: worker process "
                       rf"died \(exit code {exit_code}\); prompt='p1', completion='{marker}!' \(isolation: process"):
        score(strict, completions, step=2)
    assert score(strict, ["after"]).tolist() == [5.0]  # restarted
    for s in (skip, strict):
        s.worker.close()


# ----------------------------------------------------------------------------- skip in a training step


def test_a_skipped_sample_leaves_the_step_and_the_advantages_stay_finite():
    script = {0: ["1", "22", "BAD"], 1: ["333", "4", "55"]}
    only = collect_settings(
        groups=2, group_size=3, rewards=[resolve_reward("faulty_rewards:raises_on_bad", on_error="skip")]
    )
    exp = collect_experience(ScriptedEngine(script), make_source([0, 1]), only, torch.Generator(), step=1)
    # no other weighted reward applies to the failing sample: it is left out of the step
    assert [m["completion"] for m in exp.batch.metadata] == ["1", "22", "333", "4", "55"]
    assert torch.isfinite(exp.batch.advantages).all() and torch.isfinite(exp.scores).all()
    assert exp.stats["reward_errors/raises_on_bad"] == 1 and exp.stats["reward_excluded_samples"] == 1
    # group 0 is normalised over its two remaining samples only
    torch.testing.assert_close(exp.batch.advantages[:2, 0], torch.tensor([-0.70710, 0.70710]), atol=1e-5, rtol=0)

    # with another weighted reward the sample stays, scored by that reward alone (NaN = does not apply)
    both = collect_settings(
        groups=2,
        group_size=3,
        rewards=[
            resolve_reward("faulty_rewards:raises_on_bad", on_error="skip"),
            resolve_reward("faulty_rewards:pid", weight=0.0),  # logged only: does not make a sample scorable
            resolve_reward("answer_match", {"extract": "full"}, name="acc"),
        ],
    )
    exp = collect_experience(ScriptedEngine(script), make_source([0, 1]), both, torch.Generator(), step=1)
    assert exp.batch.num_samples == 6 and exp.stats["reward_excluded_samples"] == 0
    assert torch.isnan(exp.batch.rewards[2, 0]) and torch.isfinite(exp.batch.advantages).all()

    everything = {0: ["BAD", "BAD", "BAD"], 1: ["BAD", "BAD", "BAD"]}
    with pytest.raises(RewardFunctionError, match=r"no weighted reward applies to any of the 6 samples of the round "
                       r"\(every sample was skipped by a failing reward"):
        collect_experience(ScriptedEngine(everything), make_source([0, 1]), only, torch.Generator(), step=1)


# ----------------------------------------------------------------------------- environment step timeout


class Sleepy:
    """Steps take ``sleep`` seconds on odd task ids once past position 1; resets hang for task 5."""

    def __init__(self, sleep: float) -> None:
        self.sleep = sleep
        self.task_id = 0
        self.position = 0

    def reset(self, task_id: int, seed: int) -> Observation:
        self.task_id, self.position = task_id, 0
        if task_id == 5:
            time.sleep(self.sleep)
        return Observation(text=f"at {self.position}", anchor=self.position)

    def step(self, action: str) -> Transition:
        self.position += 1
        if self.task_id % 2 == 1 and self.position >= 2:
            time.sleep(self.sleep)
        return Transition(Observation(text=f"at {self.position}", anchor=self.position), 0.0, False, {})


def sleepy(params: dict) -> EnvironmentSuite:
    sleep = float(params.get("sleep", 30))
    return EnvironmentSuite(name="sleepy", make=lambda: Sleepy(sleep), train_tasks=[0, 1, 5], eval_tasks=[100],
                            instructions="Say anything.")


def _go_episodes(model, tokenizer, suite, starts, timeout=None):
    """Episodes of ``suite`` whose every action is "go", 3 turns at most, each environment call limited to
    ``timeout`` seconds (``None``: called directly)."""
    settings = EpisodeSettings(
        make_env=suite.make,
        make_prompter=lambda: PerStepPrompter(
            tokenizer, suite.instructions, history=1, show_admissible=False, max_turns=3
        ),
        parse=lambda text, obs: ParsedAction("go", True),
        sampling=SamplingParams(temperature=1.0, max_new_tokens=3),
        max_turns=3,
        invalid_penalty=0.1,
        env_name="sleepy",
        step_timeout_s=timeout,
    )
    return run_episodes(
        TransformersEngine(model, tokenizer), settings, starts, group_size=2,
        generator=torch.Generator().manual_seed(0),
    )


def test_a_hanging_environment_step_ends_its_trajectory_and_the_run_goes_on(policy, caplog):
    model, tokenizer = policy
    start = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="grove.experience"):
        run = _go_episodes(model, tokenizer, sleepy({"sleep": 30}), [(0, 1), (1, 2), (5, 3)], timeout=1.0)
    # 2 hung resets (task 5) + 2 hung steps (task 1), each cut off after 1 s
    assert time.monotonic() - start < 15
    assert run.errors == 4
    by_task = {t: [tr for tr in run.trajectories if tr.task_id == t] for t in (0, 1, 5)}
    assert all(not tr.failed and len(tr.turns) == 3 for tr in by_task[0])  # the run went on
    for tr in by_task[1]:
        assert tr.failed and len(tr.turns) == 2 and "EnvironmentTimeout: step did not return within 1 s" in tr.error
    for tr in by_task[5]:
        assert tr.failed and not tr.turns and "reset did not return within 1 s" in tr.error
    assert "environment sleepy raised" in caplog.text

    # without a limit the calls are made directly
    run = _go_episodes(model, tokenizer, sleepy({"sleep": 0.0}), [(1, 2)])
    assert run.errors == 0 and all(len(tr.turns) == 3 for tr in run.trajectories)


# ----------------------------------------------------------------------------- end to end


@pytest.mark.parametrize(
    "rewards",
    [
        "[{id: 'faulty_rewards:raises_on_even_length', on_error: zero}]",
        "[{id: 'faulty_rewards:raises_on_even_length', on_error: skip, isolation: process, timeout_s: 2}, "
        "{id: answer_match, extract: last_number}]",
    ],
    ids=["zero-in-process", "skip-in-a-worker"],
)
def test_train_goes_on_past_a_failing_reward_and_logs_its_errors(tmp_path, rewards):
    from tests.test_train_e2e import base_overrides, run_cli

    from grove.models.tiny import create_tiny_model_dir

    model = create_tiny_model_dir(tmp_path / "model", seed=0)
    out = tmp_path / "run"
    overrides = base_overrides(
        model, out,
        **{
            "rewards": rewards,
            "train.steps": 2,
            "eval.before_training": False,
            "checkpoint.every": 2,
            "logging.tensorboard": False,
        },
    )
    result = run_cli(["train", "examples/arithmetic.yaml", *overrides])
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    assert all("reward_errors/raises_on_even_length" in r and "reward_timeouts/raises_on_even_length" in r for r in rows)
    assert sum(r["reward_errors/raises_on_even_length"] for r in rows) > 0
    assert all(math.isfinite(r["loss"]) for r in rows)
    if "process" in rewards:
        assert all(r["reward_worker_restarts/raises_on_even_length"] == 0 for r in rows)


def test_env_step_timeout_from_the_config_reaches_the_episode_loop(policy, monkeypatch):
    """`env.step_timeout_s` in a config is what the rollout loop uses (EnvironmentSource.play passes it on)."""
    import grove.experience.environment as environment
    from grove.experience import SourceContext, build_experience_source
    from grove.resolve import load_config, resolve
    from grove.rollout.hf_engine import TransformersEngine

    model, tokenizer = policy
    cfg = load_config(None, [
        "env={id: 'tests.agent_envs:corridor', params: {length: 3}, max_turns: 2, action_parser: {id: raw}, "
        "step_timeout_s: 0.5}",
    ])
    seen = {}
    real = environment.run_episodes

    def spy(engine, settings, *args, **kwargs):
        seen["settings"] = settings
        return real(engine, settings, *args, **kwargs)

    monkeypatch.setattr(environment, "run_episodes", spy)
    source = build_experience_source(SourceContext.for_evaluation(resolve(cfg, "eval"), TransformersEngine(model, tokenizer), tokenizer))
    source.play([(0, 0)], 1, source.sampling)
    assert seen["settings"].step_timeout_s == 0.5
