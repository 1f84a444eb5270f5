"""The knowledge-base routing environment: reply parsing, step rewards (hand values), state and anchors,
invalid actions, token budget, the routing metrics, and rollouts through the agent layer (token exactness,
step types in the step table, Step-GRPO on them). Uses small fake knowledge bases; the real ones are tested in
``test_knowledge_bases.py`` and end to end in ``test_kb_routing_training.py``."""

from __future__ import annotations

import pytest
import torch
from tests.test_experience_episodes import prompter_factory

import grove.core  # noqa: F401  (registration)
from grove.batch import step_kind_id
from grove.core.advantages.common import run_estimator
from grove.envs.base import EnvironmentSuite, EpisodeRecord
from grove.experience.episodes import EpisodeSettings, run_episodes
from grove.experience.trajectory_batch import trajectories_to_batch
from grove.knowledge import Passage
from grove.registry import ACTION_PARSERS, ADVANTAGE_ESTIMATORS
from grove.rollout.engine import SamplingParams
from grove.rollout.hf_engine import TransformersEngine
from grove.wings.kb_routing.kb_routing_environment import (
    KbRoutingEnv,
    KbRoutingParams,
    _Shared,
    summarize_episodes,
)
from grove.wings.kb_routing.kb_routing_rewards import answer_score, format_ok, parse_reply
from grove.wings.kb_routing.routing_question_types import GoldStep, RoutingQuestion


class FakeKB:
    """Returns the rows whose key occurs in the query (then nothing)."""

    def __init__(self, name: str, rows: dict[str, str]) -> None:
        self.name = name
        self.description = f"the {name} fake"
        self.rows = rows

    def search(self, query: str, k: int) -> list[Passage]:
        hits = [key for key in self.rows if key.lower() in query.lower()]
        return [Passage(self.name, key, key, self.rows[key]) for key in hits[:k]]


KBS = {
    "tables": FakeKB("tables", {
        "France": "Country: France. Capital: Paris. Population: 67,000,000.",
        "Paris": "City: Paris. Country: France. Population: 2,100,000.",
    }),
    "text": FakeKB("text", {"Mona Lisa": "Mona Lisa is a portrait by Leonardo da Vinci."}),
}

QUESTIONS = [
    RoutingQuestion("q0", "What is the capital of France?", ("Paris",),
                    (GoldStep("tables", "capital of France", ("Paris",)),), "country_capital", "tables", "train"),
    RoutingQuestion("q1", "What is the population of the capital of France?", ("2,100,000",),
                    (GoldStep("tables", "capital of France", ("Paris",)),
                     GoldStep("tables", "population of Paris", ("2,100,000",))),
                    "capital_population", "tables>tables", "train"),
    RoutingQuestion("q2", "What is 2 plus 3?", ("5",), (), "arithmetic", "none", "train"),
]


def make_env(tokenizer=None, **params) -> KbRoutingEnv:
    shared = _Shared(KbRoutingParams(**params), QUESTIONS, tokenizer, kbs=KBS)
    return KbRoutingEnv(shared)


THINK = "<think>look it up</think>"


# ------------------------------------------------------------------ parsing and reward parts
@pytest.mark.parametrize(
    ("reply", "kind", "kb", "text"),
    [
        ('<think>x</think><query kb="tables">capital of France</query>', "query", "tables", "capital of France"),
        ("<query kb='Text'>  Mona   Lisa </query>", "query", "text", "Mona Lisa"),
        ("<query kb=tables>capital of France", "query", "tables", "capital of France"),  # stopped at the tag
        ("<answer>Paris</answer> <query kb=\"tables\">x</query>", "answer", "", "Paris"),  # the first tag wins
        ("<answer> </answer>", "invalid", "", ""),
        ('<query kb="tables"></query>', "invalid", "tables", ""),
        ("Paris", "invalid", "", ""),
    ],
)
def test_parse_reply(reply, kind, kb, text):
    parsed = parse_reply(reply)
    assert (parsed.kind, parsed.kb, parsed.text) == (kind, kb, text)


def test_format():
    assert format_ok('<think>a</think>\n<query kb="text">b</query>')
    assert format_ok(" <think>a\nb</think> <answer>c</answer>\n")
    assert not format_ok("<answer>c</answer>")  # no think
    assert not format_ok("<think>a</think><answer>c</answer> and more")
    assert not format_ok("<think>a</think><answer>c")  # unclosed


def test_answer_score_metrics_and_length_cap():
    assert answer_score("The capital is Paris", ["Paris"], "token_recall", 12) == 1.0
    assert answer_score("The capital is Paris", ["Paris"], "token_f1", 12) == pytest.approx(0.5)
    assert answer_score("The capital is Paris", ["Paris"], "exact_match", 12) == 0.0
    assert answer_score("Paris Lyon Nice Lille", ["Paris"], "token_recall", 3) == 0.0  # over the cap


# ------------------------------------------------------------------ stepping
def test_single_hop_query_then_answer():
    env = make_env()
    obs = env.reset(0, seed=1)
    assert obs.text == "Question: What is the capital of France?"
    obs1, reward, done, info = env.step(f'{THINK}<query kb="tables">capital of France</query>')
    assert not done and info["step_type"] == "query" and info["gold_kb"] == "tables"
    assert info["routing_correct"] and info["hit"]
    assert reward == pytest.approx(0.5 + 0.5 + 0.1)  # routing + retrieval hit + format
    assert "Capital: Paris" in obs1.text and obs1.anchor != obs.anchor
    _, reward, done, info = env.step("<answer>Paris</answer>")  # no think: no format reward
    assert done and info["won"] and info["step_type"] == "answer" and info["searches"] == 1 and info["outcome"] == 1.0
    assert reward == pytest.approx(1.0)


def test_wrong_knowledge_base_and_miss():
    env = make_env()
    env.reset(0, seed=1)
    _, reward, _, info = env.step('<query kb="text">capital of France</query>')
    assert not info["routing_correct"] and not info["hit"] and reward == 0.0


def test_unknown_knowledge_base_is_invalid_and_keeps_the_state():
    env = make_env()
    obs = env.reset(0, seed=1)
    obs1, reward, done, info = env.step('<query kb="web">capital of France</query>')
    assert info["invalid_action"] and info["step_type"] == "invalid" and "unknown knowledge base 'web'" in obs1.text
    assert reward == 0.0 and not done and obs1.anchor == obs.anchor
    obs2, *_ , info = env.step("no tags at all")
    assert info["invalid_action"] and obs2.anchor == obs.anchor


def test_two_hops_and_an_unnecessary_search():
    env = make_env()
    env.reset(1, seed=0)
    _, _, _, info = env.step('<query kb="tables">capital of France</query>')
    assert info["gold_kb"] == "tables" and info["hit"]
    _, _, _, info = env.step('<query kb="tables">population of Paris</query>')
    assert info["hit"] and info["routing_correct"]  # the second hop's gold
    _, reward, _, info = env.step('<query kb="tables">Paris</query>')
    assert info["gold_kb"] == "none" and not info["routing_correct"] and not info["hit"] and reward == 0.0
    _, _, done, info = env.step("<answer>2,100,000</answer>")
    assert done and info["won"]


def test_no_retrieval_question_and_call_cost():
    env = make_env(rewards={"call_cost": 0.2, "format": 0.0})
    env.reset(2, seed=0)
    _, reward, _, info = env.step('<query kb="text">2 plus 3</query>')
    assert info["gold_kb"] == "none" and reward == pytest.approx(-0.2)
    _, reward, done, _ = env.step("<answer>5</answer>")
    assert done and reward == 1.0


def test_outcome_mode_rewards_only_the_answer():
    env = make_env(reward_mode="outcome")
    env.reset(0, seed=1)
    _, reward, _, info = env.step(f'{THINK}<query kb="tables">capital of France</query>')
    assert reward == 0.0 and info["routing_correct"]  # the parts are still logged
    _, reward, _, _ = env.step(f"{THINK}<answer>It is Paris</answer>")
    assert reward == 1.0  # no format part


def test_passages_are_cut_to_the_token_budget(policy):
    _, tokenizer = policy
    env = make_env(tokenizer=tokenizer, passage_token_budget=8)
    env.reset(0, seed=1)
    obs, *_ = env.step('<query kb="tables">capital of France</query>')
    shown = obs.text.split("\n", 1)[1]
    assert shown.endswith(" …")
    assert len(tokenizer(shown[: -len(" …")], add_special_tokens=False)["input_ids"]) <= 8
    words = make_env(passage_token_budget=3)
    words.reset(0, seed=1)
    obs, _, _, info = words.step('<query kb="tables">capital of France</query>')
    assert obs.text.split("\n", 1)[1] == "[1] Country: France. …"
    assert not info["hit"]  # the answer was cut off: a hit counts only what the model is shown


# ------------------------------------------------------------------ metrics
def test_summarize_by_knowledge_base():
    records = [
        EpisodeRecord(0, ({"step_type": "query", "kb": "tables", "gold_kb": "tables", "routing_correct": True,
                           "hit": True}, {"step_type": "answer", "won": True}), (True, True), True, False),
        EpisodeRecord(0, ({}, {"step_type": "answer", "won": False}), (False, True), False, False),
        EpisodeRecord(2, ({"step_type": "query", "kb": "text", "gold_kb": "none", "routing_correct": False,
                           "hit": False},), (True,), False, True),
    ]
    m = summarize_episodes(records, QUESTIONS)
    assert m["answer_accuracy"] == pytest.approx(1 / 3)
    assert m["answered_fraction"] == pytest.approx(2 / 3)
    assert m["searches_per_question"] == pytest.approx(2 / 3)
    assert m["routing_accuracy"] == pytest.approx(0.5)
    assert m["unnecessary_search_rate"] == pytest.approx(0.5)
    assert m["invalid_action_rate"] == pytest.approx(1 / 6)
    # first action: a search to tables (right), an invalid turn then an answer (the first valid action is the
    # answer: wrong for a tables question), a search for a no-retrieval question (wrong)
    assert m["first_route_accuracy"] == pytest.approx(1 / 3)
    assert m["kb/tables/answer_accuracy"] == pytest.approx(0.5)
    assert m["kb/none/searches_per_question"] == 1.0
    assert m["kb/none/routing_accuracy"] == 0.0 and m["kb/tables/routing_accuracy"] == 1.0


# ------------------------------------------------------------------ through the agent layer
def test_rollouts_are_token_exact_and_carry_step_types(policy):
    model, tokenizer = policy
    shared = _Shared(KbRoutingParams(), QUESTIONS, tokenizer, kbs=KBS)
    suite = EnvironmentSuite("kb", lambda: KbRoutingEnv(shared), [0, 1, 2], [], "Answer.")
    parse = ACTION_PARSERS.get("full_text")
    for mode in ("per_step", "conversation"):
        settings = EpisodeSettings(
            make_env=suite.make,
            make_prompter=prompter_factory(mode, tokenizer, suite, max_turns=3),
            parse=lambda text, obs: parse(text, obs, None),
            sampling=SamplingParams(temperature=1.0, max_new_tokens=6),
            max_turns=3,
            invalid_penalty=0.1,
        )
        run = run_episodes(
            TransformersEngine(model, tokenizer),
            settings,
            [(0, 3), (1, 4)],
            group_size=3,
            generator=torch.Generator().manual_seed(0),
        )
        batch, _ = trajectories_to_batch(run.trajectories, 3, pad_token_id=tokenizer.pad_token_id)
        kinds = {step_kind_id(t.info.get("step_type", "invalid" if not t.parsed.valid else None))
                 for tr in run.trajectories for t in tr.turns}
        assert set(batch.steps.column("kind").tolist()) == kinds
        outcomes = [float(t.info.get("outcome", 0.0)) for tr in run.trajectories for t in tr.turns]
        assert batch.steps.column("outcome").tolist() == pytest.approx(outcomes)
        # random text is an invalid reply: penalised, typed "invalid", the environment gives feedback
        invalid = [t for tr in run.trajectories for t in tr.turns if t.invalid]
        assert invalid and all(t.penalty == 0.1 for t in invalid)
        params = ADVANTAGE_ESTIMATORS.validate_params("step_grpo", {})
        out = run_estimator(ADVANTAGE_ESTIMATORS.get("step_grpo"), batch, torch.zeros(batch.num_samples), params)
        assert torch.isfinite(out.advantages).all()


def test_embedding_query_similarity_is_computed_only_when_weighted():
    """query_similarity: embedding (all-MiniLM-L6-v2, shipped offline): a paraphrase of the gold sub-question scores
    far above an unrelated query; with the part unweighted no embedding is computed (logged as 0)."""
    env = make_env(query_similarity="embedding", rewards={"query_similarity": 0.5})
    env.reset(0, seed=1)
    *_, close = env.step('<query kb="tables">capital city of France</query>')
    env.reset(0, seed=1)
    *_, far = env.step('<query kb="tables">France chemical elements list</query>')
    assert close["reward_parts"]["query_similarity"] > 0.8 > far["reward_parts"]["query_similarity"] + 0.2
    off = make_env(query_similarity="embedding")
    off.reset(0, seed=1)
    *_, info = off.step('<query kb="tables">capital city of France</query>')
    assert info["reward_parts"]["query_similarity"] == 0.0
