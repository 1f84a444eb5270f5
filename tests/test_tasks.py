"""Tasks: procedural arithmetic and file-backed (jsonl, hf_dataset) tasks."""

from __future__ import annotations

import csv
import json
import re
from types import SimpleNamespace

import pytest

import grove.tasks  # noqa: F401  (registers the built-in tasks)
from grove.registry import UnknownComponentError
from grove.tasks.task import TASKS, Example, Task, TaskParamsError, build_task, columns_for_rewards


def _questions(examples):
    return [ex.columns["question"] for ex in examples]


# ------------------------------------------------------------------------------------ base
def test_example_columns_always_hold_answer():
    ex = Example(prompt="p", answer="3", columns={"id": 7})
    assert ex.columns == {"id": 7, "answer": "3"}
    with pytest.raises(ValueError, match="differs from answer"):
        Example(prompt="p", answer="3", columns={"answer": "4"})


def test_columns_for_rewards_aligns_and_fills_none():
    exs = [Example("a", "1", {"x": 1}), Example("b", "2")]
    assert columns_for_rewards(exs) == {"x": [1, None], "answer": ["1", "2"]}


def test_registry_and_unknown_task():
    assert {"arithmetic", "jsonl", "hf_dataset"} <= set(TASKS.ids())
    with pytest.raises(UnknownComponentError, match="unknown task 'nope'; known: .*arithmetic"):
        build_task("nope")


# ------------------------------------------------------------------------------------ arithmetic
def test_arithmetic_defaults():
    task = build_task("arithmetic")
    assert isinstance(task, Task) and task.name == "arithmetic"
    assert len(task.train) == 5000 and len(task.eval) == 200
    ex = task.train[0]
    assert re.fullmatch(r"What is \d\d \+ \d\d\? Put the final answer in <answer></answer> tags\.", ex.prompt)


def test_arithmetic_deterministic_per_seed():
    params = {"train_size": 300, "eval_size": 50, "operators": ["+", "-", "*"], "num_terms": 3}
    a, b = build_task("arithmetic", params), build_task("arithmetic", params)
    assert a.train == b.train and a.eval == b.eval
    c = build_task("arithmetic", {**params, "seed": 1})
    assert _questions(c.train) != _questions(a.train)


def test_arithmetic_eval_does_not_depend_on_train_size():
    small = build_task("arithmetic", {"train_size": 10, "eval_size": 30})
    large = build_task("arithmetic", {"train_size": 3000, "eval_size": 30})
    assert small.eval == large.eval


@pytest.mark.parametrize(
    "params",
    [
        {"train_size": 5000, "eval_size": 200},
        # tiny space, filled exactly: 4 values ** 2 terms * 2 operators = 32 expressions
        {"min_value": 1, "max_value": 4, "operators": ["+", "*"], "train_size": 27, "eval_size": 5},
    ],
)
def test_arithmetic_splits_disjoint_and_unique(params):
    task = build_task("arithmetic", params)
    train, eval_ = _questions(task.train), _questions(task.eval)
    assert len(set(train)) == len(train) and len(set(eval_)) == len(eval_)
    assert not set(train) & set(eval_)


def test_arithmetic_answers_are_correct():
    task = build_task(
        "arithmetic",
        {"num_terms": 4, "min_value": -20, "max_value": 20, "operators": ["+", "-", "*"], "train_size": 500},
    )
    for ex in [*task.train, *task.eval]:
        question = ex.columns["question"]
        assert re.fullmatch(r"[\d\s()+\-*]+", question)
        assert ex.answer == str(eval(question))  # noqa: S307 - our own generated arithmetic
        assert ex.columns["answer"] == ex.answer
        assert f"What is {question}?" in ex.prompt
    assert any("(-" in q for q in _questions(task.train))  # negatives are parenthesised


def test_arithmetic_prompt_template_keeps_other_braces():
    task = build_task(
        "arithmetic", {"prompt_template": r"Compute {question}. Answer as \boxed{}.", "eval_size": 3}
    )
    q = task.eval[0].columns["question"]
    assert task.eval[0].prompt == f"Compute {q}. Answer as \\boxed{{}}."


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"prompt_template": "no placeholder"}, "'{question}' placeholder"),
        ({"min_value": 5, "max_value": 1}, "min_value"),
        ({"min_value": 1, "max_value": 3, "train_size": 9, "eval_size": 1}, "exceeds the 9 distinct"),
        ({"operators": ["+", "+"]}, "must not repeat"),
        ({"operators": ["/"]}, "operators"),
        ({"num_terms": 1}, "num_terms"),
        ({"bogus": 1}, "bogus"),
    ],
)
def test_arithmetic_bad_params(params, message):
    with pytest.raises(TaskParamsError, match=re.escape(message)):
        build_task("arithmetic", params)


def test_build_task_from_component_spec():
    spec = SimpleNamespace(id="arithmetic", params={"train_size": 4, "eval_size": 2})
    task = build_task(spec)
    assert (len(task.train), len(task.eval)) == (4, 2)


# ------------------------------------------------------------------------------------ jsonl
def _write_jsonl(path, rows):
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n", encoding="utf-8")
    return str(path)


def _rows(n, start=0):
    return [{"question": f"q{i}", "solution": i * 2, "level": i % 3} for i in range(start, start + n)]


def test_jsonl_with_eval_file(tmp_path):
    train = _write_jsonl(tmp_path / "train.jsonl", _rows(5))
    eval_ = _write_jsonl(tmp_path / "eval.jsonl", _rows(2, start=100))
    task = build_task(
        "jsonl",
        {
            "train_path": train,
            "eval_path": eval_,
            "prompt_column": "question",
            "answer_column": "solution",
            "prompt_template": "Solve: {prompt}",
        },
    )
    assert task.name == "jsonl" and len(task.train) == 5 and len(task.eval) == 2
    ex = task.train[3]
    assert ex.prompt == "Solve: q3" and ex.answer == "6"
    assert ex.columns == {"solution": 6, "level": 0, "answer": "6"}
    assert task.eval[0].prompt == "Solve: q100"


def test_jsonl_held_out_fraction(tmp_path):
    path = _write_jsonl(tmp_path / "all.jsonl", [{"prompt": f"p{i}", "answer": str(i)} for i in range(50)])
    task = build_task("jsonl", {"train_path": path, "eval_fraction": 0.2, "seed": 3})
    assert len(task.train) == 40 and len(task.eval) == 10
    train_p = [e.prompt for e in task.train]
    eval_p = [e.prompt for e in task.eval]
    assert not set(train_p) & set(eval_p) and len(set(train_p) | set(eval_p)) == 50
    assert train_p == sorted(train_p, key=lambda p: int(p[1:]))  # file order kept
    again = build_task("jsonl", {"train_path": path, "eval_fraction": 0.2, "seed": 3})
    assert again.eval == task.eval
    other = build_task("jsonl", {"train_path": path, "eval_fraction": 0.2, "seed": 4})
    assert other.eval != task.eval
    none_held = build_task("jsonl", {"train_path": path, "eval_fraction": 0.0})
    assert len(none_held.train) == 50 and len(none_held.eval) == 0


def test_jsonl_chat_prompts(tmp_path):
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "2+2?"}]
    path = _write_jsonl(tmp_path / "chat.jsonl", [{"prompt": messages, "answer": 4}] * 3)
    task = build_task("jsonl", {"train_path": path, "eval_fraction": 0.0})
    assert task.train[0].prompt == messages and task.train[0].answer == "4"


def test_jsonl_missing_column_names_column_and_available(tmp_path):
    path = _write_jsonl(tmp_path / "t.jsonl", _rows(3))
    with pytest.raises(ValueError) as info:
        build_task("jsonl", {"train_path": path, "prompt_column": "question"})
    msg = str(info.value)
    assert "column 'answer' not found" in msg and "t.jsonl" in msg
    assert "available columns: question, solution, level" in msg


def test_jsonl_file_errors(tmp_path):
    missing = tmp_path / "nope.jsonl"
    with pytest.raises(FileNotFoundError, match="nope.jsonl"):
        build_task("jsonl", {"train_path": str(missing)})
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "a", "answer": "1"}\n{not json\n')
    with pytest.raises(ValueError, match=r"bad.jsonl:2: invalid JSON"):
        build_task("jsonl", {"train_path": str(bad)})
    with pytest.raises(TaskParamsError, match="'{prompt}' placeholder"):
        build_task("jsonl", {"train_path": str(bad), "prompt_template": "no placeholder"})


# ------------------------------------------------------------------------------------ hf_dataset
def test_hf_dataset_from_local_json(tmp_path):
    path = _write_jsonl(tmp_path / "data.jsonl", [{"prompt": f"p{i}", "answer": i} for i in range(20)])
    task = build_task(
        "hf_dataset", {"train_path": path, "eval_fraction": 0.25, "cache_dir": str(tmp_path / "c")}
    )
    assert task.name == "hf_dataset" and len(task.train) == 15 and len(task.eval) == 5
    assert {e.prompt for e in task.train}.isdisjoint({e.prompt for e in task.eval})
    assert all(e.answer == e.prompt[1:] for e in task.train)


def test_hf_dataset_from_local_csv_with_eval_file(tmp_path):
    def write_csv(name, rows):
        path = tmp_path / name
        with path.open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=["question", "gold"])
            writer.writeheader()
            writer.writerows(rows)
        return str(path)

    train = write_csv("train.csv", [{"question": f"{i}+1", "gold": i + 1} for i in range(6)])
    eval_ = write_csv("eval.csv", [{"question": "10+1", "gold": 11}])
    task = build_task(
        "hf_dataset",
        {
            "train_path": train,
            "eval_path": eval_,
            "prompt_column": "question",
            "answer_column": "gold",
            "prompt_template": "What is {prompt}?",
            "cache_dir": str(tmp_path / "c"),
        },
    )
    assert len(task.train) == 6 and [e.prompt for e in task.eval] == ["What is 10+1?"]
    assert task.eval[0].answer == "11" and task.eval[0].columns["gold"] == 11


def test_hf_dataset_from_disk_with_splits(tmp_path):
    import datasets

    dd = datasets.DatasetDict(
        {
            "train": datasets.Dataset.from_list(
                [{"prompt": "a", "answer": "1"}, {"prompt": "b", "answer": "2"}]
            ),
            "test": datasets.Dataset.from_list([{"prompt": "c", "answer": "3"}]),
        }
    )
    dd.save_to_disk(str(tmp_path / "dd"))
    task = build_task("hf_dataset", {"train_path": str(tmp_path / "dd"), "eval_split": "test"})
    assert [e.prompt for e in task.train] == ["a", "b"] and [e.prompt for e in task.eval] == ["c"]
    with pytest.raises(ValueError, match="split 'validation' not in .*splits: train, test"):
        build_task("hf_dataset", {"train_path": str(tmp_path / "dd"), "eval_split": "validation"})


def test_hf_dataset_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="missing.parquet"):
        build_task("hf_dataset", {"train_path": str(tmp_path / "missing.parquet")})
    odd = tmp_path / "data.txt"
    odd.write_text("x")
    with pytest.raises(ValueError, match="set format to json, csv or parquet"):
        build_task("hf_dataset", {"train_path": str(odd)})
    path = _write_jsonl(tmp_path / "d.jsonl", [{"text": "a", "label": "1"}])
    with pytest.raises(ValueError, match="column 'prompt' not found .*available columns: text, label"):
        build_task("hf_dataset", {"train_path": path, "cache_dir": str(tmp_path / "c")})
