"""Knowledge-base routing end to end on the real (cached) knowledge bases with a tiny model: `grove train` of the
example config under Step-GRPO, outcome-only GRPO and GiGPO, the routing metrics in metrics.jsonl and eval.jsonl
(held-out test split and the quiz set), and `grove eval`'s per-knowledge-base table."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.test_train_e2e import metric_rows, run_cli

QUIZ = Path("/usr/share/games/bsdgames/quiz")
# the example routes to the medical knowledge base, built from the Human Phenotype Ontology on a fresh cache: with
# the other tests that load the ontology, one load per worker (make test)
pytestmark = pytest.mark.xdist_group("hpo_ontology")


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    from grove.models.tiny import create_tiny_model_dir

    # routing prompts (instructions, question, retrieved passages) run to ~900 tokens
    return create_tiny_model_dir(tmp_path_factory.mktemp("tiny") / "model", seed=0, max_position_embeddings=2048)


@pytest.fixture(scope="module", autouse=True)
def knowledge_cache(request, tmp_path_factory):
    """One knowledge-base cache for the session's runs, kept in pytest's cache dir so reruns skip the builds."""
    root = Path(request.config.cache.mkdir("grove-knowledge"))
    mp = pytest.MonkeyPatch()
    mp.setenv("GROVE_CACHE_DIR", str(root))
    yield root
    mp.undo()


def overrides(model: Path, out: Path, **extra) -> list[str]:
    values = {
        "model.name": str(model),
        "model.init_from": "null",  # the example starts from its warm start; these runs from the tiny model
        "output_dir": str(out),
        "threads": 1,
        "train.steps": 2,
        "train.prompts_per_step": 2,
        "train.completions_per_prompt": 3,
        "train.micro_batch_size": 6,
        "train.precision": "fp32",
        "rollout.max_new_tokens": 6,
        "rollout.temperature": 1.0,
        "eval.every": 2,
        "eval.max_examples": 4,
        "eval.batch_size": 4,
        "eval.max_new_tokens": 6,
        "env.params.max_eval_questions": 4,
        "env.max_context_tokens": 4096,
        "checkpoint.every": 2,
        "logging.progress": False, "logging.plots": False,
        "logging.tensorboard": False,
        **extra,
    }
    args: list[str] = []
    for k, v in values.items():
        args += ["--set", f"{k}={v}"]
    return args


METHODS = {
    "step_grpo": {},
    "outcome_grpo": {"algorithm.advantage": "{id: episode_grpo}", "env.params.reward_mode": "outcome"},
    "gigpo": {"algorithm.advantage": "{id: gigpo}", "env.prompt": "per_step", "env.history": 2},
    "outcome_switch": {"algorithm.advantage": "{id: episode_grpo, episode_score: outcome}"},
}


@pytest.mark.parametrize("method", sorted(METHODS))
def test_example_trains_and_reports_routing_metrics(tiny_model, tmp_path, method):
    out = tmp_path / "run"
    result = run_cli(["train", "examples/kb_routing_step_grpo.yaml", *overrides(tiny_model, out, **METHODS[method])])
    assert result.exit_code == 0, result.output
    rows = metric_rows(out)
    assert [r["step"] for r in rows] == [1, 2]
    for key in ("env/answer_accuracy", "env/searches_per_question", "env/invalid_action_rate", "success_rate"):
        assert key in rows[0], key
    evals = [json.loads(x) for x in (out / "eval.jsonl").read_text().splitlines()]
    # routing_accuracy / retrieval_hit_rate appear once some episode searched (a random tiny model rarely does)
    assert evals and {"answer_accuracy", "searches_per_question", "first_route_accuracy", "invalid_action_rate",
                      "kb/tables/answer_accuracy"} <= set(evals[-1])
    if QUIZ.is_dir():
        assert evals[-1]["quiz/episodes"] == 4 and "quiz/answer_accuracy" in evals[-1]
    if method == "step_grpo":
        assert "advantage/step_groups" in rows[0] and "advantage/lone_step_fraction" in rows[0]
        samples = [json.loads(x) for x in (out / "samples.jsonl").read_text().splitlines()]
        assert samples, "samples.jsonl is empty"
        details = [json.loads(x) for x in (out / "token_details.jsonl").read_text().splitlines()]
        assert details and all("step" in part for d in details for part in d["step_advantages"])
        view = run_cli(["view", str(out), "--out", str(tmp_path / "view")])  # the routing run's report
        assert view.exit_code == 0 and (tmp_path / "view" / "index.html").exists(), view.output


def test_grove_eval_prints_the_per_knowledge_base_table(tiny_model, tmp_path):
    config = tmp_path / "kb.yaml"
    config.write_text(Path("examples/kb_routing_step_grpo.yaml").read_text())
    args = ["eval", "--config", str(config), "--model", str(tiny_model), "--max-examples", "6"]
    result = run_cli(args + overrides(tiny_model, tmp_path / "unused")[2:])
    assert result.exit_code == 0, result.output
    assert "searches_per_question" in result.output and "held-out" in result.output
    if QUIZ.is_dir():
        assert "quiz" in result.output


def test_held_out_sets_cover_every_category_in_any_prefix():
    from collections import Counter

    from grove.envs import build_environment

    suite = build_environment("kb_routing", {"max_eval_questions": 48})
    questions = suite.make().shared.questions
    categories = {questions[i].category for i in suite.eval_tasks}  # the 48 spread over the test split
    assert len(categories) >= 8
    first = Counter(questions[i].category for i in suite.eval_tasks[: len(categories)])
    assert set(first) == categories and set(first.values()) == {1}
    assert len(suite.eval_tasks) == 48 and len(set(suite.eval_tasks)) == 48
    trained = {questions[i].question for i in suite.train_tasks}
    assert not trained & {questions[i].question for i in suite.extra_eval_tasks.get("quiz", [])}
