"""The ``ifeval_instructions`` multi-objective reward over llm-eval-framework's IFEval checkers."""

from __future__ import annotations

import random

import pytest

import grove.wings.ifeval.ifeval_instructions  # noqa: F401  (registers the reward)
from grove.registry import REWARD_FUNCTIONS
from grove.rewards.scoring import bind_reward
from grove.wings.ifeval import ifeval_checkers
from grove.wings.ifeval.ifeval_instructions import CATEGORIES, INSTRUCTION_IDS, IFEvalInstructionsParams
from grove.wings.ifeval.ifeval_task import load_rows

NO_COMMA = ("punctuation:no_comma", {})
WORDS_10 = ("length_constraints:number_words", {"num_words": 10, "relation": "at least"})
JSON = ("detectable_format:json_format", {})
END = ("startend:end_checker", {"end_phrase": "Any other questions?"})
HAS_CAT = ("keywords:existence", {"keywords": ["cat"]})
NO_DOG = ("keywords:forbidden_words", {"forbidden_words": ["dog"]})


def score(completion, *instructions, prompt="Do as told.", **params):
    """Score one completion against ``(id, kwargs)`` instructions; returns the sample's dict."""
    fn = bind_reward("ifeval_instructions", params)
    ids = [i for i, _ in instructions]
    kwargs = [k for _, k in instructions]
    (out,) = fn([prompt], [completion], instruction_id_list=[ids], kwargs=[kwargs])
    return out


def test_registered_with_the_fixed_objective_names():
    from eval_framework.tasks.ifeval.instructions_registry import INSTRUCTION_DICT

    assert "ifeval_instructions" in REWARD_FUNCTIONS.ids()
    assert INSTRUCTION_IDS == tuple(INSTRUCTION_DICT)
    assert CATEGORIES == tuple(dict.fromkeys(i.split(":")[0] for i in INSTRUCTION_DICT))
    assert IFEvalInstructionsParams().objective_names() == ("prompt_pass", "instruction_pass", *CATEGORIES)
    by_id = IFEvalInstructionsParams(granularity="instruction").objective_names()
    assert by_id == ("prompt_pass", "instruction_pass", *INSTRUCTION_IDS) and len(by_id) == 27
    assert (
        IFEvalInstructionsParams().objective_names()
        == IFEvalInstructionsParams(strict=False).objective_names()
    )
    with pytest.raises(ValueError):
        IFEvalInstructionsParams(granularity="word")


def test_single_instructions_pass_and_fail():
    assert score("No commas here at all.", NO_COMMA)["punctuation"] == 1.0
    assert score("Well, a comma.", NO_COMMA)["punctuation"] == 0.0
    assert score("one two three four five six seven eight nine ten", WORDS_10)["length_constraints"] == 1.0
    assert score("one two three four five six seven eight nine", WORDS_10)["length_constraints"] == 0.0
    assert score('{"answer": [1, 2]}', JSON)["detectable_format"] == 1.0
    assert (
        score('```json\n{"answer": 1}\n```', JSON)["detectable_format"] == 1.0
    )  # fences are stripped upstream
    assert score("answer: 1", JSON)["detectable_format"] == 0.0
    assert score("Done. Any other questions?", END)["startend"] == 1.0
    assert score("Any other questions? Done.", END)["startend"] == 0.0


def test_category_fractions_summaries_and_absent_categories():
    out = score("My cat and my dog are friends, truly.", NO_COMMA, HAS_CAT, NO_DOG)
    assert out == {
        "prompt_pass": 0.0,
        "instruction_pass": pytest.approx(1 / 3),
        "keywords": 0.5,
        "punctuation": 0.0,
    }
    out = score("My cat is my only friend.", NO_COMMA, HAS_CAT, NO_DOG)
    assert out == {"prompt_pass": 1.0, "instruction_pass": 1.0, "keywords": 1.0, "punctuation": 1.0}
    names = set(IFEvalInstructionsParams().objective_names())
    assert set(out) <= names and "language" not in out  # absent: the prompt has no language instruction


def test_instruction_granularity():
    out = score("My cat and my dog are friends.", NO_COMMA, HAS_CAT, NO_DOG, granularity="instruction")
    assert out == {
        "prompt_pass": 0.0,
        "instruction_pass": pytest.approx(2 / 3),
        "punctuation:no_comma": 1.0,
        "keywords:existence": 1.0,
        "keywords:forbidden_words": 0.0,
    }


def test_empty_response_fails_everything_and_no_instructions_give_empty_dict():
    assert score("   \n", NO_COMMA, NO_DOG) == {
        "prompt_pass": 0.0,
        "instruction_pass": 0.0,
        "punctuation": 0.0,
        "keywords": 0.0,
    }
    fn = bind_reward("ifeval_instructions", {})
    out = fn(["a", "b"], ["x", "y"], instruction_id_list=[None, []], kwargs=[None, []])
    assert out == [{}, {}]


def test_strict_versus_loose():
    completion = 'Here is the JSON you asked for:\n{"answer": 1}'
    assert score(completion, JSON)["prompt_pass"] == 0.0
    assert score(completion, JSON, strict=False)["prompt_pass"] == 1.0  # first line removed
    bold_end = "Done. **Any other questions?**"
    assert score(bold_end, END)["prompt_pass"] == 0.0
    assert score(bold_end, END, strict=False)["prompt_pass"] == 1.0  # '*' removed
    assert score("   ", JSON, strict=False)["prompt_pass"] == 0.0


def test_punkt_dependent_checkers_work_offline():
    text = "Dr. Smith came home. He left at 5 p.m. today! Did he? Yes."
    assert ifeval_checkers.count_sentences(text) == 4
    at_least_4 = ("length_constraints:number_sentences", {"num_sentences": 4, "relation": "at least"})
    less_than_4 = ("length_constraints:number_sentences", {"num_sentences": 4, "relation": "less than"})
    assert score(text, at_least_4)["prompt_pass"] == 1.0
    assert score(text, less_than_4)["prompt_pass"] == 0.0
    assert score("One sentence only.", less_than_4)["prompt_pass"] == 1.0

    caps = "HELLO world. I AM here, state-of-the-art NASA-style."
    assert ifeval_checkers.word_tokenize(caps) == [
        "HELLO",
        "world",
        ".",
        "I",
        "AM",
        "here",
        ",",
        "state-of-the-art",
        "NASA-style",
        ".",
    ]  # hyphenated: one word
    at_least_3 = (
        "change_case:capital_word_frequency",
        {"capital_frequency": 3, "capital_relation": "at least"},
    )
    less_than_3 = (
        "change_case:capital_word_frequency",
        {"capital_frequency": 3, "capital_relation": "less than"},
    )
    assert score("HELLO world. I AM here.", at_least_3)["change_case"] == 1.0
    assert score("HELLO world. I AM here.", less_than_3)["change_case"] == 0.0
    assert score("Hello world, nothing loud.", less_than_3)["change_case"] == 1.0


def test_every_instruction_in_the_data_builds_and_checks_without_exceptions():
    """Every (id, kwargs) of the 541 prompts builds and runs check_following itself (no exception swallowed)."""
    responses = ["Hello world. This is MY answer, with several words.\n\n***\n\nP.S. bye", '{"a": 1}']
    seen = set()
    for row in load_rows():
        for iid, kwargs in zip(row["instruction_id_list"], row["kwargs"], strict=True):
            checker = ifeval_checkers.build_checker(iid, kwargs, row["prompt"])
            for response in responses:
                assert checker.check_following(response) in (True, False, None)
            seen.add(iid)
    assert seen == set(INSTRUCTION_IDS)


def test_random_fallbacks_are_seeded_and_leave_global_random_alone():
    row = next(
        r
        for r in load_rows()
        if {"letter": "#", "let_relation": "at least", "let_frequency": 4} in r["kwargs"]
    )
    kwargs = row["kwargs"][row["instruction_id_list"].index("keywords:letter_frequency")]
    ifeval_checkers._build.cache_clear()
    state = random.getstate()
    letter = ifeval_checkers.build_checker("keywords:letter_frequency", kwargs).get_instruction_args()[
        "letter"
    ]
    assert random.getstate() == state and letter.isalpha()  # upstream draws a random letter for '#'
    ifeval_checkers._build.cache_clear()
    assert (
        ifeval_checkers.build_checker("keywords:letter_frequency", kwargs).get_instruction_args()["letter"]
        == letter
    )


def test_data_errors_raise_and_checker_crashes_count_as_failures():
    fn = bind_reward("ifeval_instructions", {})
    with pytest.raises(ValueError, match="needs a 'kwargs' dataset column"):
        fn(["p"], ["c"], instruction_id_list=[["punctuation:no_comma"]])
    with pytest.raises(ValueError, match="unknown IFEval instruction id"):
        fn(["p"], ["c"], instruction_id_list=[["punctuation:semicolon"]], kwargs=[[{}]])
    with pytest.raises(ValueError, match="cannot build its checker"):
        fn(
            ["p"],
            ["c"],
            instruction_id_list=[["length_constraints:number_words"]],
            kwargs=[[{"num_words": 3, "relation": "about"}]],
        )

    class Boom:
        def check_following(self, value):
            raise RuntimeError("boom")

    assert ifeval_checkers._follows(Boom(), "text") is False


def test_scores_real_eval_prompts_in_range_with_known_names():
    from grove.tasks.task import build_task, columns_for_rewards

    task = build_task("ifeval", {"eval_size": 40})
    for granularity in ("category", "instruction"):
        params = {"granularity": granularity}
        names = set(IFEvalInstructionsParams(**params).objective_names())
        fn = bind_reward("ifeval_instructions", params)
        prompts = [ex.prompt for ex in task.eval]
        out = fn(prompts, [f"Sure. {p}" for p in prompts], **columns_for_rewards(task.eval))
        assert len(out) == 40
        for sample in out:
            assert {"prompt_pass", "instruction_pass"} <= set(sample) <= names
            assert all(0.0 <= v <= 1.0 for v in sample.values())


def test_adapter_agrees_with_upstream_evaluation_functions():
    """Strict and loose results equal the package's own evaluation functions (where those run offline)."""
    from eval_framework.tasks.ifeval import evaluation

    offline_only = {"length_constraints:number_sentences", "change_case:capital_word_frequency"}
    responses = [
        'Sure! Here it is:\n"My cat, *Tom*, sleeps.\n\n***\n\nP.S. Any other questions?"\nBye',
        '{"a": 1}',
        "<<TITLE>>\n* one\n* two\nSECTION 1 all lower text here ****** another part",
    ]
    compared = 0
    for row in load_rows()[:120]:
        keep = [
            i
            for i, iid in enumerate(row["instruction_id_list"])
            if iid not in offline_only and str(row["kwargs"][i].get("letter", "a")).isalpha()
        ]
        if not keep:
            continue
        ids = [row["instruction_id_list"][i] for i in keep]
        kwargs = [row["kwargs"][i] for i in keep]
        example = evaluation.InputExample(
            key=row["key"], instruction_id_list=ids, prompt=row["prompt"], kwargs=kwargs
        )
        for response in responses:
            for loose, upstream in (
                (False, evaluation.test_instruction_following_strict),
                (True, evaluation.test_instruction_following_loose),
            ):
                expected = upstream(example, {row["prompt"]: response}).follow_instruction_list
                got = ifeval_checkers.check_instructions(ids, kwargs, row["prompt"], response, loose=loose)
                assert got == expected, (row["key"], response, loose)
                compared += 1
    assert compared > 500


def test_evaluation_summary_pools_instructions_for_instruction_level_accuracy():
    import torch

    from grove.wings.ifeval.ifeval_instructions import IFEvalInstructionsParams

    params = IFEvalInstructionsParams()
    names = list(params.objective_names())
    values = torch.full((2, len(names)), float("nan"))
    values[:, names.index("prompt_pass")] = torch.tensor([1.0, 0.0])
    values[:, names.index("instruction_pass")] = torch.tensor([1.0, 0.25])  # 1 of 1, and 1 of 4 followed
    columns = {"instruction_id_list": [["punctuation:no_comma"], ["a:b", "c:d", "e:f", "g:h"]]}
    summary = params.evaluation_summary(values, names, columns)
    assert summary["ifeval/prompt_level_strict_accuracy"] == 0.5
    assert summary["ifeval/instruction_level_strict_accuracy"] == 2 / 5  # pooled, not (1 + 0.25) / 2
