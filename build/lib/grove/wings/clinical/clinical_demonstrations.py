"""Gold completions of ``clinical_hpo`` cases for ``grove demos``: ``<think>rationale</think><answer>LETTER</answer>``,
the format its system prompt asks for (Clinical-R1's CRPO format).

The rationale lists every finding the case shows (the red herring too) and names the correct disease, so that the
``clinical_objectives`` reward (:mod:`grove.wings.clinical.clinical_objectives`) scores it 1 on accuracy,
faithfulness (only shown findings are asserted), comprehensiveness (every shown finding is mentioned, by a name the
reward's own matcher reads as that finding) and format. A finding all of whose names contain a candidate's name cannot
be counted, since the reward masks candidate names (1 of the 2000 training cases of ``examples/clinical_crpo.yaml``:
comprehensiveness 0.5 there). The task object offers it as its ``demonstration(example)`` method
(:mod:`grove.demos.task_answers`).
"""

from __future__ import annotations

from typing import Any

from grove.demos.task_answers import NoGoldCompletionError
from grove.tasks.task import Example
from grove.wings.clinical.hpo_mentions import (
    MASK,
    PhraseIndex,
    find_mentions,
    load_lexicon,
    mask_names,
    tokens,
)

__all__ = ["clinical_completion"]


def _as_listed(name: str) -> str:
    """A finding's name as a list shows it: lower case first ('Seizure' → 'seizure'), acronyms kept ('EEG …')."""
    if len(name) > 1 and name[0].isupper() and name[1].islower():
        return name[0].lower() + name[1:]
    return name


def _finding_phrase(finding: dict[str, Any], candidate_names: list[str], lexicon: PhraseIndex | None) -> str:
    """How to name a shown finding so that the reward reads it as that finding: its name when that works, else
    the first of its synonyms (or their plurals) that does. A name can fail when it holds a candidate disease's
    name, which the reward masks ('Cerebellar hemangioblastoma' beside the candidate 'Hemangioblastoma')."""
    index = PhraseIndex.from_terms({finding["id"]: [finding["name"], *(finding.get("synonyms") or [])]},
                                   filter_common=False)
    indexes = [index, *([lexicon] if lexicon is not None else [])]
    for phrase in [_as_listed(finding["name"]), *index.phrases]:
        mentions = find_mentions(mask_names(tokens(phrase), candidate_names), indexes)
        if len(mentions) == 1 and finding["id"] in mentions[0][1] and not mentions[0][2]:
            return phrase
    return _as_listed(finding["name"])


def _lexicon(path: Any) -> PhraseIndex | None:
    try:
        return load_lexicon(path) if path else None
    except FileNotFoundError:
        return None


def clinical_completion(example: Example) -> str:
    """A ``clinical_hpo`` case's gold completion: every shown finding on a line of its own (each line is a clause
    of its own, so no finding's words read as negating the next), then the correct candidate, then its letter."""
    columns = example.columns
    letter = str(example.answer).strip()
    try:
        findings = list(columns["findings"])
        distractor = columns.get("distractor")
        names = [c["name"] for c in columns["candidates"]]
        name = next(c["name"] for c in columns["candidates"] if c["letter"] == letter)
    except (KeyError, TypeError, StopIteration) as exc:
        raise NoGoldCompletionError(
            f"clinical_hpo example {example.prompt_text[:60]!r} lacks the columns a gold completion needs "
            f"(findings, candidates with the answer's letter {letter!r}): {exc!r}"
        ) from None
    lexicon = _lexicon(columns.get("lexicon_path"))
    shown = [_finding_phrase(f, names, lexicon) for f in [*findings, *([distractor] if distractor else [])]]
    lines = ["The patient has these findings:", *(f"- {phrase}" for phrase in shown)]
    # the reward masks a candidate's name only when its words are unbroken: a name with sentence punctuation
    # ('… 10p11.21p12.31 microdeletion') would assert phenotypes it names, so that one is called by its letter
    named = all(t == MASK for t in mask_names(tokens(name), names))
    called = f"{letter}. {name}:" if named else f"{letter},"
    verdict = f"The answer is {called} it is the only candidate that has all of these findings"
    if distractor:
        verdict += f" except {shown[-1]}, which does not fit it"
    lines.append(verdict + ".")
    return "<think>\n" + "\n".join(lines) + "\n</think>\n<answer>" + letter + "</answer>"


