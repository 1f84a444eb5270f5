"""The routing-QA question sets (grove.wings.kb_routing.routing_questions, grove.wings.kb_routing.quiz_questions).

Gold routes are re-checked here by searching the knowledge bases directly, not by trusting the builder's
bookkeeping. Tests on the tables-only categories are fast; the full default set needs the medical KB (the
ontology load, ~20 s, shared with tests/test_knowledge_bases.py through the session cache dir) and is slow.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pytest

from grove.knowledge import build_knowledge_base
from grove.knowledge.text_match import contains_answer, normalize_answer
from grove.wings.kb_routing.quiz_questions import (
    DEFAULT_QUIZ_DIR,
    expand_quiz_pattern,
    parse_quiz_line,
    quiz_question_report,
    quiz_questions,
)
from grove.wings.kb_routing.routing_question_types import (
    CATEGORIES,
    DEFAULT_CATEGORIES,
    DEFAULT_KB_IDS,
    KB_ROLES,
    RoutingQuestion,
    RoutingQuestionParams,
)
from grove.wings.kb_routing.routing_questions import (
    clear_routing_question_memo,
    routing_question_report,
    routing_questions,
    routing_questions_path,
    split_targets,
)

TABLE_CATEGORIES = [
    "country_capital",
    "country_population",
    "element_symbol",
    "element_number",
    "capital_population",
    "arithmetic",
]


@pytest.fixture(scope="session")
def kb_cache(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.getbasetemp() / "grove-knowledge-cache"
    path.mkdir(exist_ok=True)
    return str(path)


@pytest.fixture(scope="module")
def small_params(kb_cache) -> RoutingQuestionParams:
    return RoutingQuestionParams(categories=TABLE_CATEGORIES, per_category=40, cache_dir=kb_cache)


@pytest.fixture(scope="module")
def small(small_params) -> list[RoutingQuestion]:
    return routing_questions(small_params)


def _entity(q: RoutingQuestion, country_iso: dict[str, str]) -> str:
    """The entity a question is about, from its qid (wiki articles titled like a country are that country)."""
    category, _, rest = q.qid.partition(":")
    if category in ("country_capital", "country_population", "capital_population", "wiki_country_capital"):
        return f"country:{rest}"
    if category in ("element_symbol", "element_number"):
        return f"element:{rest}"
    if category == "wiki_description":
        iso = country_iso.get(normalize_answer(rest))
        return f"country:{iso}" if iso else f"article:{rest}"
    return f"{category}:{rest}"


def _country_iso(kb_cache) -> dict[str, str]:
    tables = build_knowledge_base("tables", {"cache_dir": kb_cache})
    return {normalize_answer(f["name"]): f["iso"] for f in tables.fields if f.get("table") == "countries"}


def _check_gold_route(questions: list[RoutingQuestion], kb_cache: str) -> None:
    roles = {s.kb for q in questions for s in q.steps}
    kbs = {role: build_knowledge_base(DEFAULT_KB_IDS[role], {"cache_dir": kb_cache}) for role in roles}
    for q in questions:
        assert q.route == (">".join(s.kb for s in q.steps) or "none"), q
        assert q.answers and all(q.answers), q
        for step in q.steps:
            assert step.kb in KB_ROLES and step.sub_question and step.answers, q
            top = kbs[step.kb].search(step.sub_question, 3)
            assert any(contains_answer(p.text, step.answers) for p in top), (q.qid, step)
            if step.kb == "text":  # the article itself must be retrieved
                assert step.answers[0] in [p.title for p in top], (q.qid, step)
        if q.steps:  # the last hop surfaces the final answer
            assert set(q.steps[-1].answers) & set(q.answers) or q.category == "disease_phenotype", q
            if q.category == "disease_phenotype":
                assert set(q.steps[-1].answers) <= set(q.answers), q


def _check_splits_disjoint(questions: list[RoutingQuestion], country_iso: dict[str, str]) -> None:
    splits_of: dict[str, set[str]] = defaultdict(set)
    for q in questions:
        splits_of[_entity(q, country_iso)].add(q.split)
    mixed = {e: s for e, s in splits_of.items() if len(s) > 1}
    assert not mixed, f"entities in several splits: {sorted(mixed.items())[:5]}"


# ----------------------------------------------------------------------------------------------
# fast: tables-only categories
# ----------------------------------------------------------------------------------------------


def test_params_validation():
    with pytest.raises(ValueError, match="validation_fraction \\+ test_fraction"):
        RoutingQuestionParams(validation_fraction=0.5, test_fraction=0.5)
    with pytest.raises(ValueError, match="categories"):
        RoutingQuestionParams(categories=["country_capitol"])
    with pytest.raises(ValueError, match="seeds"):
        RoutingQuestionParams(seeds=1)
    assert RoutingQuestionParams(categories=["arithmetic", "country_capital"]).categories == [
        "country_capital",
        "arithmetic",
    ]
    assert tuple(RoutingQuestionParams().categories) == DEFAULT_CATEGORIES  # emblem_colour: only when named
    assert set(CATEGORIES) - set(DEFAULT_CATEGORIES) == {"emblem_colour"}


def test_small_set_shape(small, small_params):
    targets = split_targets(small_params)
    assert targets == {"train": 28, "validation": 4, "test": 8}
    assert len({q.qid for q in small}) == len(small)
    counts: dict[tuple[str, str], int] = defaultdict(int)
    for q in small:
        counts[q.category, q.split] += 1
    for category in TABLE_CATEGORIES:
        for split in ("train", "validation", "test"):
            assert 0 < counts[category, split] <= targets[split], (category, split)
    assert counts["country_capital", "train"] == 28 and counts["arithmetic", "test"] == 8
    splits = [q.split for q in small]
    assert splits == sorted(
        splits, key=["train", "validation", "test"].index
    )  # train, then validation, then test
    routes = {q.category: q.route for q in small}
    assert routes == {
        "country_capital": "tables",
        "country_population": "tables",
        "element_symbol": "tables",
        "element_number": "tables",
        "capital_population": "tables>tables",
        "arithmetic": "none",
    }


def test_small_set_facts(small):
    by_qid = {q.qid: q for q in small}
    some = next(q for q in small if q.category == "country_capital")
    assert some.question.startswith("What is the capital of ") and some.steps[0].sub_question.startswith(
        "capital of "
    )
    if "country_capital:FR" in by_qid:
        assert by_qid["country_capital:FR"].answers == ("Paris",)
    pop = next(q for q in small if q.category == "country_population")
    assert pop.answers[0].isdigit() and pop.answers[1] == f"{int(pop.answers[0]):,}"
    arith = next(q for q in small if q.category == "arithmetic")
    a, op, b = arith.question.removeprefix("What is ").removesuffix("?").split()
    assert (
        int(arith.answers[0])
        == {"plus": int(a) + int(b), "minus": int(a) - int(b), "times": int(a) * int(b)}[op]
    )
    two_hop = next(q for q in small if q.category == "capital_population")
    assert two_hop.steps[0].answers[0] in two_hop.steps[1].sub_question
    assert two_hop.answers == two_hop.steps[1].answers


def test_small_set_gold_routes_answerable(small, kb_cache):
    _check_gold_route(small, kb_cache)


def test_small_set_splits_disjoint_by_entity(small, kb_cache):
    _check_splits_disjoint(small, _country_iso(kb_cache))


def test_deterministic_and_cached(small, small_params):
    path = routing_questions_path(small_params)
    assert path.is_file()
    path.unlink()
    clear_routing_question_memo()
    rebuilt = routing_questions(small_params)
    assert rebuilt == small and path.is_file()
    clear_routing_question_memo()
    assert routing_questions(small_params.model_dump()) == small  # read back from the JSON cache
    other_seed = routing_questions(small_params.model_copy(update={"seed": 1}))
    assert {(q.qid, q.split) for q in other_seed} != {(q.qid, q.split) for q in small}


def test_report_counts(small, small_params):
    report = routing_question_report(small_params)
    assert report["skipped_categories"] == {}
    for category, stats in report["categories"].items():
        assert stats["per_split"] == {
            s: sum(q.category == category and q.split == s for q in small)
            for s in ("train", "validation", "test")
        }
        assert stats["checked"] - stats["dropped"] == sum(stats["per_split"].values())


def test_too_small_category_is_skipped(kb_cache):
    params = RoutingQuestionParams(
        categories=["element_symbol", "arithmetic"],
        per_category=40,
        min_category_size=200,
        cache_dir=kb_cache,
    )
    assert routing_questions(params) == []
    assert set(routing_question_report(params)["skipped_categories"]) == {"element_symbol", "arithmetic"}


# ----------------------------------------------------------------------------------------------
# slow: the full default set (needs the medical KB)
# ----------------------------------------------------------------------------------------------


# with the other tests that load the ontology (tests/test_knowledge_bases.py, tests/test_demos.py): one load per
# worker, and the medical knowledge base built once into the worker's cache dir
full_set = pytest.mark.xdist_group("hpo_ontology")


@pytest.fixture(scope="module")
def full(kb_cache) -> list[RoutingQuestion]:
    return routing_questions(RoutingQuestionParams(cache_dir=kb_cache))


@pytest.mark.slow
@full_set
def test_full_set_every_category_and_split(full):
    present = {(q.category, q.split) for q in full}
    for category in DEFAULT_CATEGORIES:
        for split in ("train", "validation", "test"):
            assert (category, split) in present, (category, split)
    routes = {q.category: q.route for q in full}
    assert routes["wiki_description"] == "text" and routes["wiki_country_capital"] == "text>tables"
    assert routes["disease_phenotype"] == "medical"


@pytest.mark.slow
@full_set
def test_full_set_gold_routes_answerable(full, kb_cache):
    _check_gold_route(full, kb_cache)


@pytest.mark.slow
@full_set
def test_full_set_splits_disjoint_by_entity(full, kb_cache):
    _check_splits_disjoint(full, _country_iso(kb_cache))


@pytest.mark.slow
@full_set
def test_full_set_text_questions(full):
    wiki = [q for q in full if q.category == "wiki_description"]
    for q in wiki:
        description = q.steps[0].sub_question
        assert q.question == f"Which subject is described as '{description}'?"
        assert len(description.split()) >= 4 and not contains_answer(description, [q.answers[0]])
    disease = [q for q in full if q.category == "disease_phenotype"]
    assert all(len(q.answers) >= 3 and q.steps[0].sub_question.startswith("phenotypes of ") for q in disease)


# ----------------------------------------------------------------------------------------------
# quiz (out of distribution)
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pattern", "expected"),
    [
        ("Andorra la V[ell|iej]a", ["Andorra la Vella", "Andorra la Vieja"]),
        ("Vienna|Wien", ["Vienna", "Wien"]),
        ("{The }Gambia", ["The Gambia", "Gambia"]),
        ("{{People's }Republic of }China", ["People's Republic of China", "Republic of China", "China"]),
        ("{DR |Democratic Republic of the }Congo", ["DR Congo", "Democratic Republic of the Congo", "Congo"]),
        ("Washington{ DC}", ["Washington DC", "Washington"]),
        ("Yaound['\be|e\b'|e]", ["Yaoundé", "Yaounde"]),  # overstrike accents, as in the Debian files
        ("K[o|o\b/|/\bo]benhavn", ["Kobenhavn", "København"]),
        ("Chi[,\bs|s\b,|s]inau", ["Chișinau", "Chisinau"]),
        ("Bahr[a|e]in", ["Bahrain", "Bahrein"]),
        ("a\\|b", ["a|b"]),
    ],
)
def test_expand_quiz_pattern(pattern, expected):
    assert expand_quiz_pattern(pattern) == expected


def test_parse_quiz_line_and_errors():
    assert parse_quiz_line("Austria:Vienna|Wien") == [["Austria"], ["Vienna", "Wien"]]
    assert parse_quiz_line("M[iddle{-}Earth|E]:cap{ital}") == [
        ["Middle-Earth", "MiddleEarth", "ME"],
        ["capital", "cap"],
    ]
    with pytest.raises(ValueError, match="unbalanced"):
        expand_quiz_pattern("V[ell|iej")


def test_quiz_questions_on_synthetic_files(tmp_path, kb_cache):
    (tmp_path / "europe").write_text(
        "Austria:Vienna|Wien\nAndorra:Andorra la V[ell|iej]a\nAtlantis:Poseidonia\n"
        "{The }Netherlands:Amsterdam\n",
        encoding="utf-8",
    )
    (tmp_path / "africa").write_text("Cameroon:Yaound['\be|e\b'|e]\n", encoding="utf-8")
    (tmp_path / "elements").write_text(
        "Fe:26:55.85:Iron\nLw:103:(259):Lawrencium\nXx:200:1:Unobtainium\n", encoding="utf-8"
    )
    questions = quiz_questions(tmp_path, cache_dir=kb_cache)
    by_q = {q.question: q for q in questions}
    assert all(q.split == "quiz" and q.route == "tables" for q in questions)
    austria = by_q["What is the capital of Austria?"]
    assert austria.answers == ("Vienna", "Wien") and austria.category == "country_capital"
    assert austria.steps[0].sub_question == "capital of Austria" and austria.steps[0].answers == ("Vienna",)
    assert by_q["What is the capital of Cameroon?"].answers == ("Yaoundé", "Yaounde")
    # quiz says Amsterdam; the tables KB says the same city, so no extra answer
    assert by_q["What is the capital of The Netherlands?"].answers == ("Amsterdam",)
    assert by_q["What is the chemical symbol of Iron?"].answers == ("Fe",)
    assert by_q["What is the atomic number of Iron?"].answers == ("26",)
    assert by_q["What is the chemical symbol of Lawrencium?"].answers == ("Lw", "Lr")  # KB's symbol added
    assert len(questions) == 7
    report = quiz_question_report(tmp_path, cache_dir=kb_cache)
    assert report["files"]["europe"]["skipped_entities"] == [
        "Andorra",
        "Atlantis",
    ]  # answer in question; unknown
    assert report["files"]["elements"]["skipped_entities"] == ["Unobtainium"]
    assert (report["kept"], report["skipped"], report["questions"]) == (
        5,
        3,
        7,
    )  # entities: 3 countries, 2 elements


def test_quiz_questions_missing_dir(tmp_path):
    assert quiz_questions(tmp_path / "absent") == []
    assert quiz_question_report(tmp_path / "absent")["questions"] == 0


@pytest.mark.skipif(not Path(DEFAULT_QUIZ_DIR).is_dir(), reason="bsdgames quiz files not installed")
def test_quiz_questions_from_bsdgames(kb_cache):
    questions = quiz_questions(cache_dir=kb_cache)
    report = quiz_question_report(cache_dir=kb_cache)
    assert report["questions"] == len(questions) > 300
    assert set(report["files"]) == {"africa", "america", "asia", "europe", "elements"}
    by_q = {q.question: q for q in questions}
    assert set(by_q["What is the capital of Austria?"].answers) >= {"Vienna", "Wien"}
    assert "Brasília" in by_q["What is the capital of Brazil?"].answers
    assert len({q.qid for q in questions}) == len(questions)
    tables = build_knowledge_base("tables", {"cache_dir": kb_cache})
    for q in questions:  # the entity is a row of the tables KB and the gold hop finds its answer
        top = tables.search(q.steps[0].sub_question, 3)
        assert any(contains_answer(p.text, q.steps[0].answers) for p in top), q
