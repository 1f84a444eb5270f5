"""The verifiers (0.4.0) adapter on real verifiers objects: the ``verifiers`` task's splits, the ``verifiers_rubric``
reward (one objective per reward function, the rubric's weights: grove's weighted sum is verifiers' own reward), the
``verifiers`` environment (a multi-turn guessing game played turn by turn), bad input, and two-step training runs on a
tiny random model (GRPO on the example config, GiGPO on the game)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest

vf = pytest.importorskip("verifiers.v1")

from grove.envs import build_environment  # noqa: E402
from grove.hubs.verifiers.verifiers_rubrics import completion_trace, rubric_of  # noqa: E402
from grove.rewards.scoring import RewardFunctionError, compute_rewards, resolve_reward, reward_columns  # noqa: E402
from grove.tasks.task import TaskDataError, build_task, columns_for_rewards  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
WORD_MATH = "examples.verifiers_envs.word_math:load_environment"
QUIZ = "test_hub_verifiers:quiz"
GUESS_ID = "grove_guess_game"  # this module, as the taskset id verifiers imports (fixture below)

__all__ = ["GuessEnv", "GuessTaskset"]  # what verifiers' loader finds in a taskset module


# --- a single-turn taskset: three weighted reward functions (one a penalty) ------------------------------------------


class QuizData(vf.TaskData):
    answer: str
    info: dict = {}


class QuizTask(vf.Task[QuizData, vf.State, vf.TaskConfig]):
    @vf.reward(weight=1.0)
    async def exact(self, task: QuizData, trace: vf.Trace) -> float:
        return float(trace.last_reply == task.answer)

    @vf.reward(weight=0.5)
    async def brevity(self, trace: vf.Trace) -> float:
        return 1.0 / (1.0 + len(trace.last_reply.split()))

    @vf.reward(weight=-0.25, priority=1)
    async def shouting(self, trace: vf.Trace) -> float:
        return float(trace.last_reply.isupper())


class QuizTaskset(vf.Taskset[QuizTask, vf.TasksetConfig]):
    def load(self):
        for i in range(10):
            yield QuizTask(QuizData(prompt=f"Say {i}.", answer=str(i), info={"i": i}), self.config.task)


def quiz() -> QuizTaskset:
    return QuizTaskset(vf.TasksetConfig())


class ExplodingTask(vf.Task[QuizData, vf.State, vf.TaskConfig]):
    @vf.reward(weight=1.0)
    async def explodes(self, trace: vf.Trace) -> float:
        raise ZeroDivisionError("the rubric's own bug")


class ExplodingTaskset(vf.Taskset[ExplodingTask, vf.TasksetConfig]):
    def load(self):
        for i in range(4):
            yield ExplodingTask(QuizData(prompt=f"Say {i}.", answer=str(i)), self.config.task)


def exploding() -> ExplodingTaskset:
    return ExplodingTaskset(vf.TasksetConfig())


class MixedTask(vf.Task[QuizData, vf.State, vf.TaskConfig]):
    @vf.reward(weight=2.0)
    def length(self, trace: vf.Trace) -> float:  # synchronous: called directly
        return float(len(trace.last_reply))

    @vf.reward(weight=1.0)
    async def in_sandbox(self, trace: vf.Trace, runtime) -> float:  # needs a runtime grove does not provide
        return 1.0


class MixedTaskset(vf.Taskset[MixedTask, vf.TasksetConfig]):
    def load(self):
        for i in range(4):
            yield MixedTask(QuizData(prompt=f"Say {i}.", answer=str(i)), self.config.task)


def mixed() -> MixedTaskset:
    return MixedTaskset(vf.TasksetConfig())


class EndlessTaskset(vf.Taskset[QuizTask, vf.TasksetConfig]):
    INFINITE = True

    def load(self):
        i = 0
        while True:
            yield QuizTask(QuizData(prompt=f"Say {i}.", answer=str(i)), self.config.task)
            i += 1


def endless() -> EndlessTaskset:
    return EndlessTaskset(vf.TasksetConfig())


# --- a multi-turn env: guess a number from 1 to 4, told higher or lower -----------------------------------------------


class GuessData(vf.TaskData):
    secret: int


class GuessTask(vf.Task[GuessData, vf.State, vf.TaskConfig]):
    @vf.reward(weight=1.0)
    async def found(self, task: GuessData, trace: vf.Trace) -> float:
        return float(any(m.content.strip() == str(task.secret) for m in trace.assistant_messages))


class GuessConfig(vf.TasksetConfig):
    num_tasks: int = 8


class GuessTaskset(vf.Taskset[GuessTask, GuessConfig]):
    def load(self):
        for i in range(self.config.num_tasks):
            yield GuessTask(GuessData(name=f"guess-{i}", prompt="Guess my number from 1 to 4.", secret=1 + i % 4),
                            self.config.task)


class GuessEnvConfig(vf.EnvConfig):
    player: vf.AgentConfig = vf.AgentConfig(max_turns=3)


class GuessEnv(vf.Env[GuessEnvConfig]):
    async def run(self, task, agents):
        async with agents.player.interaction(task) as talk:
            talk.trace.info["guesses"] = []  # the state grove may anchor on (anchor: state_key:guesses)
            segment = await talk.turn()
            while not segment.terminated:
                guess = segment.last_reply
                talk.trace.info["guesses"] = [*talk.trace.info["guesses"], guess]
                if guess == str(task.data.secret):
                    break
                hint = "higher" if guess.isdigit() and int(guess) < task.data.secret else "lower"
                segment = await talk.turn(f"No, my number is {hint}.")
        talk.trace.record_reward("quick", float(talk.trace.num_turns <= 2), 0.5)


async def terse(trace: vf.Trace) -> float:
    """A reward plugged in through the task config (``TaskConfig.rewards``): shorter replies score higher."""
    return 1.0 / (1.0 + len(trace.last_reply))


TERSE = "{task: {rewards: {terse: {fn: 'grove_guess_game:terse', weight: 0.1}}}}"


@pytest.fixture(autouse=True)
def importable(monkeypatch):
    """The repository root (the example environment) and this module as the taskset id ``grove_guess_game``."""
    monkeypatch.syspath_prepend(str(ROOT))
    monkeypatch.setitem(sys.modules, GUESS_ID, sys.modules[__name__])


def weighted_sum(specs, rewards) -> list[float]:
    _, weights = reward_columns(specs)
    return [sum(w * v for w, v in zip(weights, row, strict=True)) for row in rewards.tolist()]


# --- the task ----------------------------------------------------------------------------------------------------------


def test_importing_grove_leaves_verifiers_unimported():
    code = "import sys, grove.tasks, grove.rewards, grove.envs; print(any(m.startswith('verifiers') for m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.stdout.strip() == "False", done.stderr


def test_task_splits_hold_out_rows_and_keep_the_columns():
    params = {"environment": WORD_MATH, "kwargs": {"num_tasks": 30}, "eval_fraction": 0.2, "seed": 3}
    task = build_task("verifiers", params)
    assert (len(task.train), len(task.eval)) == (24, 6)
    assert build_task("verifiers", params).eval == task.eval  # deterministic
    train_keys = {json.dumps(e.columns["verifiers_task"], sort_keys=True) for e in task.train}
    assert not train_keys & {json.dumps(e.columns["verifiers_task"], sort_keys=True) for e in task.eval}
    example = task.train[0]
    system, user = example.prompt
    assert system["role"] == "system" and "<answer>" in system["content"] and user["role"] == "user"
    assert example.answer == example.columns["answer"] == example.columns["verifiers_task"]["answer"]
    quiz_task = build_task("verifiers", {"environment": QUIZ, "eval_fraction": 0.3})
    assert quiz_task.train[0].prompt.startswith("Say ")  # a string prompt without a system prompt stays a string
    assert {"answer", "info", "verifiers_task"} <= set(quiz_task.train[0].columns)


def test_task_eval_kwargs_give_the_environments_own_eval_rows_and_infinite_tasksets_need_a_cap():
    task = build_task("verifiers", {"environment": WORD_MATH, "kwargs": {"num_tasks": 20}, "eval_kwargs": {"num_tasks": 5}})
    assert len(task.eval) == 5 and len(task.train) == 15  # same seed: the 5 eval rows are the first 5 rows, dropped
    with pytest.raises(TaskDataError, match="infinite; set max_tasks"):
        build_task("verifiers", {"environment": "test_hub_verifiers:endless"})
    capped = build_task("verifiers", {"environment": "test_hub_verifiers:endless", "max_tasks": 10, "eval_fraction": 0.2})
    assert (len(capped.train), len(capped.eval)) == (8, 2)


# --- the rubric as rewards ---------------------------------------------------------------------------------------------


def test_rubric_objectives_carry_the_rubrics_weights_and_sum_to_verifiers_reward():
    params = {"environment": QUIZ}
    rubric = rubric_of(QUIZ)
    assert rubric.names == ("shouting", "brevity", "exact")  # verifiers' order: priority, then name
    weights = dict(zip(rubric.names, rubric.weights, strict=True))
    assert weights == {"shouting": -0.25, "brevity": 0.5, "exact": 1.0}
    spec = resolve_reward("verifiers_rubric", params)  # the rubric's weights by default
    assert spec.fn.params.objective_weights() == weights
    assert reward_columns([spec]) == (rubric.names, (-0.25, 0.5, 1.0))
    overridden = resolve_reward("verifiers_rubric", params, objective_weights={"shouting": 0.0})
    assert reward_columns([overridden]) == (rubric.names, (0.0, 0.5, 1.0))  # the config's weight overrides one
    examples = list(build_task("verifiers", {"environment": QUIZ, "eval_fraction": 0.2}).train)[:4]
    completions = [examples[0].answer, "SAY IT LOUD", f"the answer is {examples[2].answer}", ""]
    rewards = compute_rewards([spec], [e.prompt for e in examples], completions, columns_for_rewards(examples), step=0)
    assert rewards.shape == (4, 3)
    expected = []
    for example, completion in zip(examples, completions, strict=True):
        task = rubric.task(example.columns["verifiers_task"])
        trace = completion_trace(task, completion)
        asyncio.run(task.score(trace))  # verifiers' own scoring of the same completion
        expected.append(trace.reward)
    assert weighted_sum([spec], rewards) == pytest.approx(expected, abs=1e-6)
    assert expected[0] > expected[3] and rewards[1, 0] == 1.0  # exact answer; shouting penalised


def test_synchronous_rewards_run_and_runtime_rewards_are_left_out():
    rubric = rubric_of("test_hub_verifiers:mixed")
    assert rubric.names == ("length",) and rubric.needs_runtime == ("in_sandbox",)  # logged as a warning
    examples = list(build_task("verifiers", {"environment": "test_hub_verifiers:mixed", "eval_fraction": 0.25}).train)[:2]
    spec = resolve_reward("verifiers_rubric", {"environment": "test_hub_verifiers:mixed"})
    rewards = compute_rewards([spec], [e.prompt for e in examples], ["abc", " abcde "], columns_for_rewards(examples), step=0)
    assert rewards.tolist() == [[3.0], [5.0]]  # the reply as verifiers' trace.last_reply reads it: stripped


def test_rubric_failures_name_the_reward_function_and_bad_environments_name_the_field():
    examples = list(build_task("verifiers", {"environment": "test_hub_verifiers:exploding", "eval_fraction": 0.25}).train)
    spec = resolve_reward("verifiers_rubric", {"environment": "test_hub_verifiers:exploding"})
    with pytest.raises(RewardFunctionError, match="'explodes'.*ZeroDivisionError: the rubric's own bug"):
        compute_rewards([spec], [e.prompt for e in examples], ["1"] * len(examples), columns_for_rewards(examples), step=3)
    with pytest.raises(RewardFunctionError, match="needs a 'verifiers_task' dataset column"):
        compute_rewards([resolve_reward("verifiers_rubric", {"environment": QUIZ})], ["p"], ["c"], {"answer": ["1"]}, step=0)
    with pytest.raises(TaskDataError, match=r"task\.environment.*no_such_module"):
        build_task("verifiers", {"environment": "no_such_module:make"})
    with pytest.raises(TaskDataError, match=r"task\.environment: no verifiers taskset 'no-such-taskset'"):
        build_task("verifiers", {"environment": "no-such-taskset"})
    with pytest.raises(TaskDataError, match=r"task\.environment .*returned int"):
        build_task("verifiers", {"environment": "json:loads", "kwargs": {"s": "3"}})
    with pytest.raises(ValueError, match=r"verifiers_rubric\.environment.*no_such_module"):
        resolve_reward("verifiers_rubric", {"environment": "no_such_module:make"})
    with pytest.raises(ValueError, match=r"env\.params\.environment.*no_such_module"):
        build_environment("verifiers", {"environment": "no_such_module:make"})
    with pytest.raises(ValueError, match="environment must be"):
        build_task("verifiers", {"environment": ":make"})


# --- the environment ---------------------------------------------------------------------------------------------------


def play(env, task_id: int, guesses: list[str]):
    obs = env.reset(task_id, seed=0)
    seen, steps = [obs], []
    for guess in guesses:
        steps.append(env.step(guess))
        if steps[-1].done:
            break
        seen.append(steps[-1].observation)
    return seen, steps


def test_multi_turn_env_plays_the_exchange_and_ends_with_the_weighted_score():
    suite = build_environment("verifiers", {"environment": GUESS_ID, "eval_fraction": 0.25, "anchor": "state_key:guesses"})
    assert (list(suite.train_tasks), list(suite.eval_tasks)) == ([0, 1, 2, 3, 4, 5], [6, 7])
    assert suite.metadata["seat"] == "player" and suite.metadata["env"] == "GuessEnv"
    env = suite.make()
    secret = suite.make().spec.tasks[0].data.secret
    wrong = "4" if secret != 4 else "1"
    seen, steps = play(env, 0, [wrong, str(secret)])
    assert seen[0].text == "Guess my number from 1 to 4." and seen[1].text.startswith("No, my number is")
    assert [s.done for s in steps] == [False, True] and steps[0].reward == 0.0
    final = steps[-1]
    assert final.reward == pytest.approx(1.0 + 0.5)  # found (weight 1) + quick (weight 0.5), as Trace.reward
    assert final.info["won"] and final.info["verifiers_rewards"] == {"found": 1.0, "quick": 1.0}
    assert seen[1].anchor == json.dumps([wrong])  # state_key anchors: the trace's info entry
    # three wrong guesses: the seat's max_turns refuses the fourth turn; the exchange ends unscored by `found`
    seen, steps = play(env, 0, [wrong] * 5)
    assert len(steps) == 3 and steps[-1].done and steps[-1].reward == 0.0
    assert not steps[-1].info["won"] and steps[-1].info["truncated"] and steps[-1].info["stop_condition"] == "max_turns"
    assert suite.summarize is not None and suite.summarize([]) == {}
    # anchor none: every observation its own anchor
    plain = build_environment("verifiers", {"environment": GUESS_ID}).make()
    first, again = plain.reset(1, 0), plain.reset(1, 0)
    assert first.text == again.text and first.anchor != again.anchor
    plain.close()


def test_a_taskset_plays_one_turn_and_env_errors_are_clear():
    env = build_environment("verifiers", {"environment": WORD_MATH, "kwargs": {"num_tasks": 10}, "win_threshold": 1.0})
    assert "<answer>" in env.instructions
    copy = env.make()
    obs = copy.reset(0, seed=0)
    assert obs.text.endswith("have now?") and "<answer>" not in obs.text  # the system prompt is the instructions
    answer = copy.spec.tasks[0].data.answer
    done = copy.step(f"<answer>{answer}</answer>")
    assert done.done and done.reward == pytest.approx(1.2) and done.info["won"]
    with pytest.raises(RuntimeError, match="reset"):
        copy.step("again")
    bad = build_environment("verifiers", {"environment": "test_hub_verifiers:exploding"}).make()
    bad.reset(0, 0)
    with pytest.raises(Exception, match="ExplodingTask scoring: ZeroDivisionError: the rubric's own bug"):
        bad.step("1")
    with pytest.raises(ValueError, match="env.params.seat: no seat 'user'"):
        build_environment("verifiers", {"environment": GUESS_ID, "seat": "user"})
    with pytest.raises(ValueError, match="anchor: String should match pattern"):
        build_environment("verifiers", {"environment": GUESS_ID, "anchor": "board"})
    missing = build_environment("verifiers", {"environment": GUESS_ID, "anchor": "state_key:board"}).make()
    with pytest.raises(ValueError, match="state_key:board.*no state field or info entry 'board'"):
        missing.reset(0, 0)


# --- training on a tiny random model -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    from grove.models.tiny import create_tiny_model_dir

    return create_tiny_model_dir(tmp_path_factory.mktemp("tiny") / "model", seed=0)


COMMON = {
    "threads": 1, "rollout.max_new_tokens": 6, "rollout.temperature": 1.0, "train.steps": 2,
    "train.prompts_per_step": 2, "train.completions_per_prompt": 3, "train.micro_batch_size": 6,
    "train.precision": "fp32", "optim.lr": 1e-3, "optim.warmup_steps": 0, "checkpoint.every": 2,
    "eval.max_examples": 2, "eval.before_training": False, "logging.progress": False, "logging.plots": False, "logging.tensorboard": False,
}


def train(config: str | None, tiny_model: Path, out: Path, **extra) -> list[dict]:
    from grove.resolve import load_config
    from grove.training.trainer import Trainer

    values = {**COMMON, "model.name": tiny_model, "model.init_from": "null", "output_dir": out, **extra}
    Trainer(load_config(config, [f"{k}={v}" for k, v in values.items()]), out).run()
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if '"loss"' in line]


def test_grpo_trains_two_steps_on_the_example_config(tiny_model, tmp_path):
    kwargs = "{num_tasks: 40, seed: 0, " + TERSE[1:-1] + "}"  # the example taskset, plus a plugged reward
    reward = (f"[{{id: verifiers_rubric, environment: '{WORD_MATH}', kwargs: {kwargs}, "
              "objective_weights: {correct_answer: 1.0, answer_format: 0.2, terse: 0.1}}]")
    rows = train(str(ROOT / "examples/verifiers_single_turn.yaml"), tiny_model, tmp_path / "run",
                 **{"task.kwargs": kwargs, "rewards": reward})
    assert [r["step"] for r in rows] == [1, 2]
    assert {"reward/correct_answer_mean", "reward/answer_format_mean", "reward/terse_mean"} <= set(rows[0])
    assert any(r["loss"] != 0 for r in rows)  # the plugged reward varies: there is a gradient
    evals = [json.loads(line) for line in (tmp_path / "run" / "eval.jsonl").read_text().splitlines()]
    assert "objective/correct_answer" in evals[-1]


def test_gigpo_trains_two_steps_on_the_multi_turn_env(tiny_model, tmp_path):
    env = ("{id: verifiers, params: {environment: " + GUESS_ID + ", kwargs: " + TERSE + ", eval_fraction: 0.25}, "
           "max_turns: 4, action_parser: {id: full_text}}")
    rows = train(None, tiny_model, tmp_path / "run", env=env, **{"algorithm.advantage": "{id: gigpo, gamma: 0.9}"})
    assert [r["step"] for r in rows] == [1, 2]
    assert all(r["anchor_steps_in_shared_groups"] == 0 for r in rows)  # anchor none: GiGPO is episode-level GRPO
    assert all(r["environment_errors"] == 0 for r in rows) and "success_rate" in rows[0]
    # the plugged reward varies, so there is a gradient (the loss itself is 0 at ratio 1 when every completion has the
    # same length: the token mean of group-centred advantages)
    assert "env/verifiers/terse" in rows[0] and any(r["grad_norm"] > 0 for r in rows)
