"""A reward model's network: a transformers ``AutoModelForSequenceClassification`` on a causal LM's backbone.

:func:`load_sequence_classifier` loads any local causal-LM or sequence-classification directory (or an embedded
model's name) with ``num_labels`` = the number of heads: the decoder as it was trained, and a new score head
``Linear(hidden, heads)`` drawn from the global torch RNG (seeded by the run), whose output at the last non-pad
token is the sequence's scores (transformers pools the rightmost token that is not ``config.pad_token_id``, set
here from the tokenizer). The config carries what a reader of the model needs: ``id2label`` (the heads, in output
order), ``problem_type`` (``regression`` for several heads; a Bradley–Terry model's single ``reward`` head is
``regression`` too: it is a real-valued score) and ``grove_reward_model`` (the objective, the text format and, for
standardised targets, ``label_mean`` / ``label_std`` per head). :class:`SequenceScoreModule` is the training
module around it, so the strategies of :mod:`grove.distributed.strategies` wrap one module whose forward holds
every parameter use, and checkpoints key its weights as a policy's (``causal_lm.*``).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn
from transformers import (
    AutoModelForSequenceClassification,
    AutoTokenizer,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)
from transformers.utils import logging as hf_logging

from grove.models.merged_export import export_merged
from grove.models.model_files import work_offline
from grove.models.pretrained import (
    _LOAD_ERRORS,
    ModelLoadError,
    _check_config_json,
    _fix_tokenizer,
    _one_line,
    resolve_model_path,
)

__all__ = ["SequenceScoreModule", "classifier_config", "export_sequence_classifier", "load_sequence_classifier"]


def classifier_config(heads: Sequence[str], info: dict[str, Any], pad_token_id: int | None) -> dict[str, Any]:
    """The config attributes of a reward model with ``heads`` (``info``: its ``grove_reward_model`` entry;
    ``pad_token_id``: the token pooling skips)."""
    return {
        "pad_token_id": pad_token_id,
        "id2label": dict(enumerate(heads)),
        "label2id": {head: i for i, head in enumerate(heads)},
        "problem_type": "regression",
        "grove_reward_model": info,
    }


def load_sequence_classifier(
    name_or_path: str | os.PathLike, heads: Sequence[str], info: dict[str, Any], *, dtype: torch.dtype = torch.float32
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """``(model, tokenizer)``: the sequence classifier with one output per head on the backbone ``name_or_path``
    (see the module docstring); :class:`ModelLoadError` naming the directory when it cannot be loaded."""
    work_offline()
    path = resolve_model_path(name_or_path)
    _check_config_json(path)
    try:
        tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    except _LOAD_ERRORS as exc:
        raise ModelLoadError(f"cannot load the tokenizer of the model directory {path}: {_one_line(exc)}") from exc
    _fix_tokenizer(tokenizer)
    settings = classifier_config(heads, info, tokenizer.pad_token_id)
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # the new score head's "newly initialized" notice is the point, not news
    try:
        model = AutoModelForSequenceClassification.from_pretrained(
            path, dtype=dtype, local_files_only=True, num_labels=len(heads), ignore_mismatched_sizes=True,
            id2label=settings["id2label"], label2id=settings["label2id"], problem_type="regression",
            pad_token_id=tokenizer.pad_token_id,
        )
    except (*_LOAD_ERRORS, RuntimeError) as exc:
        if isinstance(exc, RuntimeError) and "mismatch" not in str(exc):
            raise
        raise ModelLoadError(
            f"cannot load {path} as a sequence classifier (AutoModelForSequenceClassification): {_one_line(exc)}; "
            "give model.name a causal-LM or sequence-classification model directory"
        ) from exc
    finally:
        hf_logging.set_verbosity(verbosity)
    model.config.grove_reward_model = info
    model.eval()
    return model, tokenizer


class SequenceScoreModule(nn.Module):
    """``forward(input_ids, attention_mask) -> scores [N, heads]`` (float32) of the classifier ``causal_lm`` (named
    like the policy's, so checkpoints key its weights the same way)."""

    def __init__(self, classifier: nn.Module) -> None:
        super().__init__()
        self.causal_lm = classifier

    @property
    def config(self):
        return self.causal_lm.config

    def forward(self, input_ids: Tensor, attention_mask: Tensor) -> Tensor:
        return self.causal_lm(input_ids=input_ids, attention_mask=attention_mask).logits.float()


def export_sequence_classifier(
    checkpoint_dir: str | os.PathLike, out_dir: str | os.PathLike, heads: Sequence[str], info: dict[str, Any],
    pad_token_id: int | None, retry_hint: str = "run the export again (or export to another directory)",
) -> Path:
    """``out_dir``: the checkpoint as a plain ``AutoModelForSequenceClassification`` directory (LoRA adapters and the
    trained score head merged) with its tokenizer and the reward model's config attributes; a failed write raises
    :class:`grove.infra.write_failures.RunWriteError` ending with ``retry_hint``."""
    return export_merged(
        checkpoint_dir, out_dir, auto_class=AutoModelForSequenceClassification,
        config_updates=classifier_config(heads, info, pad_token_id), retry_hint=retry_hint,
    )
