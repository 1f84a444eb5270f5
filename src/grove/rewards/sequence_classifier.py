"""``sequence_classifier``: a local 🤗 ``AutoModelForSequenceClassification`` directory as a reward.

Each sample (prompt, completion) becomes one input to the model (its tokenizer's chat template applied to
``[user prompt, assistant completion]``, or ``prompt + separator + completion`` as plain text), the model's output
heads are read at its last token (transformers' own pooling) and, after an optional transform, become the reward:

* a model with one output head (or ``heads`` naming one) is a single-objective reward: one number per sample,
  in the column named by the reward's ``name``;
* a model with several heads scores one *objective per head* (a dict per sample), named from ``config.id2label``
  (``head_i`` for transformers' default ``LABEL_i``), so they feed the multi-objective reward combiners
  (``docs/multi-objective.md``). ``heads`` selects a subset (a list of head names) or selects and renames
  (a mapping ``{head: objective name}``).

A model exported by ``grove rm`` is read as it was trained: the same text (``format: auto``), its standardised
outputs mapped back to label units (``label_units``); ``system_prompt`` puts back the system message the policy's
prompts carried. ``transform``: ``none`` (the raw outputs: a regression reward model, such as what ``grove rm``
exports), ``sigmoid`` (each head's probability in a multi-label classifier) or ``softmax`` (over all the model's
heads, before any selection: ``heads: [positive]`` of a two-class classifier is p(positive)). Inputs longer than
``max_length`` are cut (``truncation_side``), counted and logged. The model is loaded at the first call in a process and kept
(:mod:`grove.rewards.reward_model_loading`); inference is batched (``batch_size``, inputs sorted by length)
under ``torch.inference_mode``.

Reward modelling from preferences: Ouyang et al., "Training language models to follow instructions with human
feedback" (InstructGPT, 2022), §3.5; the scalar head read at the last token is transformers'
``*ForSequenceClassification``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

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
    prompt_messages,
    prompt_text,
    resolve_device,
    reward_model_text,
    tokenize_rows,
    torch_dtype,
    uses_chat_template,
    with_system_prompt,
)

__all__ = ["SequenceClassifierParams", "head_names", "loaded_classifier", "sequence_classifier"]

_DEFAULT_LABEL = re.compile(r"LABEL_\d+")

INSTRUCTGPT = "Ouyang et al., Training language models to follow instructions with human feedback (arXiv:2203.02155)"


def head_names(config: dict[str, Any]) -> tuple[str, ...]:
    """The names of a classifier's output heads, from its ``config.json``: ``id2label`` in index order, where
    transformers' default ``LABEL_i`` becomes ``head_i``; without ``id2label``, ``head_0 .. head_{num_labels-1}``."""
    labels = config.get("id2label")
    if isinstance(labels, dict) and labels:
        ordered = sorted(((int(k), str(v)) for k, v in labels.items()), key=lambda kv: kv[0])
        names = tuple(f"head_{i}" if _DEFAULT_LABEL.fullmatch(v) else v for i, v in ordered)
    else:
        names = tuple(f"head_{i}" for i in range(int(config.get("num_labels", 2))))
    if len(set(names)) != len(names):
        raise ValueError(f"its config.json id2label repeats a head name: {list(names)}")
    return names


def _check_is_classifier(config: dict[str, Any], path: str) -> None:
    architectures = config.get("architectures") or []
    if architectures and not any(str(a).endswith("ForSequenceClassification") for a in architectures):
        raise ValueError(
            f"{path!r} is a {', '.join(map(str, architectures))}, not a sequence classifier (its config.json "
            "architectures name no *ForSequenceClassification); give a directory saved from "
            "AutoModelForSequenceClassification (e.g. the model/ of a `grove rm` run), or use the judge reward "
            "for a causal language model"
        )


class SequenceClassifierParams(ModelRewardParams):
    """Parameters of the ``sequence_classifier`` reward."""

    model: str = Field(
        description="A local transformers AutoModelForSequenceClassification directory (config.json, weights, "
        "tokenizer), e.g. the model/ directory of a `grove rm` run.",
    )
    heads: list[str] | dict[str, str] | None = Field(
        None,
        description="Which output heads score: null = every head (one objective each; a one-head model is a "
        "single-objective reward); a list of head names selects those (one name: a single-objective reward); a "
        "mapping {head: objective name} selects and renames. Head names: config.id2label, or head_i (also for "
        "transformers' default LABEL_i).",
    )
    transform: Literal["none", "sigmoid", "softmax"] = Field(
        "none",
        description="Applied to the outputs before heads are selected: 'none' (raw values, e.g. a regression "
        "reward model), 'sigmoid' (each head's probability), 'softmax' (over all heads: class probabilities).",
    )
    separator: str = Field(
        "\n", description="format plain: the text between the prompt and the completion."
    )
    system_prompt: str | None = Field(
        None,
        description="A system message put before each prompt that has none: the policy's rollout.system_prompt, when "
        "the reward model was trained on conversations that carried it (a `grove rm` model trained on rows whose "
        "prompts open with that system message). null: the prompts as the task gives them.",
    )
    label_units: bool = Field(
        True,
        description="A `grove rm` model trained on standardised targets outputs standardised scores; true maps each "
        "head back to its label units (× label_std + label_mean, from its config.json); false keeps the "
        "standardised outputs. Other models are unaffected.",
    )

    @field_validator("model")
    @classmethod
    def _model_is_a_classifier(cls, value: str) -> str:
        check_model_directory(value, "the reward model")
        _check_is_classifier(model_config_json(value), value)
        return value

    @model_validator(mode="after")
    def _heads_exist(self) -> SequenceClassifierParams:
        self.selected_heads()
        return self

    def head_names(self) -> tuple[str, ...]:
        """Every output head of the model, by name (:func:`head_names`)."""
        return head_names(model_config_json(self.model))

    def selected_heads(self) -> tuple[tuple[int, str], ...]:
        """``(head index, objective name)`` of each head that scores, in order."""
        names = self.head_names()
        index = {name: i for i, name in enumerate(names)} | {f"head_{i}": i for i in range(len(names))}
        if self.heads is None:
            return tuple(enumerate(names))
        chosen = list(self.heads.items()) if isinstance(self.heads, dict) else [(h, h) for h in self.heads]
        if not chosen:
            raise ValueError("heads: name at least one head, or null for all")
        unknown = [h for h, _ in chosen if h not in index]
        if unknown:
            raise ValueError(f"heads: {unknown} are not heads of the model; its heads: {', '.join(names)}")
        targets = [t for _, t in chosen]
        if len(set(targets)) != len(targets) or not all(targets):
            raise ValueError(f"heads: the objective names must be distinct and non-empty, got {targets}")
        return tuple((index[h], t) for h, t in chosen)

    def objective_names(self) -> tuple[str, ...]:
        """One objective per selected head when there are several; none (a single-objective reward) for one."""
        selected = self.selected_heads()
        return tuple(name for _, name in selected) if len(selected) > 1 else ()


def grove_training(model: Any) -> dict[str, Any]:
    """The ``grove_reward_model`` entry of a loaded model exported by ``grove rm`` (its objective, text format and
    label statistics), else ``{}``."""
    info = getattr(model.config, "grove_reward_model", None)
    return info if isinstance(info, dict) else {}


@dataclass
class LoadedClassifier:
    """A reward model loaded in this process: the model on its device, its tokenizer, how many forward passes it
    ran and its truncation counts (per ``max_length`` and side)."""

    model: Any
    tokenizer: Any
    device: Any
    forwards: int = 0
    truncations: dict[tuple[int, str], TruncationCount] = field(default_factory=dict)


def _load(path: str, device: Any, precision: str) -> LoadedClassifier:
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from grove.models.model_files import reading_model_files, work_offline

    work_offline()
    with reading_model_files(path, "the sequence_classifier reward model"):
        tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
        model, info = AutoModelForSequenceClassification.from_pretrained(
            path, dtype=torch_dtype(precision), local_files_only=True, output_loading_info=True  # type: ignore[arg-type]
        )
    missing = sorted(info.get("missing_keys") or ())
    if missing:
        raise ValueError(
            f"the reward model {path} has no trained classification head (weights missing: {', '.join(missing[:4])}); "
            "it is not a sequence classifier: give a directory saved from AutoModelForSequenceClassification"
        )
    if tokenizer.pad_token_id is None:
        if tokenizer.eos_token_id is None:
            raise ValueError(f"the reward model's tokenizer ({path}) has neither a pad nor an eos token; set one")
        tokenizer.pad_token = tokenizer.eos_token
    model.config.pad_token_id = tokenizer.pad_token_id  # what the model's last-token pooling looks for
    model.eval()
    return LoadedClassifier(model.to(device), tokenizer, device)


def loaded_classifier(params: SequenceClassifierParams) -> LoadedClassifier:
    """The reward model of ``params``, loaded once per process (per directory, device and precision)."""
    path = str(params.model_directory())
    device = resolve_device(params.device)
    return cached_model(
        ("sequence_classifier", path, str(device), params.precision), lambda: _load(path, device, params.precision)
    )


def _inputs(state: LoadedClassifier, params: SequenceClassifierParams, prompts: Sequence[Any],
            completions: Sequence[str]) -> tuple[list[str], bool]:
    """The text of each sample and whether the tokenizer adds its special tokens (plain text) or not (the chat
    template writes them). A ``grove rm`` model (``format: auto``) reads the text it was trained on
    (:func:`grove.rewards.reward_model_loading.reward_model_text`)."""
    prompts = [with_system_prompt(p, params.system_prompt) for p in prompts]
    if params.format == "auto" and grove_training(state.model):
        return [reward_model_text(state.tokenizer, p, c) for p, c in zip(prompts, completions, strict=True)], False
    if uses_chat_template(state.tokenizer, params.format, "sequence_classifier"):
        texts = [
            state.tokenizer.apply_chat_template(
                [*prompt_messages(p), {"role": "assistant", "content": c}], tokenize=False
            )
            for p, c in zip(prompts, completions, strict=True)
        ]
        return texts, False
    return [prompt_text(p) + params.separator + c for p, c in zip(prompts, completions, strict=True)], True


def classifier_outputs(
    params: SequenceClassifierParams, prompts: Sequence[Any], completions: Sequence[str]
) -> Any:
    """``[N, heads]`` float32: every head's output for each sample, after ``params.transform``."""
    import torch

    state = loaded_classifier(params)
    texts, special = _inputs(state, params, prompts, completions)
    limit = context_length(state.tokenizer, state.model.config, params.max_length)
    rows, cut = tokenize_rows(
        state.tokenizer, texts, add_special_tokens=special, max_length=limit, side=params.truncation_side
    )
    key = (limit, params.truncation_side)
    if key not in state.truncations:
        state.truncations[key] = TruncationCount(f"sequence_classifier {params.model}", limit, params.truncation_side)
    state.truncations[key].add(cut, len(rows))
    out = torch.empty(len(rows), state.model.config.num_labels, dtype=torch.float32)
    order = sorted(range(len(rows)), key=lambda i: len(rows[i]))  # similar lengths together: less padding
    with torch.inference_mode():
        for start in range(0, len(order), params.batch_size):
            chunk = order[start : start + params.batch_size]
            ids, mask = pad_rows([rows[i] for i in chunk], state.tokenizer.pad_token_id, "right")
            logits = state.model(input_ids=ids.to(state.device), attention_mask=mask.to(state.device)).logits
            state.forwards += 1
            out[torch.tensor(chunk)] = logits.float().cpu()
    statistics = grove_training(state.model)
    if params.label_units and "label_mean" in statistics and "label_std" in statistics:
        out = out * torch.tensor(statistics["label_std"]) + torch.tensor(statistics["label_mean"])
    if params.transform == "sigmoid":
        return torch.sigmoid(out)
    if params.transform == "softmax":
        return torch.softmax(out, dim=-1)
    return out


@REWARD_FUNCTIONS.register(
    "sequence_classifier",
    params=SequenceClassifierParams,
    paper=INSTRUCTGPT,
    summary="a local AutoModelForSequenceClassification as the reward: one objective per output head "
    "(config.id2label), optional sigmoid/softmax",
)
def sequence_classifier(
    prompts: Sequence[Any], completions: Sequence[str], *, params: SequenceClassifierParams, **columns: Any
) -> list[float | None] | list[dict[str, float | None]]:
    """The reward model's selected heads on each (prompt, completion): a number per sample (one head) or a dict
    ``{objective: value}`` per sample (several)."""
    if not completions:
        return []
    selected = params.selected_heads()
    values = classifier_outputs(params, prompts, completions)[:, [i for i, _ in selected]].tolist()
    if len(selected) == 1:
        return [row[0] for row in values]
    names = [name for _, name in selected]
    return [dict(zip(names, row, strict=True)) for row in values]
