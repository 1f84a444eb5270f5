"""Expert demonstrations (grove.demos): the tokens a rollout of the same actions trains on, training tasks only,
noise, keep, determinism, errors, and gold completions that the configs' rewards score 1.

The environment is a ladder defined here (referenced by import path, like a user's): positions 0..length, the goal
at ``length``, a pit at 0; the player starts at 1 (even tasks) or 2 (odd tasks). Tasks ``t % 5 == 4`` are locked
(the oracle has no action from the start) and tasks ``t % 5 == 3`` crumble after the first step (the oracle gives up
then), so the expected counts below follow from the task ids alone.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
import yaml

import grove.wings.clinical.clinical_task as clinical
from grove.atomic_files import write_json_atomic
from grove.config import GroveConfig
from grove.demos import (
    ActionFormatError,
    EnvironmentDemonstrations,
    NoGoldCompletionError,
    write_demonstrations,
)
from grove.envs.actions import ParsedAction
from grove.envs.base import EnvironmentSuite, Observation, Transition
from grove.experience.environment import EnvironmentSource
from grove.experience.episode_records import SampleTokens
from grove.experience.source import SourceContext
from grove.models.tiny import build_tiny_tokenizer
from grove.registry import ACTION_PARSERS, NoParams
from grove.resolve import load_config, resolve
from grove.rewards.scoring import compute_rewards, resolve_rewards, reward_columns
from grove.rollout.engine import RolloutOutput, encode_prompts, rollout_sampling
from grove.sft.demonstration_format import DemonstrationRow, tokenizer_fingerprint
from grove.tasks.task import TASKS, TaskSplits, build_task, columns_for_rewards

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
TRAIN_TASKS = list(range(10))
EVAL_TASKS = list(range(100, 105))
EXTRA_EVAL_TASKS = list(range(200, 203))


# ---------------------------------------------------------------------------------------------- the ladder


class Ladder:
    def __init__(self, length: int, names: tuple[str, str, str], listed: bool, oracle_says: str | None) -> None:
        self.length, self.names, self.listed, self.oracle_says = length, names, listed, oracle_says
        self.position = self.steps = self.task_id = 0
        self.done = False

    def _observation(self) -> Observation:
        cells = "".join("P" if i == self.position else "_" for i in range(self.length + 1))
        return Observation(f"Ladder {cells}", self.position, self.names if self.listed else None)

    def reset(self, task_id: int, seed: int) -> Observation:
        self.task_id, self.position, self.steps, self.done = task_id, 1 + task_id % 2, 0, False
        return self._observation()

    def step(self, action: str) -> Transition:
        left, right, _stay = self.names
        if action not in self.names:
            return Transition(self._observation(), 0.0, False, {"invalid_action": True})
        self.position += 1 if action == right else -1 if action == left else 0
        self.steps += 1
        won = self.position == self.length
        self.done = won or self.position == 0
        return Transition(self._observation(), float(won), self.done, {"won": won})

    def oracle_action(self) -> str | None:
        locked, crumbled = self.task_id % 5 == 4, self.task_id % 5 == 3 and self.steps >= 1
        if self.done or locked or crumbled:
            return None
        return self.oracle_says or self.names[1]


def ladder(params: dict) -> EnvironmentSuite:
    names = tuple(params.get("names", ("left", "right", "stay")))
    listed, oracle_says = params.get("listed", True), params.get("oracle_says")
    return EnvironmentSuite(
        name="ladder",
        make=lambda: Ladder(int(params.get("length", 4)), names, listed, oracle_says),
        train_tasks=TRAIN_TASKS,
        eval_tasks=EVAL_TASKS,
        extra_eval_tasks={"far": EXTRA_EVAL_TASKS},
        instructions="Climb to the right end of the ladder.",
    )


def first_word(text: str, observation: Observation, params) -> ParsedAction:
    """A user's action parser: the first word, lower-cased."""
    words = text.split()
    return ParsedAction(words[0].lower(), True) if words else ParsedAction(None, False, "empty")


@pytest.fixture
def user_parser(monkeypatch):
    """``first_word`` registered as an action parser for one test (the registry is restored after it)."""
    monkeypatch.setattr(ACTION_PARSERS, "_entries", dict(ACTION_PARSERS._entries))
    ACTION_PARSERS.register("demo_first_word", params=NoParams, summary="first word")(first_word)


@pytest.fixture(scope="module")
def tokenizer():
    return build_tiny_tokenizer()


def env_config(mode: str = "per_step", parser: dict | None = None, max_turns: int = 3, **params) -> GroveConfig:
    return GroveConfig.model_validate({
        "env": {
            "id": f"{__name__}:ladder",
            "params": params,
            "max_turns": max_turns,
            "prompt": mode,
            "history": 2,
            "action_parser": parser or {"id": "tag"},
        },
        "rollout": {"max_new_tokens": 64, "system_prompt": "Be brief."},
    })


def read_rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


# ---------------------------------------------------------------------------------------------- rollout parity


class ScriptedEngine:
    """A rollout engine that answers each turn's context with the next scripted response ids (one context a call),
    and with a bare EOS (an invalid action) once the script is played."""

    def __init__(self, tokenizer, responses: list[list[int]]) -> None:
        self.tokenizer = tokenizer
        self.responses = list(responses)

    def generate(self, prompt_token_ids, n, sampling, generator) -> RolloutOutput:
        assert n == 1 and len(prompt_token_ids) == 1
        ids = self.responses.pop(0) if self.responses else [self.tokenizer.eos_token_id]
        response = torch.tensor([ids])
        prompt = torch.tensor([prompt_token_ids[0]])
        return RolloutOutput(
            prompt_ids=prompt,
            prompt_mask=torch.ones_like(prompt),
            response_ids=response,
            response_mask=torch.ones_like(response),
            logprobs=torch.zeros(response.shape),
            finish_reasons=["eos"],
            texts=self.tokenizer.batch_decode([ids], skip_special_tokens=True),
            prompt_index=torch.tensor([0]),
            num_generated_tokens=len(ids),
            seconds=0.0,
        )


def turn_ids(rows: list[dict]) -> list[list[int]]:
    """The ids the policy emitted at each turn of an episode's rows: each run of trained tokens is one turn."""
    turns: list[list[int]] = []
    for row in rows:
        previous = 0
        for token, mask in zip(row["completion_ids"], row["completion_mask"], strict=True):
            if mask and not previous:
                turns.append([])
            if mask:
                turns[-1].append(token)
            previous = mask
    return turns


def _cut(sample: SampleTokens, row: dict) -> SampleTokens:
    """``sample`` cut to the length of ``row``'s completion."""
    n = len(row["completion_ids"])
    return SampleTokens(sample.prompt_ids, sample.response_ids[:n], sample.logprobs[:n], sample.token_turns[:n])


PARSERS = [
    {"id": "tag"},
    {"id": "tag", "tag": "move", "require_think": True},
    {"id": "admissible"},
    {"id": "first_mention"},
    {"id": "raw"},
    {"id": "full_text"},
    {"id": "demo_first_word"},
]


@pytest.mark.parametrize("mode", ["per_step", "conversation"])
@pytest.mark.parametrize("parser", PARSERS, ids=lambda p: "-".join(str(v) for v in p.values()))
def test_demonstration_tokens_equal_the_rollout_tokens_of_the_same_actions(
    tokenizer, tmp_path, mode, parser, user_parser
):
    cfg = env_config(mode, parser)
    out = tmp_path / "demos.jsonl"
    summary = write_demonstrations(cfg, tokenizer, out, episodes=12, noise=0.3, keep="all", seed=1)
    rows = read_rows(out)
    assert summary.rows == len(rows) and summary.other_actions > 0  # random actions are part of what is checked
    episodes: dict[int, list[dict]] = {}
    for row in rows:
        episodes.setdefault(row["episode"], []).append(row)
    for demo in episodes.values():
        task_id, seed = demo[0]["task_id"], demo[0]["seed"]
        engine = ScriptedEngine(tokenizer, turn_ids(demo))
        source = EnvironmentSource(SourceContext.for_evaluation(resolve(cfg, "eval"), engine, tokenizer))
        (trajectory,) = source.play([(task_id, seed)], 1, rollout_sampling(cfg.rollout)).trajectories
        actions = [a for r in demo for a in r["actions"]]
        assert not engine.responses  # the rollout played every turn of the demonstration
        assert [t.parsed.action for t in trajectory.turns[: len(actions)]] == actions
        assert not any(t.invalid for t in trajectory.turns[: len(actions)])
        assert trajectory.won == demo[0]["won"]
        samples = trajectory.samples
        if demo[0]["ended"] == "oracle_gave_up":
            # the rollout goes on (with invalid actions) where the oracle stopped: the demonstration is its start
            assert len(trajectory.turns) == cfg.env.max_turns > len(actions)
            samples = [_cut(s, row) for s, row in zip(samples, demo, strict=False)]
        else:
            assert len(trajectory.turns) == len(actions)
        assert len(samples) == len(demo)
        for sample, row in zip(samples, demo, strict=True):
            assert sample.prompt_ids == row["prompt_ids"]
            assert sample.response_ids == row["completion_ids"]
            assert [int(t >= 0) for t in sample.token_turns] == row["completion_mask"]
            assert sample.turns == row["turns"]
    if mode == "conversation":
        assert all(0 in r["completion_mask"] for r in rows if len(r["turns"]) > 1)  # environment tokens, untrained


def test_action_text_per_parser(tokenizer, tmp_path):
    """What the policy is taught to write for the oracle's 'right', per parser (each ending with EOS)."""
    expected = {
        "tag": "<action>right</action>",
        "tag-think": "<think>Next action: right</think>\n<move>right</move>",
        "first_mention": "right",
    }
    parsers = {"tag": {"id": "tag"}, "tag-think": PARSERS[1], "first_mention": {"id": "first_mention"}}
    for key, parser in parsers.items():
        out = tmp_path / f"{key}.jsonl"
        write_demonstrations(env_config(parser=parser), tokenizer, out, episodes=10)
        row = read_rows(out)[0]
        assert row["completion_ids"] == tokenizer(expected[key], add_special_tokens=False)["input_ids"] + [
            tokenizer.eos_token_id
        ]
        assert row["completion"] == expected[key] + tokenizer.eos_token
        assert row["completion_mask"] == [1] * len(row["completion_ids"])


# ---------------------------------------------------------------------------------------------- what is written


def test_rows_are_valid_and_count_as_the_tasks_say(tokenizer, tmp_path):
    """One epoch over the 10 training tasks, no noise: tasks t%5 in {0,1,2} are won in 3 (even) or 2 (odd) turns,
    t%5 == 3 ends after 1 turn (the oracle gives up), t%5 == 4 takes no turn."""
    out = tmp_path / "all.jsonl"
    summary = write_demonstrations(env_config(), tokenizer, out, episodes=10, keep="all")
    rows = read_rows(out)
    for row in rows:
        DemonstrationRow.model_validate(row)
        assert row["tokenizer"] == tokenizer_fingerprint(tokenizer)
        assert row["source"] == "ladder"
        assert row["won"] == (row["task_id"] % 5 in (0, 1, 2))
        assert row["oracle"] == [True] and row["actions"] == ["right"]
    turns = {t: (3 if t % 2 == 0 else 2) if t % 5 < 3 else 1 for t in TRAIN_TASKS if t % 5 != 4}
    assert sorted(r["task_id"] for r in rows) == sorted(t for t, n in turns.items() for _ in range(n))
    assert (summary.episodes, summary.won, summary.kept_episodes, summary.rows) == (10, 6, 8, sum(turns.values()))
    assert (summary.oracle_actions, summary.other_actions, summary.oracle_gave_up) == (17, 0, 4)
    assert summary.turns == 17 and summary.completion_tokens == sum(sum(r["completion_mask"]) for r in rows)

    # max_turns 2: the tasks that start 3 steps away are truncated, not won
    short = write_demonstrations(env_config(max_turns=2), tokenizer, tmp_path / "short.jsonl", episodes=10)
    assert short.won == 3  # tasks 1, 5 and 7
    assert {r["task_id"] for r in read_rows(tmp_path / "short.jsonl")} == {1, 5, 7}


def test_keep_won_writes_exactly_the_won_episodes(tokenizer, tmp_path):
    kwargs = {"episodes": 30, "noise": 0.25, "seed": 5}
    every = write_demonstrations(env_config(), tokenizer, tmp_path / "all.jsonl", keep="all", **kwargs)
    won = write_demonstrations(env_config(), tokenizer, tmp_path / "won.jsonl", keep="won", **kwargs)
    all_rows, won_rows = read_rows(tmp_path / "all.jsonl"), read_rows(tmp_path / "won.jsonl")
    assert won_rows == [r for r in all_rows if r["won"]]
    assert any(not r["won"] for r in all_rows) and won_rows
    assert won.won == every.won == won.kept_episodes == len({r["episode"] for r in won_rows})
    assert every.kept_episodes == len({r["episode"] for r in all_rows})


def test_noise_replaces_about_that_share_of_the_oracle_actions(tokenizer, tmp_path):
    noise = 0.3
    summary = write_demonstrations(
        env_config(length=8, max_turns=8), tokenizer, tmp_path / "noisy.jsonl", episodes=200, noise=noise,
        keep="all", seed=2,
    )
    rows = read_rows(tmp_path / "noisy.jsonl")
    flags = [(flag, action) for r in rows for flag, action in zip(r["oracle"], r["actions"], strict=True)]
    actions = len(flags)
    other = sum(not flag for flag, _ in flags)
    assert (summary.oracle_actions, summary.other_actions) == (actions - other, other)
    assert all((action == "right") == flag for flag, action in flags)  # the oracle only ever climbs
    assert actions > 400
    assert abs(other - noise * actions) < 4 * math.sqrt(actions * noise * (1 - noise))
    quiet = write_demonstrations(env_config(length=8, max_turns=8), tokenizer, tmp_path / "q.jsonl", episodes=50)
    assert quiet.other_actions == 0 and quiet.oracle_actions > 0


def test_only_training_tasks_are_played(tokenizer, tmp_path):
    """25 episodes over 10 training tasks: two whole epochs and half of a third, never a held-out task."""
    cfg = env_config()
    starts = EnvironmentDemonstrations(cfg, tokenizer).starts(25, seed=0)
    tasks = [t for t, _ in starts]
    assert sorted(set(tasks)) == TRAIN_TASKS
    assert sorted(tasks[:10]) == sorted(tasks[10:20]) == TRAIN_TASKS and len(set(tasks[20:])) == 5
    write_demonstrations(cfg, tokenizer, tmp_path / "d.jsonl", episodes=25, noise=0.2, keep="all")
    played = {r["task_id"] for r in read_rows(tmp_path / "d.jsonl")}
    assert played <= set(TRAIN_TASKS) and not played & set(EVAL_TASKS + EXTRA_EVAL_TASKS)
    assert played == {t for t in TRAIN_TASKS if t % 5 != 4}  # the locked tasks take no turn


def test_the_same_seed_writes_the_same_file(tokenizer, tmp_path):
    cfg = env_config("conversation")
    paths = [tmp_path / f"{k}.jsonl" for k in range(3)]
    for path, seed in zip(paths, (3, 3, 4), strict=True):
        write_demonstrations(cfg, tokenizer, path, episodes=15, noise=0.3, keep="all", seed=seed)
    assert paths[0].read_bytes() == paths[1].read_bytes()
    assert paths[0].read_bytes() != paths[2].read_bytes()


# ---------------------------------------------------------------------------------------------- errors


def test_an_environment_without_an_oracle_is_named(tokenizer, tmp_path):
    cfg = GroveConfig.model_validate({"env": {"id": "tests.agent_envs:corridor", "action_parser": {"id": "raw"}}})
    with pytest.raises(ValueError, match=r"environment 'corridor' .*has no oracle_action\(\).*grove.envs.oracle"):
        write_demonstrations(cfg, tokenizer, tmp_path / "d.jsonl", episodes=1)


def test_noise_needs_listed_actions(tokenizer, tmp_path):
    cfg = env_config(listed=False)
    assert write_demonstrations(cfg, tokenizer, tmp_path / "ok.jsonl", episodes=10).won == 6  # fine without noise
    with pytest.raises(ValueError, match="noise 0.1 needs an environment that lists its actions.*'ladder'"):
        write_demonstrations(cfg, tokenizer, tmp_path / "d.jsonl", episodes=3, noise=0.1)


def test_a_format_the_parser_reads_otherwise_is_an_error_and_leaves_the_file(tokenizer, tmp_path):
    out = tmp_path / "d.jsonl"
    out.write_text("earlier\n")
    # first_mention reads 'go' (named first) in 'go right'
    cfg = env_config(parser={"id": "first_mention"}, names=["go", "go right", "stay"])
    with pytest.raises(ActionFormatError, match=r"'first_mention' reads the demonstration text 'go right' as the "
                       r"action 'go'"):
        write_demonstrations(cfg, tokenizer, out, episodes=10)
    assert out.read_text() == "earlier\n" and sorted(p.name for p in tmp_path.iterdir()) == ["d.jsonl"]
    with pytest.raises(ValueError, match="returned 'jump'.*not one of the observation's admissible actions"):
        write_demonstrations(env_config(oracle_says="jump"), tokenizer, out, episodes=10)
    for wrong, message in [({"episodes": 0}, "episodes must be at least 1"), ({"noise": 1.5}, r"noise .* \[0, 1\]"),
                           ({"keep": "lost"}, "keep must be 'won' or 'all'")]:
        with pytest.raises(ValueError, match=message):
            write_demonstrations(env_config(), tokenizer, out, **{"episodes": 1, **wrong})
    with pytest.raises(ValueError, match="is a directory"):
        write_demonstrations(env_config(), tokenizer, tmp_path, episodes=1)
    with pytest.raises(ValueError, match="noise 0.5 applies to environment demonstrations"):
        write_demonstrations(load_config(EXAMPLES / "arithmetic.yaml"), tokenizer, out, episodes=1, noise=0.5)


# ---------------------------------------------------------------------------------------------- single-turn tasks


def score(cfg: GroveConfig, rows: list[dict], examples, tokenizer) -> dict[str, list[float]]:
    """The config's rewards of each row's completion as a rollout decodes it, by column name."""
    specs = resolve_rewards(cfg.rewards)
    completions = [tokenizer.decode(r["completion_ids"], skip_special_tokens=True) for r in rows]
    values = compute_rewards(
        specs, [e.prompt for e in examples], completions, columns_for_rewards(examples), step=0, when="in a test"
    )
    return {name: values[:, k].tolist() for k, name in enumerate(reward_columns(specs)[0])}


def _config_file(name: str, **changes) -> GroveConfig:
    data = yaml.safe_load((EXAMPLES / name).read_text())
    for dotted, value in changes.items():
        section, key = dotted.split("__")
        if isinstance(data[section], list):
            data[section][0][key] = value
        else:
            data[section][key] = value
    return load_config(None, [f"{k}={json.dumps(v)}" for k, v in data.items()])


@pytest.mark.parametrize(
    "changes, form",
    [
        ({}, "{}"),  # the example: extract last_number, "Answer with just the number."
        ({"rewards__extract": "answer_tag", "rewards__tag": "result"}, "<result>{}</result>"),
        ({"rewards__extract": "boxed"}, "\\boxed{{{}}}"),
        ({"task__prompt_template": "What is {question}? Put the final answer in <answer></answer> tags."},
         "<answer>{}</answer>"),
    ],
)
def test_arithmetic_gold_completions_score_full_accuracy(tokenizer, tmp_path, changes, form):
    cfg = _config_file("arithmetic.yaml", task__train_size=40, task__eval_size=10, **changes)
    task = build_task(cfg.task)
    out = tmp_path / "arith.jsonl"
    summary = write_demonstrations(cfg, tokenizer, out, episodes=50, seed=1)
    rows = read_rows(out)
    assert (summary.kind, summary.rows, summary.won) == ("task", 50, 50)
    examples = [task.train[r["task_id"]] for r in rows]
    for row, example in zip(rows, examples, strict=True):
        DemonstrationRow.model_validate(row)
        assert row["completion"] == form.format(example.answer) + tokenizer.eos_token
        assert row["completion_mask"] == [1] * len(row["completion_ids"])
    assert score(cfg, rows, examples, tokenizer)[cfg.accuracy_reward_name] == [1.0] * 50


def test_task_prompts_are_the_rollout_prompts_of_training_examples_only(tokenizer, tmp_path):
    cfg = _config_file("arithmetic.yaml", task__train_size=20, task__eval_size=10)
    task = build_task(cfg.task)
    out = tmp_path / "arith.jsonl"
    write_demonstrations(cfg, tokenizer, out, episodes=50)  # 2.5 epochs over the 20 training examples
    rows = read_rows(out)

    def encode(examples):
        return [tuple(ids) for ids in encode_prompts(tokenizer, [e.prompt for e in examples], system_prompt=None)]

    train, held_out = encode(task.train), set(encode(task.eval))
    assert all(tuple(r["prompt_ids"]) == train[r["task_id"]] for r in rows)
    assert not any(tuple(r["prompt_ids"]) in held_out for r in rows)
    assert sorted({r["task_id"] for r in rows}) == list(range(20))
    assert tokenizer.decode(rows[0]["prompt_ids"]).startswith("<|im_start|>user\nWhat is ")


FINDINGS = [
    {"id": "HP:0001250", "name": "Seizure", "synonyms": ["Seizures"]},
    {"id": "HP:0001263", "name": "Global developmental delay", "synonyms": []},
    {"id": "HP:0000486", "name": "Strabismus", "synonyms": ["Squint"]},
    {"id": "HP:0002092", "name": "Pulmonary arterial hypertension", "synonyms": []},
]
CATARACT = {"id": "HP:0000518", "name": "Cataract", "synonyms": []}
PIGMENTOSA = {"id": "HP:0000510", "name": "Retinitis pigmentosa", "synonyms": ["Pigmentary retinopathy"]}
LEXICON = {
    **{f["id"]: [f["name"], *f["synonyms"]] for f in [*FINDINGS, CATARACT, PIGMENTOSA]},
    "HP:0000822": ["Hypertension"],
    "HP:0001249": ["Intellectual disability"],
}
CANDIDATES = ["Retinitis pigmentosa 25", "Dravet syndrome", "Angelman syndrome", "Hepatitis C"]
# a finding named exactly as a candidate (the reward masks candidate names: the synonym must be used), and a correct
# disease whose name the reward cannot mask (its '.' breaks the clause) and names a finding the case does not show
SPECIAL = ["Retinitis pigmentosa", "Dravet syndrome", "Angelman syndrome", "Deletion 10p11.21 with strabismus"]


def _case(answer: int, distractor: dict | None, findings=FINDINGS, candidates=CANDIDATES) -> dict:
    findings = findings[:3] if distractor else findings
    shown = [*findings, *([distractor] if distractor else [])]
    return {
        "disease": {"id": f"ORPHA:{answer}", "name": candidates[answer]},
        "findings": findings,
        "distractor": distractor,
        "presented": [f["id"] for f in shown],
        "candidates": [{"letter": "ABCD"[i], "name": n, "id": f"ORPHA:{i}"} for i, n in enumerate(candidates)],
        "answer": "ABCD"[answer],
        "supported_ids": sorted(f["id"] for f in shown),
    }


def test_clinical_gold_completions_score_one_on_every_objective(tokenizer, tmp_path):
    """clinical_hpo built from hand-made cached cases (no ontology), scored by examples/clinical_crpo.yaml's
    reward and by its strict ('tag') reading."""
    cfg = _config_file("clinical_crpo.yaml", task__train_size=4, task__eval_size=1, task__cache_dir=str(tmp_path))
    params = clinical.ClinicalHpoParams(**cfg.task.params)
    special = _case(3, None, [FINDINGS[0], FINDINGS[1], PIGMENTOSA, FINDINGS[3]], SPECIAL)
    cases = {"train": [_case(2, None), _case(1, CATARACT), _case(0, None), special], "eval": [_case(3, None)]}
    write_json_atomic(clinical.cases_path(params), cases)
    write_json_atomic(clinical.lexicon_path(params), {"format": 1, "terms": LEXICON})
    task = build_task(cfg.task)
    out = tmp_path / "clinical.jsonl"
    write_demonstrations(cfg, tokenizer, out, episodes=8)
    rows = read_rows(out)
    examples = [task.train[r["task_id"]] for r in rows]
    texts = {r["task_id"]: tokenizer.decode(r["completion_ids"], skip_special_tokens=True) for r in rows}
    assert texts[0] == (
        "<think>\nThe patient has these findings:\n- seizure\n- global developmental delay\n- strabismus\n"
        "- pulmonary arterial hypertension\nThe answer is C. Angelman syndrome: it is the only candidate that has "
        "all of these findings.\n</think>\n<answer>C</answer>"
    )
    assert "except cataract, which does not fit it." in texts[1]
    assert "- pigmentary retinopathy\n" in texts[3] and "The answer is D, it is the only candidate" in texts[3]
    strict = cfg.model_copy(update={"rewards": [cfg.rewards[0].model_copy(update={"answer_extraction": "tag"})]})
    for config in (cfg, strict):
        scores = score(config, rows, examples, tokenizer)
        assert set(scores) == {"accuracy", "faithfulness", "comprehensiveness", "format"}
        assert all(values == [1.0] * 8 for values in scores.values()), scores
    # the prompt ids are the completions source's: the system prompt, then the case
    ids = encode_prompts(tokenizer, [examples[0].prompt], system_prompt=cfg.rollout.system_prompt)[0]
    assert rows[0]["prompt_ids"] == ids


@pytest.mark.slow
@pytest.mark.xdist_group("hpo_ontology")  # with the other tests that load the ontology: one load per worker
def test_clinical_gold_completions_score_one_on_real_cases(tokenizer, tmp_path):
    """Cases built from the ontology (~20 s), with and without a red-herring finding."""
    for extra in ({}, {"distractor_finding": True, "num_candidates": 5, "findings_shown": 3, "seed": 1}):
        changes = {f"task__{k}": v for k, v in extra.items()}
        cfg = _config_file(
            "clinical_crpo.yaml", task__train_size=40, task__eval_size=10, task__cache_dir=str(tmp_path), **changes
        )
        task = build_task(cfg.task)
        out = tmp_path / "clinical.jsonl"
        write_demonstrations(cfg, tokenizer, out, episodes=40, model_context=8192)
        rows = read_rows(out)
        examples = [task.train[r["task_id"]] for r in rows]
        scores = score(cfg, rows, examples, tokenizer)
        assert all(values == [1.0] * 40 for values in scores.values()), scores


def test_file_tasks_and_a_tasks_own_demonstrations(tokenizer, tmp_path, monkeypatch):
    data = tmp_path / "qa.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"Say {w}.", "answer": w}) + "\n" for w in ["red", "blue", "green"]))
    cfg = GroveConfig.model_validate({"task": {"id": "jsonl", "train_path": str(data), "eval_fraction": 0.34}})
    write_demonstrations(cfg, tokenizer, tmp_path / "files.jsonl", episodes=4)
    task = build_task(cfg.task)
    for row in read_rows(tmp_path / "files.jsonl"):
        assert row["completion"] == task.train[row["task_id"]].answer + tokenizer.eos_token

    class Spoken(TaskSplits):
        def demonstration(self, example) -> str:
            return f"I say {example.answer}."

    monkeypatch.setattr(TASKS, "_entries", dict(TASKS._entries))
    splits = (task.train, task.eval)
    TASKS.register("demo_spoken", params=NoParams)(lambda p: Spoken("spoken", *splits))
    TASKS.register("demo_silent", params=NoParams)(lambda p: TaskSplits("silent", *splits))
    own = GroveConfig.model_validate({"task": {"id": "demo_spoken"}})
    write_demonstrations(own, tokenizer, tmp_path / "own.jsonl", episodes=2)
    assert [r["completion"] for r in read_rows(tmp_path / "own.jsonl")] == [
        f"I say {task.train[r['task_id']].answer}.{tokenizer.eos_token}" for r in read_rows(tmp_path / "own.jsonl")
    ]
    silent = GroveConfig.model_validate({"task": {"id": "demo_silent"}})
    with pytest.raises(NoGoldCompletionError, match=r"task 'demo_silent' has no gold completions.*demonstration"):
        write_demonstrations(silent, tokenizer, tmp_path / "silent.jsonl", episodes=2)
