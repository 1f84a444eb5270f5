"""Reward extraction, built-in rewards, loading by id / import path, error reporting, combining."""

from __future__ import annotations

import math
import threading
from pathlib import Path

import pytest
import torch

import grove.rewards  # noqa: F401  (registers the built-ins)
from grove.registry import REWARD_FUNCTIONS
from grove.rewards.extract import extract_answer
from grove.rewards.scoring import (
    RewardFunctionError,
    RewardLoadError,
    RewardSpec,
    bind_reward,
    compute_rewards,
    resolve_reward,
)


@pytest.fixture(autouse=True)
def _tests_on_path(monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).parent))


# ------------------------------------------------------------------------------------ extraction
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("<answer>42</answer>", "42"),
        ("think... <answer> 7 </answer> then <answer>8</answer>", "8"),  # last block wins
        ("<answer>\n multi\nline \n</answer>", "multi\nline"),
        ("<answer></answer>", None),
        ("<answer>unclosed", None),
        ("no tags at all", None),
    ],
)
def test_extract_answer_tag(text, expected):
    assert extract_answer(text, "answer_tag") == expected


def test_extract_custom_tag():
    assert extract_answer("<final>3</final><answer>4</answer>", "answer_tag", tag="final") == "3"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("The answer is 42.", "42"),
        ("x = -17", "-17"),
        ("we get 1,234,567 apples", "1234567"),
        ("pi is about 3.14159", "3.14159"),
        ("-0.5 and then -2.25", "-2.25"),
        ("3-5", "5"),  # a minus glued to a digit is subtraction, not a sign
        ("costs $1,000.50 total", "1000.50"),
        ("first 12 then 7", "7"),
        ("value .5", "0.5"),
        ("no digits here", None),
    ],
)
def test_extract_last_number(text, expected):
    assert extract_answer(text, "last_number") == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (r"so \boxed{42}", "42"),
        (r"\boxed{1} and finally \boxed{\frac{1}{2}}", r"\frac{1}{2}"),
        (r"\boxed{\sqrt{a_{1}}} end", r"\sqrt{a_{1}}"),
        (r"\fbox{7}", "7"),
        (r"\boxed{3} then truncated \boxed{4", "3"),
        (r"\boxed{}", None),
        ("no box", None),
    ],
)
def test_extract_boxed(text, expected):
    assert extract_answer(text, "boxed") == expected


def test_extract_full_and_bad_mode():
    assert extract_answer("  81 \n", "full") == "81"
    assert extract_answer("   ", "full") is None
    with pytest.raises(ValueError, match="unknown extraction mode"):
        extract_answer("x", "nope")  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------ answer_match
def _match(completions, answers, **params):
    return bind_reward("answer_match", params)(["p"] * len(completions), completions, answer=answers)


def test_answer_match_basic_cases():
    completions = [
        "<answer>81</answer>",
        "<answer>81.0</answer>",
        "<answer>80</answer>",
        "no answer tag 81",
        "<answer>1,234</answer>",
        "<answer> -5 </answer>",
    ]
    answers = ["81", "81", "81", "81", "1234", "-5.00"]
    assert _match(completions, answers) == [1.0, 1.0, 0.0, 0.0, 1.0, 1.0]


def test_answer_match_math_verify_symbolic():
    completions = [r"<answer>\frac{1}{2}</answer>", "<answer>0.5</answer>", r"<answer>\frac12</answer>"]
    assert _match(completions, ["0.5", "1/2", "0.5"]) == [1.0, 1.0, 1.0]
    # without math-verify only exact (numeric/string) equality counts
    assert _match(completions, ["0.5", "1/2", "0.5"], use_math_verify=False) == [0.0, 0.0, 0.0]
    assert _match(["<answer>0.50</answer>"], ["0.5"], use_math_verify=False) == [1.0]


def test_answer_match_other_extractors():
    assert _match(["so it is 81.0"], ["81"], extract="last_number") == [1.0]
    assert _match([r"thus \boxed{81}"], ["81"], extract="boxed") == [1.0]
    assert _match(["81"], ["81"], extract="full") == [1.0]
    assert _match(["<ans>81</ans>"], ["81"], tag="ans") == [1.0]


def test_answer_match_none_gold_does_not_apply_and_missing_column_errors():
    assert _match(["<answer>1</answer>", "<answer>1</answer>"], [None, "1"]) == [None, 1.0]
    fn = bind_reward("answer_match")
    with pytest.raises(ValueError, match="needs a 'answer' dataset column; columns given: question"):
        fn(["p"], ["<answer>1</answer>"], question=["1+0"])


def test_answer_match_outside_main_thread():
    """math-verify's signal-based timeouts only work in the main thread; we disable them elsewhere."""
    result: list = []
    errors: list = []

    def work():
        try:
            result.extend(_match([r"<answer>\frac{1}{2}</answer>"], ["0.5"]))
        except Exception as e:  # pragma: no cover - the failure we guard against
            errors.append(e)

    t = threading.Thread(target=work)
    t.start()
    t.join()
    assert not errors and result == [1.0]


def test_answer_match_params_validation():
    with pytest.raises(Exception, match="extra"):
        REWARD_FUNCTIONS.validate_params("answer_match", {"bogus": 1})
    with pytest.raises(Exception, match="tag"):
        REWARD_FUNCTIONS.validate_params("answer_match", {"tag": "<answer>"})
    with pytest.raises(Exception, match="extract"):
        REWARD_FUNCTIONS.validate_params("answer_match", {"extract": "regex"})


# ------------------------------------------------------------------------------------ answer_format
def test_answer_format_default_pattern():
    fn = bind_reward("answer_format")
    completions = [
        "reasoning <answer>42</answer>",
        "<answer>42</answer> trailing text",
        "<answer>1</answer><answer>2</answer>",  # two blocks
        "<answer></answer>",  # empty
        "no block",
        "multi\nline <answer>\n42\n</answer>\n",
    ]
    assert fn(["p"] * len(completions), completions) == [1.0, 1.0, 0.0, 0.0, 0.0, 1.0]


def test_answer_format_custom_pattern_and_search():
    full = bind_reward("answer_format", {"pattern": r"\d+"})
    assert full(["p", "p"], ["123", "abc 123"]) == [1.0, 0.0]
    search = bind_reward("answer_format", {"pattern": r"\d+", "full_match": False})
    assert search(["p", "p"], ["abc 123", "abc"]) == [1.0, 0.0]
    with pytest.raises(Exception, match="invalid regex"):
        REWARD_FUNCTIONS.validate_params("answer_format", {"pattern": "("})


# ------------------------------------------------------------------------------------ length_penalty
def test_length_penalty_values():
    fn = bind_reward("length_penalty", {"target_length": 10, "penalty_per_char": 0.1, "max_penalty": 0.5})
    out = fn(["p"] * 4, ["x" * 5, "x" * 10, "x" * 13, "x" * 100])
    assert out[0] == 0.0 and out[1] == 0.0
    assert out[2] == pytest.approx(-0.3)
    assert out[3] == pytest.approx(-0.5)  # capped
    uncapped = bind_reward(
        "length_penalty", {"target_length": 0, "penalty_per_char": 0.01, "max_penalty": None}
    )
    assert uncapped(["p"], ["x" * 1000]) == [pytest.approx(-10.0)]
    assert all(v <= 0 for v in bind_reward("length_penalty")(["p"] * 2, ["", "y" * 5000]))


# ------------------------------------------------------------------------------------ resolve_reward
def test_resolve_registry_reward():
    spec = resolve_reward("answer_match", {"extract": "last_number"}, weight=2.0)
    assert isinstance(spec, RewardSpec)
    assert (spec.name, spec.weight) == ("answer_match", 2.0)
    assert spec.fn.__name__ == "answer_match"
    assert spec.fn.params.extract == "last_number"
    assert spec.fn(prompts=["p"], completions=["it is 3"], answer=["3"]) == [1.0]
    assert resolve_reward("answer_format", name="fmt").name == "fmt"


def test_resolve_registry_errors():
    with pytest.raises(RewardLoadError, match="unknown reward function 'nope'.*answer_match"):
        resolve_reward("nope")
    with pytest.raises(RewardLoadError, match="need a colon"):
        resolve_reward("mypkg.rewards.fn")
    with pytest.raises(RewardLoadError, match="invalid params for reward 'answer_match'"):
        resolve_reward("answer_match", {"extract": "bogus"})
    with pytest.raises(RewardLoadError, match="weight"):
        resolve_reward("answer_match", weight=float("nan"))


def test_resolve_user_reward_by_import_path():
    spec = resolve_reward("user_rewards:char_count", weight=0.5)
    assert (spec.name, spec.weight) == ("char_count", 0.5)
    assert spec.fn(prompts=["p"], completions=["abc"]) == [3.0]
    assert resolve_reward("user_rewards:char_count", name="chars").name == "chars"


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("no_such_module_xyz:fn", "cannot import module 'no_such_module_xyz'"),
        ("user_rewards:missing_fn", "module 'user_rewards' has no attribute 'missing_fn'"),
        ("user_rewards:NOT_CALLABLE", "'user_rewards:NOT_CALLABLE' is not callable"),
        ("user_rewards:", "must look like 'package.module:function'"),
        (":fn", "must look like 'package.module:function'"),
    ],
)
def test_resolve_user_reward_bad_paths(path, message):
    with pytest.raises(RewardLoadError, match=message.replace("(", r"\(")) as info:
        resolve_reward(path)
    assert path.split(":")[0] in str(info.value) or path in str(info.value)


def test_user_reward_rejects_params():
    with pytest.raises(RewardLoadError, match="takes no params; got scale"):
        resolve_reward("user_rewards:char_count", {"scale": 2})


# ------------------------------------------------------------------------------------ compute_rewards
def test_compute_rewards_shape_and_none_to_nan():
    specs = [resolve_reward("user_rewards:char_count"), resolve_reward("user_rewards:only_tagged")]
    out = compute_rewards(
        specs, ["p1", "p2", "p3"], ["a", "bb", "ccc"], {"tag": ["yes", "no", "yes"]}, step=3
    )
    assert out.dtype == torch.float32 and out.shape == (3, 2)
    assert out[:, 0].tolist() == [1.0, 2.0, 3.0]
    assert out[0, 1].item() == 1.0 and math.isnan(out[1, 1].item()) and out[2, 1].item() == 1.0


def test_compute_rewards_reports_failing_sample():
    spec = resolve_reward("user_rewards:explodes_on_bad", name="exploder")
    prompts = ["fine prompt", "the prompt that fails " + "z" * 500]
    with pytest.raises(RewardFunctionError) as info:
        compute_rewards([spec], prompts, ["ok", "this is BAD"], {}, step=17)
    msg = str(info.value)
    assert "'exploder'" in msg and "step 17" in msg and "sample 1" in msg
    assert "ZeroDivisionError" in msg and "boom on a bad completion" in msg
    assert "the prompt that fails" in msg and "this is BAD" in msg
    assert "chars]" in msg and len(msg) < 1000  # the long prompt was truncated
    assert isinstance(info.value.__cause__, ZeroDivisionError)


def test_compute_rewards_batch_only_failure_and_chat_prompt_preview():
    spec = resolve_reward("user_rewards:batch_only_failure")
    prompts = [[{"role": "user", "content": "chat question"}], [{"role": "user", "content": "q2"}]]
    with pytest.raises(
        RewardFunctionError, match="on the batch of 2 samples.*batch too large.*chat question"
    ):
        compute_rewards([spec], prompts, ["a", "b"], {}, step=0)


@pytest.mark.parametrize(
    ("fn", "message"),
    [
        ("wrong_length", "returned 1 values for 2 completions"),
        ("returns_string", "bad value for sample 0: reward values must be numbers or None, got str"),
        ("returns_nan", "bad value for sample 0: reward value nan is not finite"),
        ("returns_generator", "returned generator, expected a list"),
    ],
)
def test_compute_rewards_malformed_returns(fn, message):
    spec = resolve_reward(f"user_rewards:{fn}")
    with pytest.raises(RewardFunctionError, match=message) as info:
        compute_rewards([spec], ["p", "q"], ["a", "b"], {}, step=5)
    assert f"'{fn}'" in str(info.value) and "step 5" in str(info.value)


def test_compute_rewards_accepts_tensor_and_numpy_values():
    spec = RewardSpec("t", lambda prompts, completions, **kw: torch.tensor([0.5, 1.0]), 1.0)
    assert compute_rewards([spec], ["p", "q"], ["a", "b"], {}, step=0)[:, 0].tolist() == [0.5, 1.0]


def test_compute_rewards_input_checks():
    spec = resolve_reward("user_rewards:char_count")
    with pytest.raises(ValueError, match="1 prompts for 2 completions"):
        compute_rewards([spec], ["p"], ["a", "b"], {}, step=0)
    with pytest.raises(ValueError, match="column 'answer' has 1 values for 2"):
        compute_rewards([spec], ["p", "q"], ["a", "b"], {"answer": ["1"]}, step=0)


def test_compute_rewards_builtin_on_a_group():
    specs = [resolve_reward("answer_match"), resolve_reward("answer_format", weight=0.1)]
    out = compute_rewards(
        specs,
        ["What is 2+2?"] * 3,
        ["<answer>4</answer>", "<answer>5</answer>", "4"],
        {"answer": ["4"] * 3},
        step=0,
    )
    assert out.tolist() == [[1.0, 1.0], [0.0, 1.0], [0.0, 0.0]]


