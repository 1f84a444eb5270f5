"""Answer normalisation and matching (grove.knowledge.text_match): hand-computed values."""

from __future__ import annotations

import pytest

from grove.knowledge.text_match import contains_answer, exact_match, normalize_answer, token_f1, token_recall


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("The capital is Paris.", "capital is paris"),
        ("  An   apple a day ", "apple day"),
        ("66,987,244", "66987244"),
        ("Population: 66,987,244 people", "population 66987244 people"),
        ("1,5 and 12,34", "1 5 and 12 34"),  # not thousands separators
        ("55.845", "55.845"),  # decimal point kept
        ("Bogotá", "bogota"),
        ("Guinea-Bissau", "guinea bissau"),
        ("St. John's", "st johns"),
        ("", ""),
    ],
)
def test_normalize_answer(raw, expected):
    assert normalize_answer(raw) == expected


def test_exact_match():
    assert exact_match("paris", ["Paris"]) == 1.0
    assert exact_match("The Paris!", ["London", "Paris"]) == 1.0
    assert exact_match("66987244", ["66,987,244"]) == 1.0
    assert exact_match("Paris, France", ["Paris"]) == 0.0
    assert exact_match("Paris", []) == 0.0
    assert exact_match("Paris", "Paris") == 1.0  # a single string is one gold answer


def test_token_f1_hand_values():
    # tokens [capital, is, paris] vs [paris]: precision 1/3, recall 1 -> 2 * (1/3) / (4/3) = 0.5
    assert token_f1("the capital is Paris", ["Paris"]) == pytest.approx(0.5)
    assert token_f1("Paris", ["Paris"]) == 1.0
    assert token_f1("New York", ["York City"]) == pytest.approx(0.5)  # p = r = 1/2
    assert token_f1("Berlin", ["Paris"]) == 0.0
    assert token_f1("Berlin", ["Paris", "Berlin"]) == 1.0  # best gold
    assert token_f1("", [""]) == 1.0 and token_f1("", ["Paris"]) == 0.0  # SQuAD's empty convention
    assert token_f1("x", []) == 0.0


def test_token_recall_hand_values():
    assert token_recall("it is Port au Prince", ["Port-au-Prince"]) == 1.0
    assert token_recall("Port", ["Port-au-Prince"]) == pytest.approx(1 / 3)
    assert token_recall("Port", ["Port-au-Prince", "Port"]) == 1.0
    assert token_recall("anything", []) == 0.0


def test_contains_answer_whole_tokens():
    row = "Country: France. Capital: Paris. Population: 66,987,244."
    assert contains_answer(row, ["Paris"])
    assert contains_answer(row, ["66987244"]) and contains_answer(row, ["66,987,244"])
    assert contains_answer(row, ["London", "capital: paris"])
    assert not contains_answer("Parisian cafes", ["Paris"])
    assert not contains_answer(row, ["6698724"])
    assert not contains_answer(row, ["the"])  # normalises to nothing
    assert not contains_answer("", ["Paris"])
