"""A user's environment cannot crash the run, end it silently, or run past the model's context.

Every fault comes from an environment loaded by import path (``tests/faulty_envs.py``), as a user's own would be:
one that calls ``sys.exit`` or raises ``KeyboardInterrupt`` (in its factory, ``make``, ``reset``, ``step`` or
``summarize``), returns malformed results, produces observations longer than the model's context, or hangs.
A copy's fault ends only its own trajectory, counted by kind; the other trajectories and the run go on.
"""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.faulty_envs import MALFORMED_RESET, MALFORMED_STEP, VALID_STEP
from tests.test_experience_environments import env_args
from typer.testing import CliRunner

from grove.cli import app
from grove.envs import build_environment
from grove.envs.actions import ParsedAction
from grove.experience import SourceContext, build_experience_source
from grove.experience.env_failures import EnvironmentFailedError
from grove.experience.episode_metrics import environment_summary
from grove.experience.episodes import EpisodeSettings, run_episodes
from grove.experience.per_step_prompts import PerStepPrompter
from grove.experience.step_results import MalformedEnvironmentResult
from grove.experience.trajectory_batch import trajectories_to_batch
from grove.resolve import load_config, resolve
from grove.rollout.engine import SamplingParams
from grove.rollout.hf_engine import TransformersEngine
from grove.user_code import UserCodeExit, grove_handles_stop_signals

TESTS = Path(__file__).resolve().parent
MAX_TURNS = 3


@pytest.fixture(autouse=True)
def faulty_envs_importable(monkeypatch):
    """``faulty_envs`` importable by its import path, as a user's module on ``sys.path``."""
    monkeypatch.syspath_prepend(str(TESTS))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")])))


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    from grove.models.tiny import create_tiny_model_dir

    return create_tiny_model_dir(tmp_path_factory.mktemp("tiny") / "model", seed=0)


def go_right(text, observation):
    """Every answer is the action ``right``: each turn steps the environment."""
    return ParsedAction("right", True)


def play(policy, params=None, *, factory="faulty", starts=((0, 10), (1, 11)), group_size=2, timeout=None, seed=0):
    """Episodes of ``faulty_envs:<factory>`` with ``params``: task 0 (plays normally) and task 1 (misbehaves)."""
    model, tokenizer = policy
    suite = build_environment(f"faulty_envs:{factory}", params or {})
    settings = EpisodeSettings(
        make_env=suite.make,
        make_prompter=lambda: PerStepPrompter(
            tokenizer, suite.instructions, history=1, show_admissible=True, max_turns=MAX_TURNS
        ),
        parse=go_right,
        sampling=SamplingParams(temperature=1.0, max_new_tokens=4),
        max_turns=MAX_TURNS,
        invalid_penalty=0.1,
        env_name=suite.name,
        step_timeout_s=timeout,
    )
    return run_episodes(
        TransformersEngine(model, tokenizer),
        settings,
        list(starts),
        group_size=group_size,
        generator=torch.Generator().manual_seed(seed),
    )


def env_source(policy, env: str):
    """The experience source of a config with ``env`` (its model's context comes from the engine's model)."""
    model, tokenizer = policy
    cfg = load_config(None, [f"env={env}", "rollout.max_new_tokens=4"])
    return build_experience_source(SourceContext.for_evaluation(resolve(cfg, "eval"), TransformersEngine(model, tokenizer), tokenizer))


def invoke(args: list[str]):
    """The command line as a user runs it; exceptions are kept in the result (``result.exception``)."""
    return CliRunner().invoke(app, args)


def metrics(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def env_spec(params: str, *, factory: str = "faulty", extra: str = "") -> str:
    return f"{{id: 'faulty_envs:{factory}', params: {params}, max_turns: 3, action_parser: {{id: raw}}{extra}}}"


# ------------------------------------------------------------------------------ sys.exit and KeyboardInterrupt
@pytest.mark.parametrize("timeout", [None, 5.0], ids=["direct", "worker-thread"])
@pytest.mark.parametrize("where", ["make", "reset", "step"])
@pytest.mark.parametrize("fault", ["exit", "interrupt"])
def test_an_environment_that_exits_ends_only_its_own_trajectory(policy, fault, where, timeout):
    """``sys.exit`` (and, while grove handles the stop signals, ``KeyboardInterrupt``) in ``make``, ``reset`` or
    ``step``, called directly or from the worker thread of ``step_timeout_s``, is an environment error."""
    name = f"exits-{fault}-{where}"
    with grove_handles_stop_signals():
        run = play(policy, {"fault": fault, "where": where, "name": name}, timeout=timeout)
    # make: every other copy made misbehaves (copies 1 and 3); reset, step: the copies of the odd task
    bad = [k % 2 == 1 if where == "make" else t.task_id % 2 == 1 for k, t in enumerate(run.trajectories)]
    said = "called sys.exit(3)" if fault == "exit" else "raised KeyboardInterrupt"
    for t, is_bad in zip(run.trajectories, bad, strict=True):
        if is_bad:
            assert t.failed and t.error_kind == "exited", t
            assert t.error.startswith(f"UserCodeExit: environment {name!r} {where} {said}"), t.error
            assert len(t.turns) == (1 if where == "step" else 0)
        else:
            assert not t.failed and len(t.turns) == MAX_TURNS
    assert run.errors == run.error_kinds["exited"] == sum(bad) == 2


def test_a_keyboard_interrupt_outside_grove_s_signal_handlers_still_stops_the_rollout(policy):
    """Outside the training loop (``grove eval``, start-up) a ``KeyboardInterrupt`` may be the user's Ctrl-C."""
    with pytest.raises(KeyboardInterrupt):
        play(policy, {"fault": "interrupt", "where": "step"})


def test_a_factory_that_exits_is_an_error_naming_the_environment():
    with pytest.raises(UserCodeExit, match=r"environment 'faulty_envs:exiting_factory' factory called sys.exit\(0\)"):
        build_environment("faulty_envs:exiting_factory", {})


def test_a_summarize_hook_that_exits_or_returns_no_numbers_is_an_error_naming_the_environment(policy):
    run = play(policy)
    with pytest.raises(UserCodeExit, match=r"environment 'bad_summarize' summarize called sys.exit\(0\)"):
        environment_summary(build_environment("faulty_envs:bad_summarize", {"summary": "exit"}), run.trajectories)
    with pytest.raises(MalformedEnvironmentResult, match="'bad_summarize' summarize returned NoneType; it must return"):
        environment_summary(build_environment("faulty_envs:bad_summarize", {"summary": "none"}), run.trajectories)
    with pytest.raises(MalformedEnvironmentResult, match=r"returned 'routing_accuracy': 'high' \(str\)"):
        environment_summary(build_environment("faulty_envs:bad_summarize", {"summary": "strings"}), run.trajectories)


@pytest.mark.parametrize("fault", ["exit", "interrupt"])
def test_training_goes_on_past_environment_steps_that_exit(tiny_model, tmp_path, fault):
    """Through the command line: the odd tasks' copies call ``sys.exit(3)`` (or raise ``KeyboardInterrupt``, which
    the training loop's signal handling makes the environment's own) at their second step; the run finishes."""
    out = tmp_path / "run"
    env = env_spec(f"{{fault: {fault}, where: step, at: 2, all_tasks: false}}")
    result = invoke(["train", *env_args(tiny_model, out, env=env, **{"train.steps": 2, "eval.before_training": False})])
    assert result.exit_code == 0, (result.output, result.exception)
    rows = metrics(out)
    assert [r["step"] for r in rows] == [1, 2]
    assert sum(r["environment_errors/exited"] for r in rows) > 0
    assert all(r["environment_errors"] == r["environment_errors/exited"] for r in rows)


def test_a_factory_that_exits_stops_the_command_with_a_message_naming_the_environment(tiny_model, tmp_path):
    """Not a silent exit with code 0: one error line naming the environment's factory, exit code 2."""
    result = invoke(["train", *env_args(tiny_model, tmp_path / "run", env="{id: 'faulty_envs:exiting_factory'}")])
    assert result.exit_code == 2, (result.output, result.exception)
    assert "environment 'faulty_envs:exiting_factory' factory called sys.exit(0)" in result.output, result.output
    assert "Traceback" not in result.output


def test_a_summarize_hook_that_exits_stops_the_command_with_a_message_naming_the_environment(tiny_model, tmp_path):
    """The hook runs in the evaluation before training: one error line naming it, exit code 2."""
    env = env_spec("{summary: exit}", factory="bad_summarize")
    result = invoke(["train", *env_args(tiny_model, tmp_path / "run", env=env)])
    assert result.exit_code == 2, (result.output, result.exception)
    assert "error: environment 'bad_summarize' summarize called sys.exit(0)" in result.output, result.output
    assert "Traceback" not in result.output


# ------------------------------------------------------------------------------ malformed results
@pytest.mark.parametrize("name", sorted(MALFORMED_STEP))
def test_a_malformed_step_result_ends_only_its_trajectory_with_a_named_counted_error(policy, name, caplog):
    _, kind, phrase = MALFORMED_STEP[name]
    env_name = f"malformed-step-{name}"
    with caplog.at_level(logging.WARNING, logger="grove.experience"):
        run = play(policy, {"fault": name, "where": "step", "at": 2, "name": env_name})
    for t in run.trajectories:
        if t.task_id % 2 == 1:  # the second step's result is malformed: the trajectory ends there
            assert t.failed and t.error_kind == "malformed" and len(t.turns) == 2, t
            assert t.error.startswith(f"MalformedEnvironmentResult: environment {env_name!r} step returned"), t.error
            assert phrase in t.error, (phrase, t.error)
            assert not t.done and not t.turns[-1].done and t.turns[-1].reward == 0.0
        else:
            assert not t.failed and len(t.turns) == MAX_TURNS
    assert run.error_kinds == {"raised": 0, "exited": 0, "timeout": 0, "malformed": 2}
    assert caplog.text.count(f"environment {env_name!r} step returned") == 1  # said once, then counted
    batch, _ = trajectories_to_batch(run.trajectories, 2)
    assert batch.steps.num_steps == 2 * MAX_TURNS + 2 * 2


@pytest.mark.parametrize("name", sorted(MALFORMED_RESET))
def test_a_malformed_reset_result_ends_only_its_trajectory_with_a_named_counted_error(policy, name):
    _, kind, phrase = MALFORMED_RESET[name]
    run = play(policy, {"fault": name, "where": "reset", "name": f"malformed-reset-{name}"})
    for t in run.trajectories:
        if t.task_id % 2 == 1:
            assert t.failed and t.error_kind == "malformed" and not t.turns and phrase in t.error, t
            assert f"environment 'malformed-reset-{name}' reset returned" in t.error
        else:
            assert not t.failed and len(t.turns) == MAX_TURNS
    assert run.error_kinds["malformed"] == run.errors == 2


@pytest.mark.parametrize("name", sorted(VALID_STEP))
def test_valid_step_results_of_unusual_types_are_accepted_as_plain_values(policy, name):
    run = play(policy, {"results": {0: [("valid", name)] * MAX_TURNS}}, factory="scripted", starts=((0, 1),))
    assert run.errors == 0
    for t in run.trajectories:
        assert len(t.turns) == (1 if name == "done_true" else MAX_TURNS)
        for turn in t.turns:
            assert type(turn.reward) is float and type(turn.done) is bool and isinstance(turn.info, dict)


def test_training_goes_on_past_malformed_step_results(tiny_model, tmp_path):
    """``done: "no"`` on the odd tasks' copies: counted as malformed (never read as a finished episode)."""
    out = tmp_path / "run"
    env = env_spec("{fault: done_is_no, where: step, at: 1}")
    result = invoke(["train", *env_args(tiny_model, out, env=env, **{"train.steps": 2, "eval.before_training": False})])
    assert result.exit_code == 0, (result.output, result.exception)
    rows = metrics(out)
    assert sum(r["environment_errors/malformed"] for r in rows) > 0
    assert all(r["environment_errors"] == r["environment_errors/malformed"] for r in rows)


def _expected(reset, results):
    """``(malformed results the rollout meets, turns played, environment steps that returned valid results)``."""
    if reset[0] == "malformed":
        return 1, 0, 0
    for j, (kind, name) in enumerate(results[:MAX_TURNS]):
        if kind == "malformed":
            return 1, j + 1, j
        if name == "done_true":
            return 0, j + 1, j + 1
    return 0, MAX_TURNS, MAX_TURNS


def _results():
    valid = st.sampled_from([("valid", n) for n in VALID_STEP])
    malformed = st.sampled_from([("malformed", n) for n in MALFORMED_STEP])
    return st.lists(st.one_of(valid, malformed), min_size=MAX_TURNS, max_size=MAX_TURNS)


def _resets():
    return st.one_of(st.just(("valid", None)), st.sampled_from([("malformed", n) for n in MALFORMED_RESET]))


def check_random_step_results(policy, scripts, timeout):
    """Any mix of valid and malformed results: no exception escapes, every malformed result met is counted (and
    ends its trajectory there), no valid one is."""
    resets = {task: reset for task, (reset, _) in enumerate(scripts)}
    results = {task: steps for task, (_, steps) in enumerate(scripts)}
    run = play(policy, {"resets": resets, "results": results}, factory="scripted",
               starts=[(task, task) for task in results], group_size=1, timeout=timeout)
    expected = [_expected(reset, steps) for reset, steps in scripts]
    assert run.error_kinds["malformed"] == run.errors == sum(e[0] for e in expected)
    assert run.environment_steps == sum(e[2] for e in expected)
    for t, (malformed, turns, _) in zip(run.trajectories, expected, strict=True):
        assert len(t.turns) == turns and t.failed == bool(malformed), (t, scripts)


FAST = settings(max_examples=25, deadline=None, database=None, suppress_health_check=list(HealthCheck))
LONG = settings(max_examples=500, deadline=None, database=None, suppress_health_check=list(HealthCheck))
SCRIPTS = st.lists(st.tuples(_resets(), _results()), min_size=1, max_size=4)


@FAST
@given(scripts=SCRIPTS, timeout=st.sampled_from([None, 5.0]))
def test_random_step_results_are_counted_exactly(policy, scripts, timeout):
    check_random_step_results(policy, scripts, timeout)


@pytest.mark.fuzz
@LONG
@given(scripts=SCRIPTS, timeout=st.sampled_from([None, 5.0]))
def test_random_step_results_are_counted_exactly_long(policy, scripts, timeout):
    check_random_step_results(policy, scripts, timeout)


# ------------------------------------------------------------------------------ observations past the context
def _long(prompt: str, overflow: str = "end", **params) -> str:
    fields = ", ".join(f"{k}: {v}" for k, v in {"fault": "long", "where": "step", "at": 1, **params}.items())
    return env_spec(f"{{{fields}}}", extra=f", prompt: {prompt}, prompt_overflow: {overflow}, max_context_tokens: 4096")


@pytest.mark.parametrize("prompt", ["per_step", "conversation"])
def test_an_observation_longer_than_the_model_s_context_ends_its_trajectory_there(policy, prompt, caplog):
    """700 words after the first step (over 4,000 tokens against the tiny model's 512 positions; a conversation's
    env.max_context_tokens of 4096 does not raise the model's limit): the odd task's copies end as truncated at their
    second turn, warned once naming the environment, the turn and the token count; no context the model ran past."""
    source = env_source(policy, _long(prompt, name=f"long-{prompt}"))
    with caplog.at_level(logging.WARNING, logger="grove.experience"):
        run = source.play([(0, 10), (1, 11)], 2, source.sampling)
    for t in run.trajectories:
        if t.task_id % 2 == 1:
            assert t.context_overflow and t.truncated and not t.failed and len(t.turns) == 1, t
            assert t.overflow.tokens > 1500 and t.overflow.limit == 512 - 4
        else:
            assert not t.context_overflow and len(t.turns) == MAX_TURNS
    assert run.context_overflows == 2
    assert all(len(s.prompt_ids) + len(s.response_ids) <= 512 for t in run.trajectories for s in t.samples)
    warning = [r.getMessage() for r in caplog.records if "context of turn" in r.getMessage()]
    assert len(warning) == 1 and f"environment long-{prompt}: the context of turn 2 is" in warning[0], warning
    assert "env.prompt_overflow: truncate_observation" in warning[0]


@pytest.mark.parametrize("prompt", ["per_step", "conversation"])
def test_truncate_observation_keeps_the_end_of_a_long_observation(policy, prompt, caplog):
    """Each step returns 700 words. Per-step prompts show the end of each (history left out to make room); a
    conversation shows the end of the first, then is full: it ends at the next one, as truncated."""
    source = env_source(policy, _long(prompt, "truncate_observation", name=f"cut-{prompt}"))
    with caplog.at_level(logging.WARNING, logger="grove.experience"):
        run = source.play([(1, 11)], 2, source.sampling)
    tokenizer = policy[1]
    for t in run.trajectories:
        assert not t.failed
        assert all(len(s.prompt_ids) + len(s.response_ids) <= 512 for s in t.samples)
        (last,) = t.samples[-1:]
        shown = tokenizer.decode(last.prompt_ids + last.response_ids)
        assert "[…]" in shown and "word18 word19 word20" in shown  # the observation's last words (699 % 97 = 20)
        if prompt == "per_step":
            assert not t.context_overflow and len(t.turns) == MAX_TURNS
        else:
            assert t.context_overflow and len(t.turns) == 2
            assert "The conversation so far leaves no room even for the end of the next observation" in caplog.text


@pytest.mark.parametrize("overflow", ["end", "truncate_observation"])
def test_a_megabyte_observation_is_measured_once_and_finishes_quickly(policy, overflow):
    source = env_source(policy, _long("per_step", overflow, chars=1_000_000, name=f"megabyte-{overflow}"))
    start = time.monotonic()
    run = source.play([(1, 11)], 2, source.sampling)
    assert time.monotonic() - start < 30
    assert all(t.context_overflow == (overflow == "end") for t in run.trajectories)
    assert all(len(s.prompt_ids) <= 508 for t in run.trajectories for s in t.samples)


@pytest.mark.parametrize("prompt", ["per_step", "conversation"])
@pytest.mark.parametrize("overflow", ["end", "truncate_observation"])
def test_a_50_megabyte_observation_costs_what_a_context_sized_one_does(policy, prompt, overflow, caplog):
    """No copy tokenizes a 50 MB observation whole: one that cannot fit ends its trajectory (a lower bound of its
    tokens in the warning) or keeps its end, the work bounded by the context."""
    source = env_source(policy, _long(prompt, overflow, chars=50_000_000, name=f"huge-{prompt}-{overflow}"))
    start = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="grove.experience"):
        run = source.play([(1, 11)], 3, source.sampling)
    assert time.monotonic() - start < 10
    assert all(len(s.prompt_ids) <= 508 for t in run.trajectories for s in t.samples)
    if overflow == "end":
        assert all(t.context_overflow and len(t.turns) == 1 for t in run.trajectories)
        assert "the context of turn 2 is at least " in caplog.text
    else:  # the end of the observation was shown: the episodes went on past it
        assert all(len(t.turns) >= 2 for t in run.trajectories)


@pytest.mark.parametrize("overflow", ["end", "truncate_observation"])
def test_training_on_observations_longer_than_the_context(tiny_model, tmp_path, overflow):
    out = tmp_path / "run"
    env = _long("per_step", overflow, words=700, name=f"train-long-{overflow}")
    result = invoke(["train", *env_args(tiny_model, out, env=env, **{"train.steps": 2, "eval.before_training": False})])
    assert result.exit_code == 0, (result.output, result.exception)
    rows = metrics(out)
    overflows = sum(r["context_overflow_trajectories"] for r in rows)
    assert overflows > 0 if overflow == "end" else overflows == 0


def test_a_step_in_which_no_context_fits_stops_with_a_clear_error(tiny_model, tmp_path):
    """Instructions of 1,000 words: not one episode can take a turn. The command says so in one line (exit 2)."""
    out = tmp_path / "run"
    env = env_spec("{instructions_words: 1000}")
    result = invoke(["train", *env_args(tiny_model, out, env=env, **{"eval.before_training": False})])
    assert result.exit_code == 2, (result.output, result.exception)
    assert "error: environment 'faulty': no episode of step 1 could take a turn" in result.output
    assert "Traceback" not in result.output


def test_a_step_in_which_every_environment_copy_fails_stops_with_an_error_naming_it(policy):
    """Every copy's reset raises: no episode can take a turn, and the step says so instead of training on nothing."""
    source = env_source(policy, env_spec("{fault: raise, where: reset, all_tasks: true, name: broken}"))
    with pytest.raises(EnvironmentFailedError, match=r"environment 'broken': no episode of step 1 could take a turn: "
                       r"every one of the \d+ episodes failed \(raised \d+; the first: RuntimeError: faulty "
                       r"environment broke in reset\)"):
        source.collect(1)


@pytest.mark.parametrize("fault", ["raise", "exit", "malformed", "hang"])
def test_a_step_that_fails_in_every_copy_stops_the_command_instead_of_training_on_nothing(
    tiny_model, tmp_path, fault, caplog
):
    """Every copy's ``step`` raises (exits, returns a malformed result, or hangs past ``env.step_timeout_s``) from the
    first step on: each episode took one turn before failing, but none is left to learn from (every return is 0).
    Such a step is warned and counted; ``train.max_skipped_steps`` of them in a row stop the command with one line
    naming the environment and the kind of failure, exit 2, instead of training on nothing and exiting 0."""
    spec = {"raise": "{fault: raise, where: step, all_tasks: true}", "exit": "{fault: exit, where: step, all_tasks: true}",
            "malformed": "{fault: " + next(iter(MALFORMED_STEP)) + ", where: step, all_tasks: true}",
            "hang": "{fault: hang, where: step, all_tasks: true, hang_s: 2}"}[fault]
    extra = ", step_timeout_s: 0.3" if fault == "hang" else ""
    out = tmp_path / "run"
    result = invoke(["train", *env_args(tiny_model, out, env=env_spec(spec, extra=extra),
                                        **{"train.steps": 4, "train.max_skipped_steps": 2,
                                           "eval.before_training": False})])
    assert result.exit_code == 2, (result.output, result.exception)
    kind = {"raise": "raised", "exit": "exited", "malformed": "malformed", "hang": "timeout"}[fault]
    line = " ".join(result.output.split())
    assert "warning: environment 'faulty' failed in every copy of step 1: every one of the 6 episodes" in caplog.text
    assert ("error: environment 'faulty' failed in every copy of 2 steps in a row (train.max_skipped_steps), so they "
            f"had nothing to train on; in step 2 every one of the 6 episodes failed ({kind} 6; the first:") in line
    assert "Traceback" not in result.output.split("error:")[-1]
    assert [r["environment_failed_step"] for r in metrics(out)] == [1.0]


def test_an_evaluation_in_which_every_episode_fails_is_an_error_not_zero_percent(tiny_model, tmp_path):
    """The held-out evaluation before training: every episode's reset raises, so there is no success rate to report
    (a 0 % would read as measured)."""
    env = env_spec("{fault: raise, where: reset, all_tasks: true}")
    result = invoke(["train", *env_args(tiny_model, tmp_path / "run", env=env, **{"eval.before_training": True})])
    assert result.exit_code == 2, (result.output, result.exception)
    line = " ".join(result.output.split())
    assert "error: environment 'faulty': every one of the" in line and "of the held-out evaluation" in line


# ------------------------------------------------------------------------------ hung environments
def test_hung_copies_time_out_together_not_one_after_another(policy):
    """Three copies hang in their first step: the turn costs about one timeout (1 s), not three."""
    run = play(policy, {"fault": "hang", "where": "step", "all_tasks": True, "hang_s": 4.0}, starts=((0, 1),),
               group_size=3, timeout=1.0)
    assert run.error_kinds["timeout"] == run.errors == 3
    assert all("step did not return within 1 s" in t.error and len(t.turns) == 1 for t in run.trajectories)
    assert 1.0 <= run.environment_seconds < 2.0, run.environment_seconds


def _episodes(run):
    return [
        (t.task_id, t.slot, t.error, t.done, [(u.action_ids, u.logprobs, u.reward, u.observation.anchor) for u in t.turns])
        for t in run.trajectories
    ]


def test_threaded_calls_give_the_same_episodes_as_direct_calls(policy):
    """Copies that finish their steps in a shuffled order (and fail at their second step on odd tasks) give the same
    trajectories, errors and generator use with a timeout (worker threads) as without (direct calls)."""
    params = {"fault": "jitter", "at": 2}
    starts = ((0, 1), (1, 2), (3, 4))
    direct = play(policy, params, starts=starts, group_size=3, seed=5)
    threaded = play(policy, params, starts=starts, group_size=3, seed=5, timeout=5.0)
    assert _episodes(direct) == _episodes(threaded)
    assert direct.errors == threaded.errors == 6


def test_training_with_hung_environments_costs_one_timeout_per_turn(tiny_model, tmp_path):
    """Every copy hangs in its first step: the step's three copies time out together (one timeout, not three); the
    step is counted as one the environment failed in every copy of."""
    out = tmp_path / "run"
    env = env_spec("{fault: hang, where: step, all_tasks: true, hang_s: 4}", extra=", step_timeout_s: 1")
    overrides = {"env": env, "train.steps": 1, "train.prompts_per_step": 1, "eval.before_training": False,
                 "eval.max_examples": 1, "checkpoint.every": 1}
    result = invoke(["train", *env_args(tiny_model, out, **overrides)])
    assert result.exit_code == 0, (result.output, result.exception)
    (row,) = metrics(out)
    assert row["environment_errors/timeout"] == 3 and row["environment_failed_step"] == 1
    assert row["environment_seconds"] < 2.5, row["environment_seconds"]
