"""The ``judge`` reward on a tiny random causal LM: the score is the hand-computed answer probability, batching does
not change it, the cache saves forward passes, colliding answers and bad settings are refused, a tiny training run;
and on the embedded SmolLM2-135M."""

from __future__ import annotations

import json

import pytest
import torch
import yaml
from tests.tiny_reward_models import create_tiny_classifier_dir
from transformers import AutoModelForCausalLM, AutoTokenizer
from typer.testing import CliRunner

from grove.cli import app
from grove.config import ConfigError
from grove.models.tiny import create_tiny_model_dir
from grove.resolve import load_config
from grove.rewards.llm_judge import DEFAULT_TEMPLATE, JudgeParams, loaded_judge
from grove.rewards.reward_model_loading import forget_loaded_models
from grove.rewards.scoring import RewardFunctionError, compute_rewards, resolve_reward

PROMPTS = ["What is 12 + 7?", [{"role": "user", "content": "How many apples are left?"}], "What is 2 + 2?",
           "Solve for x: 2x + 3 = 11"]
COMPLETIONS = ["The answer is 19.", "3", "Let me think step by step. The answer is 5.", "x = 4"]


@pytest.fixture(scope="module")
def lm(tmp_path_factory):
    return create_tiny_model_dir(tmp_path_factory.mktemp("judge") / "model", initializer_range=0.2)


@pytest.fixture(autouse=True)
def fresh_models():
    forget_loaded_models()
    yield
    forget_loaded_models()


def next_token_probs(path, params: JudgeParams) -> torch.Tensor:
    """``[N, vocab]``: the tiny judge's next-token distribution after each judge prompt, one unpadded row at a time,
    straight from transformers."""
    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True).eval()
    rows = []
    with torch.no_grad():
        for prompt, completion in zip(PROMPTS, COMPLETIONS, strict=True):
            question = params.judge_prompt(prompt, completion)
            text = tokenizer.apply_chat_template([{"role": "user", "content": question}], tokenize=False,
                                                 add_generation_prompt=True)
            ids = tokenizer(text, add_special_tokens=False, return_tensors="pt")["input_ids"]
            rows.append(model(input_ids=ids).logits[0, -1].softmax(-1))
    return torch.stack(rows)


def first_token(path, answer: str) -> int:
    return AutoTokenizer.from_pretrained(path, local_files_only=True).encode(answer, add_special_tokens=False)[0]


def test_yes_no_score_is_p_yes_over_p_yes_plus_p_no(lm):
    spec = resolve_reward("judge", {"model": str(lm), "rubric": "Is the answer correct?"})
    scores = compute_rewards([spec], PROMPTS, COMPLETIONS, {}, step=0)[:, 0]
    probs = next_token_probs(lm, spec.fn.params)
    yes, no = probs[:, first_token(lm, "Yes")], probs[:, first_token(lm, "No")]
    torch.testing.assert_close(scores, yes / (yes + no), atol=1e-5, rtol=1e-5)
    assert scores.std() > 1e-4  # the prompts are told apart


def test_a_graded_scale_scores_its_expected_value_mapped_to_unit_range(lm):
    answers = ["1", "2", "3", "4", "5"]
    spec = resolve_reward("judge", {"model": str(lm), "rubric": "How good is the answer, 1 to 5?", "answers": answers})
    scores = torch.tensor(spec.fn(PROMPTS, COMPLETIONS))
    probs = next_token_probs(lm, spec.fn.params)[:, [first_token(lm, a) for a in answers]]
    expected_grade = (probs / probs.sum(-1, keepdim=True)) @ torch.tensor([1.0, 2, 3, 4, 5])
    torch.testing.assert_close(scores, (expected_grade - 1) / 4, atol=1e-5, rtol=1e-5)
    valued = resolve_reward("judge", {"model": str(lm), "rubric": "Which?", "answers": ["Good", "Bad", "x"],
                                      "answer_values": [2, 0, 1]})
    assert all(0.0 <= s <= 1.0 for s in valued.fn(PROMPTS, COMPLETIONS))


def test_batch_size_does_not_change_the_scores(lm):
    one = resolve_reward("judge", {"model": str(lm), "rubric": "Correct?", "batch_size": 1, "cache_size": 0})
    four = resolve_reward("judge", {"model": str(lm), "rubric": "Correct?", "batch_size": 4, "cache_size": 0})
    torch.testing.assert_close(torch.tensor(one.fn(PROMPTS, COMPLETIONS)), torch.tensor(four.fn(PROMPTS, COMPLETIONS)),
                               atol=1e-5, rtol=1e-5)


def test_the_cache_saves_forward_passes_and_evicts_the_least_recently_used(lm):
    spec = resolve_reward("judge", {"model": str(lm), "rubric": "Correct?", "batch_size": 2, "cache_size": 3})
    state = loaded_judge(spec.fn.params)
    first = spec.fn(PROMPTS[:3], COMPLETIONS[:3])
    assert state.forwards == 2
    assert spec.fn(PROMPTS[:3], COMPLETIONS[:3]) == first and state.forwards == 2  # all three cached
    repeated = spec.fn([PROMPTS[3]] * 3, [COMPLETIONS[3]] * 3)  # one distinct sample: one row, one forward
    assert state.forwards == 3 and len(set(repeated)) == 1
    cache = next(iter(state.caches.values()))
    assert len(cache) == 3 and ("What is 12 + 7?", "The answer is 19.") not in cache  # the oldest went out
    spec.fn(PROMPTS[:1], COMPLETIONS[:1])
    assert state.forwards == 4
    other_rubric = resolve_reward("judge", {"model": str(lm), "rubric": "Polite?", "cache_size": 3})
    other_rubric.fn(PROMPTS[:1], COMPLETIONS[:1])
    assert state.forwards == 5 and loaded_judge(other_rubric.fn.params) is state  # same model, its own cache


def test_answers_whose_first_tokens_collide_are_refused_when_scoring(lm):
    assert first_token(lm, "x1") == first_token(lm, "x2")
    spec = resolve_reward("judge", {"model": str(lm), "rubric": "Which?", "answers": ["x1", "x2"],
                                    "answer_values": [1, 0]})
    with pytest.raises(RewardFunctionError, match=r"reward 'judge' at step 0 raised on sample 0: ValueError: judge: "
                       r"the answers 'x1' and 'x2' both begin with the token 'x' \(id \d+\)"):
        compute_rewards([spec], PROMPTS[:2], COMPLETIONS[:2], {}, step=0)


def test_bad_settings_are_config_errors(lm, tmp_path):
    rm = create_tiny_classifier_dir(tmp_path / "rm")
    cases = {
        f"{{id: judge, model: '{tmp_path / 'nope'}', rubric: x}}": r"rewards\.0\.model: .*does not exist",
        f"{{id: judge, model: '{rm}', rubric: x}}": r"rewards\.0\.model: .*LlamaForSequenceClassification, not a "
        "causal language model",
        f"{{id: judge, model: '{lm}'}}": r"rewards\.0\.rubric: Field required",
        f"{{id: judge, model: '{lm}', rubric: x, template: 'no placeholder'}}": r"rewards\.0\.template: .*\{completion\}",
        f"{{id: judge, model: '{lm}', rubric: x, answers: [A, B, C]}}": r"neither two answers .* give answer_values",
        f"{{id: judge, model: '{lm}', rubric: x, answers: [A, B], answer_values: [1, 1]}}": r"all equal",
        f"{{id: judge, model: '{lm}', rubric: x, answers: [A, A]}}": r"distinct",
    }
    for reward, message in cases.items():
        with pytest.raises(ConfigError, match=message):
            load_config(None, [f"rewards=[{reward}]"])
    assert JudgeParams(model="smollm2-135m", rubric="x").values() == (1.0, 0.0)  # no conversion at config time


def test_the_template_is_filled_once_and_keeps_other_braces(lm):
    params = JudgeParams(model=str(lm), rubric="Correct?", template="{\"json\": 1} Q: {prompt} A: {completion} "
                         "{rubric} ({answers})", answers=["1", "2", "3"])
    text = params.judge_prompt([{"role": "user", "content": "say {completion}"}], "ok")
    assert text == "{\"json\": 1} Q: say {completion} A: ok Correct? (1, 2 or 3)"
    assert "{prompt}" in DEFAULT_TEMPLATE and "{rubric}" in DEFAULT_TEMPLATE


def test_train_with_the_judge_reward(lm, tmp_path):
    policy = create_tiny_model_dir(tmp_path / "policy")
    out = tmp_path / "run"
    config = {
        "model": {"name": str(policy)}, "output_dir": str(out), "threads": 1,
        "task": {"id": "arithmetic", "train_size": 8, "eval_size": 2},
        "rewards": [{"id": "judge", "model": str(lm), "rubric": "Is the answer correct?", "weight": 1.0},
                    {"id": "answer_match", "extract": "last_number", "weight": 0.0}],
        "rollout": {"max_new_tokens": 6},
        "train": {"steps": 2, "prompts_per_step": 2, "completions_per_prompt": 3, "micro_batch_size": 3},
        "eval": {"before_training": False, "max_examples": 2, "accuracy_reward": "answer_match"},
        "logging": {"progress": False, "tensorboard": False},
    }
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(config))
    result = CliRunner().invoke(app, ["train", str(tmp_path / "run.yaml")], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert len(metrics) == 2
    assert all(0.0 < m["reward/judge_mean"] < 1.0 for m in metrics)


@pytest.mark.slow
def test_the_embedded_smollm2_judges_in_unit_range_deterministically():
    """SmolLM2-135M as its own judge: scores in [0, 1], the same on a second, uncached run. (Whether a right answer
    outscores a wrong one is not asserted: at 135M parameters it does not, reliably; docs/reward-models.md.)"""
    params = {"model": "smollm2-135m", "rubric": "Is the response a correct answer to the task?", "cache_size": 0}
    spec = resolve_reward("judge", params)
    prompts = ["What is 2 + 3?"] * 2 + ["What is the capital of France?"] * 2
    completions = ["2 + 3 = 5. The answer is 5.", "The answer is 7.", "Paris.", "London."]
    first = spec.fn(prompts, completions)
    assert all(0.0 <= s <= 1.0 for s in first) and len(set(first)) == 4
    assert spec.fn(prompts, completions) == pytest.approx(first, abs=1e-6)
