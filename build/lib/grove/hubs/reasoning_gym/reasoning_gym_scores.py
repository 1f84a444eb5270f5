"""``reasoning_gym``: reasoning-gym's own verifier, ``score_answer(answer, entry)``, as a reward.

For each sample of the ``reasoning_gym`` task the reward

1. extracts the model's answer from the completion (``extract``):

   * ``answer_tag`` (default, reasoning-gym's convention): ``reasoning_gym.utils.extract_answer``, the content of
     the last ``<answer>...</answer>`` block (``tag`` names the tag), stripped;
   * ``last_line``: the last non-blank line, stripped;
   * ``last_number``, ``boxed``, ``full``: as in :func:`grove.rewards.extract.extract_answer` (the last number,
     the last ``\\boxed{...}``, the whole completion);

2. scores it with the ``score_answer`` method of the entry's source dataset (``reasoning_gym_dataset`` column),
   built with that dataset's config (``reasoning_gym_config``), against the generated entry
   (``reasoning_gym_entry``): a value in [0, 1], 1.0 for a correct answer. Some datasets give partial credit
   (the default scorer gives ``len(gold) / len(answer)`` when the gold answer is inside a longer answer; some
   give 0.01 to a well-formed wrong answer); held-out accuracy counts only 1.0 as correct.

A completion with no extractable answer (or an empty one) scores 0.0 without calling the scorer: it counts as
wrong. A sample without an entry (``reasoning_gym_entry`` is null) gets ``None`` (the reward does not apply).
Some reasoning-gym scorers raise on answers they cannot parse (``prime_factorization``: ``ValueError`` on text;
``boxnet``: ``TypeError`` on a bare number); ``on_scorer_error: zero`` (default) scores such an answer 0.0 and logs
the first such error of each dataset once (logger ``grove.rewards``), ``raise`` lets the exception through (then
the reward's ``on_error`` decides). The scoring datasets are built once per dataset and config and cached.
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Sequence
from typing import Any, Literal

from pydantic import ConfigDict, Field

from grove.registry import REWARD_FUNCTIONS
from grove.rewards.extract import AnswerTagParams, extract_answer
from grove.rewards.values import dataset_column

log = logging.getLogger("grove.rewards")

INSTALL_HINT = "pip install reasoning-gym==0.1.25"

ReasoningGymExtract = Literal["answer_tag", "last_line", "last_number", "boxed", "full"]

_errors_logged: set[str] = set()


class ReasoningGymScoreParams(AnswerTagParams):
    """Parameters of the ``reasoning_gym`` reward."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    extract: ReasoningGymExtract = Field(
        "answer_tag",
        description="How to extract the answer: 'answer_tag' (reasoning-gym's extract_answer: the last "
        "<tag>...</tag>), 'last_line' (the last non-blank line), 'last_number', 'boxed' (last \\boxed{...}) or "
        "'full' (the whole completion).",
    )
    on_scorer_error: Literal["zero", "raise"] = Field(
        "zero",
        description="When the dataset's score_answer raises on an extracted answer: 'zero' scores it 0.0 (logged "
        "once per dataset), 'raise' fails the reward (its on_error decides).",
    )


def _reasoning_gym() -> Any:
    try:
        import reasoning_gym
    except ImportError as exc:
        raise ImportError(f"the reasoning_gym reward needs the 'reasoning-gym' package: {INSTALL_HINT}") from exc
    return reasoning_gym


def extract_model_answer(completion: str, params: ReasoningGymScoreParams) -> str | None:
    """The answer in ``completion`` per ``params.extract`` (see the module docstring); ``None`` when there is none
    or it is empty."""
    if params.extract == "answer_tag":
        _reasoning_gym()
        from reasoning_gym.utils import extract_answer as reasoning_gym_extract_answer

        answer = reasoning_gym_extract_answer(completion, tag_name=params.tag)
    elif params.extract == "last_line":
        lines = [line.strip() for line in completion.splitlines() if line.strip()]
        answer = lines[-1] if lines else None
    else:
        answer = extract_answer(completion, params.extract)
    return answer or None


@functools.lru_cache(maxsize=64)
def scoring_dataset(name: str, config_json: str) -> Any:
    """The reasoning-gym dataset ``name`` built with ``config`` (JSON), whose ``score_answer`` scores its entries;
    cached per dataset and config (its seed and size do not matter for scoring)."""
    return _reasoning_gym().create_dataset(name, **json.loads(config_json), seed=0, size=1)


def score_sample(
    answer: str, entry: dict[str, Any], dataset: str, config: dict[str, Any] | None, params: ReasoningGymScoreParams
) -> float:
    """``score_answer(answer, entry)`` of ``dataset`` built with ``config``; a scorer exception gives 0.0 under
    ``on_scorer_error: zero`` and propagates under ``raise``."""
    scorer = scoring_dataset(dataset, json.dumps(config or {}, sort_keys=True))
    try:
        score = scorer.score_answer(answer, entry)
    except Exception as exc:
        if params.on_scorer_error == "raise":
            raise
        if dataset not in _errors_logged:
            _errors_logged.add(dataset)
            log.warning(
                "reasoning_gym reward: %s's score_answer raised %r on the answer %r; scored 0.0 "
                "(on_scorer_error: zero; later errors of this dataset are not logged)", dataset, exc, answer[:80]
            )
        return 0.0
    return 0.0 if score is None else float(score)


@REWARD_FUNCTIONS.register(
    "reasoning_gym",
    params=ReasoningGymScoreParams,
)
def reasoning_gym_score(
    prompts: Sequence[Any], completions: Sequence[str], *, params: ReasoningGymScoreParams, **columns: Any
) -> list[float | None]:
    """Per sample, the entry's dataset's ``score_answer`` of the extracted answer (0..1); 0.0 without an answer,
    ``None`` without an entry (see the module docstring)."""
    n = len(completions)
    source = "task reasoning_gym"
    entries = dataset_column(columns, "reasoning_gym_entry", n, reward="reasoning_gym", source=source)
    datasets = dataset_column(columns, "reasoning_gym_dataset", n, reward="reasoning_gym", source=source)
    configs = dataset_column(columns, "reasoning_gym_config", n, reward="reasoning_gym", required=False)
    out: list[float | None] = []
    for completion, entry, dataset, config in zip(completions, entries, datasets, configs, strict=True):
        if entry is None:
            out.append(None)
            continue
        answer = extract_model_answer(completion, params)
        out.append(0.0 if answer is None else score_sample(answer, entry, str(dataset), config, params))
    return out
