"""Gold completions of single-turn tasks: the text a correct answer would be, in the format the config asks for.

Where a completion comes from, in order:

1. the task's own ``demonstration(example) -> str`` method, when it has one (a user task's way to offer gold text);
2. the built-in tasks:

   * ``arithmetic``: the result, in the form the config's ``answer_match`` reward extracts (its ``extract``:
     ``answer_tag`` → ``<answer>N</answer>`` with its ``tag``; ``boxed`` → ``\\boxed{N}``; ``full`` → ``N``;
     ``last_number``, or no ``answer_match`` reward → ``<answer>N</answer>`` when the prompt or
     ``rollout.system_prompt`` asks for ``<answer>`` tags, else ``N``);
   * ``clinical_hpo``: ``<think>rationale</think><answer>LETTER</answer>``, the format its system prompt asks for
     (Clinical-R1's CRPO format); the rationale lists every finding the case shows (the red herring too) and names
     the correct disease, so that the ``clinical_objectives`` reward (:mod:`grove.rewards.clinical_objectives`)
     scores it 1 on accuracy, faithfulness (only shown findings are asserted), comprehensiveness (every shown
     finding is mentioned, by a name the reward's own matcher reads as that finding) and format. A finding all of
     whose names contain a candidate's name cannot be counted, since the reward masks candidate names (1 of the 2000
     training cases of ``examples/clinical_crpo.yaml``: comprehensiveness 0.5 there);
   * ``jsonl`` and ``hf_dataset`` (file tasks): the answer column as it is.

Any other task raises :class:`NoGoldCompletionError`, saying how to provide one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from grove.config import GroveConfig
from grove.config.reward_columns import reward_column_names
from grove.registry import REWARD_FUNCTIONS
from grove.rewards.hpo_mentions import MASK, PhraseIndex, find_mentions, load_lexicon, mask_names, tokens
from grove.tasks.task import Example, Task

__all__ = [
    "NoGoldCompletionError",
    "arithmetic_completion",
    "clinical_completion",
    "gold_completions",
]

GoldCompletion = Callable[[Example], str]


class NoGoldCompletionError(ValueError):
    """The task has no way to make a gold completion."""


def _answer_match_params(cfg: GroveConfig) -> Any | None:
    """The parameters of the ``answer_match`` reward that decides accuracy (the accuracy reward when it is one,
    else the first ``answer_match``); ``None`` without one."""
    matches = [r for r in cfg.rewards if r.id == "answer_match"]
    if not matches:
        return None
    accuracy = cfg.accuracy_reward_name
    chosen = next((r for r in matches if accuracy in reward_column_names(r)), matches[0])
    return chosen.validated(REWARD_FUNCTIONS)


def arithmetic_completion(example: Example, cfg: GroveConfig) -> str:
    """The result of an ``arithmetic`` example in the form the config's reward reads (see the module docstring)."""
    value = example.answer
    params = _answer_match_params(cfg)
    extract = getattr(params, "extract", "last_number")
    if extract == "answer_tag":
        return f"<{params.tag}>{value}</{params.tag}>"
    if extract == "boxed":
        return f"\\boxed{{{value}}}"
    if extract == "full":
        return value
    asks_for_tags = "<answer>" in example.prompt_text or "<answer>" in (cfg.rollout.system_prompt or "")
    return f"<answer>{value}</answer>" if asks_for_tags else value


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


def _answer_column(example: Example) -> str:
    return example.answer


def gold_completions(task: Task, cfg: GroveConfig) -> GoldCompletion:
    """The function giving each example of ``task`` (built from ``cfg.task``) its gold completion."""
    own = getattr(task, "demonstration", None)
    if callable(own):
        return own
    task_id = cfg.task.id
    if task_id == "arithmetic":
        return lambda example: arithmetic_completion(example, cfg)
    if task_id == "clinical_hpo":
        return clinical_completion
    if task_id in ("jsonl", "hf_dataset"):
        return _answer_column
    raise NoGoldCompletionError(
        f"task {task_id!r} has no gold completions to demonstrate: give the task object a method "
        "`demonstration(example) -> str` returning a correct completion of an example, or write the completions "
        "yourself as a prompt/completion JSONL file for grove sft. Tasks with built-in gold completions: arithmetic, "
        "clinical_hpo, jsonl, hf_dataset"
    )
