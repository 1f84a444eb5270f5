"""``judge``: a local causal language model scores each completion from the probability of a rubric's answers.

For each sample a judge prompt is written from a template (the rubric question, the task prompt and the
completion; the default is :data:`DEFAULT_TEMPLATE`, any template with ``{completion}`` and optionally
``{prompt}``, ``{rubric}``, ``{answers}`` may replace it), wrapped in the judge's chat template when it has one
(``format``), and the model runs ONE forward pass: no generation, no parsing. At the next position it reads the
probabilities ``p_i`` of the first token of each answer ``a_i`` and scores

    score = (Σ_i q_i v_i - min v) / (max v - min v),   q_i = p_i / Σ_j p_j

with ``v_i`` the answer's value (``answer_values``; by default the answers' own numbers for a graded scale such as
``["1", "2", "3", "4", "5"]``, else 1 for the first and 0 for the second of two answers). Two answers
``["Yes", "No"]`` give ``score = p(Yes) / (p(Yes) + p(No))``; a 1-5 scale gives the expected grade mapped to
[0, 1]. The probability of an answer is that of its first token: answers whose first tokens are the same token
cannot be told apart and are refused.

This is the "LLM-as-a-judge" of Zheng et al., "Judging LLM-as-a-Judge with MT-Bench and Chatbot Arena" (2023),
scored from the answer tokens' probabilities rather than a sampled verdict, as in G-Eval (Liu et al., 2023, the
probability-weighted score Σ p(s_i) s_i).

Batches are left-padded (with matching position ids) and only the last position's logits are computed. Scores are
cached per process by (prompt, completion) in an LRU dict of ``cache_size`` entries per judge configuration: a
completion seen again (the same answer sampled twice in a group, an evaluation repeated) costs no forward pass.
"""

from __future__ import annotations

import json
import math
import re
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import Field, field_validator, model_validator

from grove.registry import REWARD_FUNCTIONS
from grove.rewards.reward_model_loading import (
    ModelRewardParams,
    TruncationCount,
    cached_model,
    check_model_directory,
    context_length,
    model_config_json,
    pad_rows,
    prompt_text,
    resolve_device,
    tokenize_rows,
    torch_dtype,
    uses_chat_template,
)

__all__ = ["DEFAULT_TEMPLATE", "JudgeParams", "answer_token_ids", "judge", "judge_scores", "loaded_judge"]

DEFAULT_TEMPLATE = (
    "Read the task and the response, then answer the question about the response.\n\n"
    "Task:\n{prompt}\n\n"
    "Response:\n{completion}\n\n"
    "Question: {rubric}\n"
    "Answer with {answers} only."
)

_PLACEHOLDER = re.compile(r"\{(prompt|completion|rubric|answers)\}")

PAPER = (
    "Zheng et al., Judging LLM-as-a-Judge with MT-Bench and Chatbot Arena (arXiv:2306.05685); scored from answer "
    "probabilities as in G-Eval (Liu et al., arXiv:2303.16634)"
)


def _number(text: str) -> float | None:
    try:
        value = float(text.strip())
    except ValueError:
        return None
    return value if math.isfinite(value) else None


class JudgeParams(ModelRewardParams):
    """Parameters of the ``judge`` reward."""

    model: str = Field(
        description="The judge: a local causal language model directory, or an embedded model name "
        "('smollm2-135m').",
    )
    rubric: str = Field(min_length=1, description="The question the judge answers about each completion.")
    answers: list[str] = Field(
        default_factory=lambda: ["Yes", "No"],
        min_length=2,
        description="The answers whose probabilities score (their first tokens must differ): e.g. [Yes, No], or a "
        "graded scale [\"1\", \"2\", \"3\", \"4\", \"5\"].",
    )
    answer_values: list[float] | None = Field(
        None,
        description="The value of each answer (score = expected value over the answers' renormalised "
        "probabilities, mapped to [0, 1]); null: the answers' numbers for a numeric scale, else [1, 0] for two "
        "answers.",
    )
    template: str = Field(
        DEFAULT_TEMPLATE,
        description="The judge prompt: {completion} and optionally {prompt}, {rubric}, {answers} (the answers "
        "joined as 'Yes or No') are filled in; other text is kept as is.",
    )
    cache_size: int = Field(
        4096, ge=0, description="Scores kept per process, by (prompt, completion), least recently used out; 0: none."
    )
    batch_size: int = Field(8, ge=1, description="Judge prompts per forward pass.")

    @field_validator("model")
    @classmethod
    def _model_is_a_language_model(cls, value: str) -> str:
        from grove.models.pretrained import EMBEDDED_MODELS

        if value.lower() in EMBEDDED_MODELS and not Path(value).expanduser().is_dir():
            return value
        check_model_directory(value, f"the judge model (a local directory or one of {', '.join(EMBEDDED_MODELS)})")
        if (Path(value).expanduser() / "adapter_config.json").is_file():
            return value  # a LoRA checkpoint: load_policy merges it into its base
        architectures = model_config_json(value).get("architectures") or []
        if architectures and not any(str(a).endswith("ForCausalLM") for a in architectures):
            raise ValueError(
                f"{value!r} is a {', '.join(map(str, architectures))}, not a causal language model (its config.json "
                "architectures name no *ForCausalLM); the judge reads next-token probabilities. A sequence "
                "classifier is the sequence_classifier reward"
            )
        return value

    @field_validator("answers")
    @classmethod
    def _distinct_answers(cls, value: list[str]) -> list[str]:
        if not all(a for a in value) or len(set(value)) != len(value):
            raise ValueError(f"answers must be distinct non-empty strings, got {value}")
        return value

    @field_validator("template")
    @classmethod
    def _template_has_the_completion(cls, value: str) -> str:
        if "{completion}" not in value:
            raise ValueError("template must contain {completion} (and may contain {prompt}, {rubric}, {answers})")
        return value

    @model_validator(mode="after")
    def _values_score(self) -> JudgeParams:
        values = self.values()
        if len(values) != len(self.answers):
            raise ValueError(f"answer_values has {len(values)} values for {len(self.answers)} answers")
        if max(values) == min(values):
            raise ValueError("answer_values are all equal: every completion would score the same")
        return self

    def values(self) -> tuple[float, ...]:
        """The value of each answer (``answer_values``, else the answers' numbers, else 1 and 0 for two answers)."""
        if self.answer_values is not None:
            return tuple(float(v) for v in self.answer_values)
        numbers = [_number(a) for a in self.answers]
        if all(n is not None for n in numbers):
            return tuple(numbers)  # type: ignore[arg-type]
        if len(self.answers) == 2:
            return (1.0, 0.0)
        raise ValueError(
            f"answers {self.answers} are neither two answers (first = good) nor numbers; give answer_values, one "
            "value per answer"
        )

    def model_directory(self) -> Path:
        from grove.models.pretrained import resolve_model_path

        return resolve_model_path(self.model)

    def judge_prompt(self, prompt: Any, completion: str) -> str:
        """The template filled in for one sample."""
        answers = ", ".join(self.answers[:-1]) + f" or {self.answers[-1]}"
        fill = {"prompt": prompt_text(prompt), "completion": completion, "rubric": self.rubric, "answers": answers}
        return _PLACEHOLDER.sub(lambda m: fill[m.group(1)], self.template)


@dataclass
class LoadedJudge:
    """A judge model loaded in this process: the model on its device, its tokenizer (left padding), the forward
    passes it ran, its truncation counts and its score caches (one LRU dict per judge configuration)."""

    model: Any
    tokenizer: Any
    device: Any
    forwards: int = 0
    truncations: dict[tuple[int, str], TruncationCount] = field(default_factory=dict)
    caches: dict[str, OrderedDict[tuple[str, str], float]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)


def _load(model: str, device: Any, precision: str) -> LoadedJudge:
    from grove.models.pretrained import load_policy

    policy, tokenizer = load_policy(model, dtype=torch_dtype(precision))  # offline; pad token set, left padding
    return LoadedJudge(policy.to(device), tokenizer, device)


def loaded_judge(params: JudgeParams) -> LoadedJudge:
    """The judge model of ``params``, loaded once per process (per model, device and precision)."""
    device = resolve_device(params.device)
    return cached_model(
        ("judge", params.model, str(device), params.precision), lambda: _load(params.model, device, params.precision)
    )


def answer_token_ids(tokenizer: Any, answers: Sequence[str]) -> list[int]:
    """The first token of each answer; ``ValueError`` when an answer has no token or two share their first."""
    ids: list[int] = []
    for answer in answers:
        tokens = tokenizer.encode(answer, add_special_tokens=False)
        if not tokens:
            raise ValueError(f"judge: the answer {answer!r} encodes to no token")
        if tokens[0] in ids:
            other = answers[ids.index(tokens[0])]
            raise ValueError(
                f"judge: the answers {other!r} and {answer!r} both begin with the token "
                f"{tokenizer.convert_ids_to_tokens(tokens[0])!r} (id {tokens[0]}) of the judge's tokenizer, so their "
                "probabilities cannot be told apart at one position; choose answers whose first tokens differ"
            )
        ids.append(tokens[0])
    return ids


def _score_uncached(state: LoadedJudge, params: JudgeParams, samples: Sequence[tuple[Any, str]]) -> list[float]:
    import torch

    answer_ids = torch.tensor(answer_token_ids(state.tokenizer, params.answers))
    values = torch.tensor(params.values(), dtype=torch.float32)
    chat = uses_chat_template(state.tokenizer, params.format, "judge")
    texts = [params.judge_prompt(p, c) for p, c in samples]
    if chat:
        texts = [
            state.tokenizer.apply_chat_template([{"role": "user", "content": t}], tokenize=False,
                                                add_generation_prompt=True)
            for t in texts
        ]
    limit = context_length(state.tokenizer, state.model.config, params.max_length)
    rows, cut = tokenize_rows(
        state.tokenizer, texts, add_special_tokens=not chat, max_length=limit, side=params.truncation_side
    )
    key = (limit, params.truncation_side)
    if key not in state.truncations:
        state.truncations[key] = TruncationCount(f"judge {params.model}", limit, params.truncation_side)
    state.truncations[key].add(cut, len(rows))
    scores = torch.empty(len(rows), dtype=torch.float32)
    order = sorted(range(len(rows)), key=lambda i: len(rows[i]))
    with torch.inference_mode():
        for start in range(0, len(order), params.batch_size):
            chunk = order[start : start + params.batch_size]
            ids, mask = pad_rows([rows[i] for i in chunk], state.tokenizer.pad_token_id, "left")
            positions = (mask.cumsum(-1) - 1).clamp(min=0)
            logits = state.model(
                input_ids=ids.to(state.device), attention_mask=mask.to(state.device),
                position_ids=positions.to(state.device), logits_to_keep=1, use_cache=False,
            ).logits[:, -1, :].float().cpu()
            state.forwards += 1
            # q_i = p_i / Σ_j p_j: a softmax over the answers' logits (the full softmax's normaliser cancels)
            q = torch.softmax(logits[:, answer_ids], dim=-1)
            scores[torch.tensor(chunk)] = (q @ values - values.min()) / (values.max() - values.min())
    return scores.tolist()


def judge_scores(params: JudgeParams, prompts: Sequence[Any], completions: Sequence[str]) -> list[float]:
    """The judge's score in [0, 1] of each (prompt, completion), from the cache where it holds it."""
    state = loaded_judge(params)
    keys = [(p if isinstance(p, str) else json.dumps(p, sort_keys=True), c) for p, c in zip(prompts, completions,
                                                                                          strict=True)]
    with state.lock:
        cache = state.caches.setdefault(params.model_dump_json(), OrderedDict())
        missing = list(dict.fromkeys(k for k in keys if k not in cache))  # distinct, in order
        where = {k: i for i, k in enumerate(keys)}
        fresh = dict(zip(missing, _score_uncached(
            state, params, [(prompts[where[k]], completions[where[k]]) for k in missing]
        ), strict=True)) if missing else {}
        out = []
        for k in keys:
            if k in fresh:
                out.append(fresh[k])
            else:
                cache.move_to_end(k)
                out.append(cache[k])
        for k, v in fresh.items():
            cache[k] = v
        while len(cache) > params.cache_size:
            cache.popitem(last=False)
    return out


@REWARD_FUNCTIONS.register(
    "judge",
    params=JudgeParams,
    paper=PAPER,
    summary="a local causal LM answers a rubric question about each completion; score = probability-weighted "
    "answer value in [0, 1] from one forward pass",
)
def judge(
    prompts: Sequence[Any], completions: Sequence[str], *, params: JudgeParams, **columns: Any
) -> list[float | None]:
    """The judge's score of each completion: p(Yes) / (p(Yes) + p(No)) for the default answers."""
    if not completions:
        return []
    return list(judge_scores(params, prompts, completions))
