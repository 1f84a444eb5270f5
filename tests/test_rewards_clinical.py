"""The ``clinical_objectives`` reward on hand-written completions and hand-made columns (no ontology).

Every expected value below is computed by hand from the rules in docs/clinical-task.md.
"""

from __future__ import annotations

import json
import time

import pytest
from pydantic import ValidationError

from grove.registry import REWARD_FUNCTIONS
from grove.wings.clinical.clinical_objectives import (
    OBJECTIVES,
    ClinicalObjectivesParams,
    clinical_objectives,
    format_score,
    parse_choice,
    reasoning_text,
)
from grove.wings.clinical.hpo_mentions import find_mentions, load_lexicon, tokens

SEIZURE = {"id": "HP:0001250", "name": "Seizure", "synonyms": ["Seizures", "Epileptic seizure"]}
DELAY = {"id": "HP:0001263", "name": "Global developmental delay", "synonyms": []}
STRABISMUS = {"id": "HP:0000486", "name": "Strabismus", "synonyms": ["Squint", "Cross-eyed"]}
PAH = {"id": "HP:0002092", "name": "Pulmonary arterial hypertension", "synonyms": []}
CATARACT = {"id": "HP:0000518", "name": "Cataract", "synonyms": []}
FINDINGS = [SEIZURE, DELAY, STRABISMUS, PAH]
CANDIDATES = [
    {"letter": "A", "name": "Retinitis pigmentosa 25", "id": "OMIM:1"},
    {"letter": "B", "name": "Dravet syndrome", "id": "ORPHA:2"},
    {"letter": "C", "name": "Angelman syndrome", "id": "ORPHA:3"},
    {"letter": "D", "name": "Hepatitis C", "id": "ORPHA:4"},
]
# shown findings + two ancestors ("Abnormal nervous system physiology" of seizure, "Hypertension"'s
# sibling is not here: HP:0000822 systemic hypertension is NOT an ancestor of pulmonary arterial hypertension)
SUPPORTED = sorted([f["id"] for f in FINDINGS] + ["HP:0012638", "HP:0000118"])
LEXICON_TERMS = {
    **{f["id"]: [f["name"], *f["synonyms"]] for f in FINDINGS},
    "HP:0000118": ["Phenotypic abnormality"],
    "HP:0012638": ["Abnormal nervous system physiology"],
    "HP:0000518": ["Cataract", "Clouding of the lens"],
    "HP:0000510": ["Retinitis pigmentosa"],
    "HP:0007359": ["Focal-onset seizure", "Focal seizures"],  # a descendant of Seizure
    "HP:0000822": ["Hypertension"],
    "HP:0001249": ["Intellectual disability"],
    "HP:0100022": ["Ordering"],  # an everyday word: filtered out of the global lexicon
    "HP:0000718": ["Odd"],  # three letters: filtered out
}


@pytest.fixture(scope="module")
def lexicon_file(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("lexicon") / "lexicon.json"
    path.write_text(json.dumps({"format": 1, "terms": LEXICON_TERMS}))
    return str(path)


def score(completions, lexicon_file, *, findings=FINDINGS, distractor=None, answer="C", **params):
    n = len(completions)
    columns = {
        "answer": [answer] * n,
        "findings": [findings] * n,
        "distractor": [distractor] * n,
        "candidates": [CANDIDATES] * n,
        "supported_ids": [SUPPORTED] * n,
        "lexicon_path": [lexicon_file] * n,
        "disease": [{"id": "ORPHA:3", "name": "Angelman syndrome"}] * n,  # unused columns are ignored
    }
    return clinical_objectives([""] * n, completions, params=ClinicalObjectivesParams(**params), **columns)


def one(completion, lexicon_file, **kw):
    return score([completion], lexicon_file, **kw)[0]


# ---------------------------------------------------------------------------------------------- contract


def test_registered_with_objective_names_in_fixed_order():
    entry = REWARD_FUNCTIONS.entry("clinical_objectives")
    assert entry.params is ClinicalObjectivesParams
    assert "Clinical-R1" in entry.paper
    assert ClinicalObjectivesParams().objective_names() == OBJECTIVES
    assert OBJECTIVES == ("accuracy", "faithfulness", "comprehensiveness", "format")
    subset = ClinicalObjectivesParams(objectives=["format", "accuracy"])
    assert subset.objective_names() == ("accuracy", "format")


def test_one_dict_per_sample_with_the_selected_keys(lexicon_file):
    out = score(["<think>Seizures.</think><answer>C</answer>", "nothing"], lexicon_file)
    assert [list(d) for d in out] == [list(OBJECTIVES)] * 2
    sub = score(["<answer>C</answer>"], lexicon_file, objectives=["format", "accuracy"])
    assert sub == [{"accuracy": 1.0, "format": 0.5}]


def test_params_validation():
    validate = REWARD_FUNCTIONS.validate_params
    with pytest.raises(ValidationError, match="must not repeat"):
        validate("clinical_objectives", {"objectives": ["accuracy", "accuracy"]})
    with pytest.raises(ValidationError):
        validate("clinical_objectives", {"objectives": ["style"]})
    with pytest.raises(ValidationError):
        validate("clinical_objectives", {"objectives": []})
    with pytest.raises(ValidationError):
        validate("clinical_objectives", {"partial_format_credit": 1.5})
    with pytest.raises(ValidationError):
        validate("clinical_objectives", {"unknown": 1})


def test_missing_or_misaligned_columns_raise(lexicon_file):
    params = ClinicalObjectivesParams()
    with pytest.raises(ValueError, match="'findings'"):
        clinical_objectives([""], ["<answer>A</answer>"], params=params, answer=["A"])
    with pytest.raises(ValueError, match="2 values for 1"):
        clinical_objectives([""], ["x"], params=params, answer=["A", "B"], findings=[FINDINGS])
    # accuracy alone needs no findings
    only_acc = ClinicalObjectivesParams(objectives=["accuracy"])
    assert clinical_objectives([""], ["<answer>A</answer>"], params=only_acc, answer=["A"]) == [{"accuracy": 1.0}]


def test_missing_lexicon_file_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="rebuild the clinical_hpo task"):
        one("<think>Seizures.</think><answer>C</answer>", str(tmp_path / "gone.json"))


# ---------------------------------------------------------------------------------------------- accuracy


@pytest.mark.parametrize(
    "answer, expected",
    [
        ("C", 1.0),
        ("(C)", 1.0),
        ("C.", 1.0),
        ("c", 1.0),
        ("C) Angelman syndrome", 1.0),
        ("C. Angelman syndrome", 1.0),
        ("Answer: C", 1.0),
        ("The answer is C", 1.0),
        ("Option C", 1.0),
        ("Angelman syndrome", 1.0),  # the disease name alone
        ("angelman  SYNDROME.", 1.0),
        ("It is Angelman syndrome because of the seizures", 1.0),  # exactly one candidate named
        ("B", 0.0),
        ("E", 0.0),  # not a candidate letter
        ("C or B", 0.0),  # ambiguous
        ("A, C", 0.0),
        ("Angelman syndrome or Dravet syndrome", 0.0),  # two names: ambiguous
        ("A rare imprinting disorder", 0.0),  # an article, not option A; no name
        ("Hepatitis C", 0.0),  # name of D (the trailing C is not a letter choice)
        ("", 0.0),
    ],
)
def test_accuracy_parses_the_last_answer_block(answer, expected, lexicon_file):
    assert one(f"<think>x</think><answer>{answer}</answer>", lexicon_file)["accuracy"] == expected


def test_accuracy_uses_the_last_answer_block_and_needs_one(lexicon_file):
    assert one("<answer>B</answer> no wait <answer>C</answer>", lexicon_file)["accuracy"] == 1.0
    assert one("<answer>C</answer> no wait <answer>B</answer>", lexicon_file)["accuracy"] == 0.0
    assert one("The answer is C.", lexicon_file)["accuracy"] == 0.0  # no tag, no credit
    assert one("<answer>C", lexicon_file)["accuracy"] == 0.0  # unterminated
    assert one("<answer>D</answer>", lexicon_file, answer="D")["accuracy"] == 1.0
    assert one("<answer>C</answer>", lexicon_file, answer=None)["accuracy"] is None


def test_parse_choice_without_candidates_accepts_any_letter():
    assert parse_choice("(B)", None) == "B"
    assert parse_choice("Angelman syndrome", None) is None


# ---------------------------------------------------------------------------------------------- format


@pytest.mark.parametrize(
    "completion, expected",
    [
        ("<think>reasoning</think><answer>C</answer>", 1.0),
        ("  <think>\nreasoning\n</think>\n\n<answer> C </answer>\n", 1.0),
        ("<answer>C</answer>", 0.5),  # no think block: the answer is still machine readable
        ("<think></think><answer>C</answer>", 0.5),  # empty think
        ("<think>r</think><answer>C</answer> and more text", 0.5),  # text after the answer
        ("Sure! <think>r</think><answer>C</answer>", 0.5),  # text before the think block
        ("<think>r</think><think>s</think><answer>C</answer>", 0.5),  # two think blocks
        ("<answer>C</answer><think>r</think>", 0.5),  # wrong order
        ("<think>r</think><answer> </answer>", 0.0),  # empty answer
        ("<think>r</think><answer>C</answer><answer>D</answer>", 0.0),  # two answers
        ("<think>r</think><answer>C", 0.0),  # truncated
        ("C", 0.0),
    ],
)
def test_format(completion, expected, lexicon_file):
    assert one(completion, lexicon_file)["format"] == expected
    assert format_score(completion, 0.0) == (1.0 if expected == 1.0 else 0.0)


# ---------------------------------------------------------------------------------------------- faithfulness / comprehensiveness


def test_restating_findings_is_faithful_and_comprehensive(lexicon_file):
    text = (
        "<think>The patient has seizures, global developmental delay, strabismus and pulmonary arterial "
        "hypertension. Angelman syndrome explains them.</think><answer>C</answer>"
    )
    assert one(text, lexicon_file) == {"accuracy": 1.0, "faithfulness": 1.0, "comprehensiveness": 1.0, "format": 1.0}


def test_invented_finding_lowers_faithfulness(lexicon_file):
    # asserted: seizure (shown), cataract (invented) -> 1/2; covered: seizure -> 1/4
    out = one("<think>Seizures and cataract point to C.</think><answer>C</answer>", lexicon_file)
    assert out["faithfulness"] == 0.5 and out["comprehensiveness"] == 0.25
    # asserted: seizure, strabismus (shown), cataract, intellectual disability (invented) -> 2/4
    out = one("<think>Seizure, squint, cataract, intellectual disability.</think><answer>C</answer>", lexicon_file)
    assert out["faithfulness"] == 0.5 and out["comprehensiveness"] == 0.5
    # synonyms of an invented term count the same: 'clouding of the lens' is cataract
    out = one("<think>Seizures with clouding of the lens.</think><answer>C</answer>", lexicon_file)
    assert out["faithfulness"] == 0.5


def test_repeating_a_finding_counts_once(lexicon_file):
    # distinct asserted terms: seizure (shown), cataract (invented) -> 1/2 however often each is repeated
    text = "<think>Seizure. Seizures. Epileptic seizure. Seizure. Cataract.</think><answer>C</answer>"
    out = one(text, lexicon_file)
    assert out["faithfulness"] == 0.5 and out["comprehensiveness"] == 0.25


@pytest.mark.parametrize(
    "reasoning",
    [
        "Seizures, but no cataract.",
        "Seizures without cataract.",
        "Seizures; absence of cataract.",
        "Seizures. Cataract is absent.",
        "Seizures. The patient does not have a cataract.",
        "Seizures. Cataract was ruled out.",
        "Seizures, and cataract is not present.",
    ],
)
def test_negated_mentions_are_not_assertions(reasoning, lexicon_file):
    out = one(f"<think>{reasoning}</think><answer>C</answer>", lexicon_file)
    assert out["faithfulness"] == 1.0  # only seizure is asserted
    assert out["comprehensiveness"] == 0.25


def test_negation_scope(lexicon_file):
    # a clause boundary ('.', 'but') ends the negation: strabismus is asserted
    out = one("<think>No cataract. Strabismus.</think><answer>C</answer>", lexicon_file)
    assert (out["faithfulness"], out["comprehensiveness"]) == (1.0, 0.25)
    out = one("<think>No cataract but strabismus.</think><answer>C</answer>", lexicon_file)
    assert (out["faithfulness"], out["comprehensiveness"]) == (1.0, 0.25)
    # a negated shown finding is not covered (denying it is not discussing it)
    out = one("<think>No seizures and no strabismus.</think><answer>C</answer>", lexicon_file)
    assert (out["faithfulness"], out["comprehensiveness"]) == (None, 0.0)
    # pseudo-negation: 'no doubt' negates nothing
    out = one("<think>There is no doubt about the seizures.</think><answer>C</answer>", lexicon_file)
    assert (out["faithfulness"], out["comprehensiveness"]) == (1.0, 0.25)
    # negation off: the cataract counts as asserted and unsupported
    out = one("<think>Seizures, no cataract.</think><answer>C</answer>", lexicon_file, negation_window=0)
    assert out["faithfulness"] == 0.5


def test_negation_window_counts_words(lexicon_file):
    text = "<think>No sign of the typical clouding of the lens here. Seizures.</think>"
    # 'no' is 5 words before 'clouding of the lens' -> negated with the default window of 6, not with 3
    assert one(text, lexicon_file)["faithfulness"] == 1.0
    assert one(text, lexicon_file, negation_window=3)["faithfulness"] == 0.5


def test_words_inside_a_mention_are_not_negation_cues():
    from grove.wings.clinical.hpo_mentions import PhraseIndex

    index = PhraseIndex.from_terms({"T": ["Absent thumb"], "S": ["Seizure"]}, filter_common=True)
    assert find_mentions(tokens("absent thumb, seizures"), [index]) == [
        ("absent thumb", ("T",), False),
        ("seizures", ("S",), False),
    ]


def test_ancestors_and_descendants(lexicon_file):
    # an ancestor of a shown finding is a true, more general statement: supported
    text = "<think>Abnormal nervous system physiology and strabismus.</think>"
    assert one(text, lexicon_file)["faithfulness"] == 1.0
    assert one(text, lexicon_file, ancestors_supported=False)["faithfulness"] == 0.5
    # a descendant is a more specific claim than the case makes: not supported, and it does not cover
    # the shown finding (the longest match 'focal seizures' wins over 'seizures')
    out = one("<think>Focal seizures and strabismus.</think>", lexicon_file)
    assert (out["faithfulness"], out["comprehensiveness"]) == (0.5, 0.25)


def test_fragments_of_a_shown_finding_are_supported(lexicon_file):
    # 'hypertension' (HP:0000822, systemic) is a fragment of the shown 'pulmonary arterial hypertension'
    out = one("<think>Hypertension and seizures.</think>", lexicon_file)
    assert (out["faithfulness"], out["comprehensiveness"]) == (1.0, 0.25)  # PAH itself is not covered
    out = one("<think>Hypertension and seizures.</think>", lexicon_file, fragments_supported=False)
    assert out["faithfulness"] == 0.5


def test_candidate_names_are_masked(lexicon_file):
    # 'Retinitis pigmentosa 25' names candidate A; it asserts nothing about the patient
    text = "<think>Retinitis pigmentosa 25 is unlikely given the seizures.</think><answer>C</answer>"
    assert one(text, lexicon_file)["faithfulness"] == 1.0
    assert one(text, lexicon_file, mask_candidate_names=False)["faithfulness"] == 0.5
    # the term on its own is still an (invented) assertion
    text = "<think>Seizures and retinitis pigmentosa.</think>"
    assert one(text, lexicon_file)["faithfulness"] == 0.5


def test_no_assertion_and_empty_reasoning(lexicon_file):
    for completion in ("<answer>C</answer>", "<think></think><answer>C</answer>", "<think>Let me see.</think>C"):
        out = one(completion, lexicon_file)
        assert out["faithfulness"] is None and out["comprehensiveness"] == 0.0
    out = one("<answer>C</answer>", lexicon_file, no_assertion_faithfulness=1.0)
    assert out["faithfulness"] == 1.0


def test_reasoning_without_think_block_is_the_text_before_the_answer(lexicon_file):
    assert reasoning_text("The patient has seizures. <answer>C</answer> cataract") == "The patient has seizures. "
    assert reasoning_text("<think>a</think> b <think>c</think>") == "a\nc"
    out = one("The patient has seizures. <answer>C</answer> Also cataract.", lexicon_file)
    assert (out["faithfulness"], out["comprehensiveness"]) == (1.0, 0.25)
    # an unclosed think block (truncated completion) still counts as reasoning
    out = one("<think>Strabismus and seizures, so", lexicon_file)
    assert (out["faithfulness"], out["comprehensiveness"], out["format"]) == (1.0, 0.5, 0.0)


def test_comprehensiveness_counts_the_distractor_finding(lexicon_file):
    # shown: 4 findings + the cataract red herring; the cataract is now supported and covered
    text = "<think>Seizures and cataract.</think><answer>C</answer>"
    out = one(text, lexicon_file, distractor=CATARACT)
    assert (out["faithfulness"], out["comprehensiveness"]) == (1.0, 2 / 5)


def test_case_terms_match_even_without_a_lexicon(lexicon_file):
    n = 1
    cols = {"answer": ["C"] * n, "findings": [FINDINGS] * n, "candidates": [CANDIDATES] * n}
    out = clinical_objectives(
        [""], ["<think>Squint, seizures, cataract.</think><answer>C</answer>"], params=ClinicalObjectivesParams(), **cols
    )
    # without the lexicon the invented cataract is invisible: a documented limitation
    assert out == [{"accuracy": 1.0, "faithfulness": 1.0, "comprehensiveness": 0.5, "format": 1.0}]


def test_everyday_words_and_short_abbreviations_are_not_terms(lexicon_file):
    out = one("<think>Ordering the odd options: seizures.</think>", lexicon_file)
    assert out["faithfulness"] == 1.0


def test_word_boundaries_and_case(lexicon_file):
    # 'seizures' inside 'seizuresque' or 'strabismuses' does not match; case does not matter
    out = one("<think>SEIZURES; seizuresque; strabismuses.</think>", lexicon_file)
    assert (out["faithfulness"], out["comprehensiveness"]) == (1.0, 0.25)


def test_lexicon_is_loaded_once(lexicon_file):
    assert load_lexicon(lexicon_file) is load_lexicon(lexicon_file)


def test_scoring_is_fast(lexicon_file):
    text = "<think>" + "The patient has seizures and strabismus but no cataract, and hypertension. " * 30
    completions = [text + "</think><answer>C</answer>"] * 64
    start = time.perf_counter()
    out = score(completions, lexicon_file)
    assert time.perf_counter() - start < 2.0
    assert out[0]["faithfulness"] == 1.0 and out[0]["comprehensiveness"] == 0.5


@pytest.mark.parametrize(
    ("completion", "expected"),
    [
        ("The answer is C.", 1.0),
        ("I think... Answer: (C) because", 1.0),
        ("C. Angelman syndrome fits best", 1.0),
        ("the answer is B", 0.0),
        ("The answer is Z", 0.0),  # not a candidate letter
        ("<answer>B</answer> though the answer is C", 0.0),  # a tag wins over free text
        ("<answer></answer> the answer is C", 0.0),  # committing to an empty answer
        ("no letter at all", 0.0),
    ],
)
def test_lenient_answer_extraction(completion, expected, lexicon_file):
    assert one(completion, lexicon_file, answer_extraction="lenient")["accuracy"] == expected
    if "<answer>" not in completion:
        assert one(completion, lexicon_file)["accuracy"] == 0.0  # 'tag' (default) needs the tag
