"""Tiny random reward models for the model-backed reward tests: a ``LlamaForSequenceClassification`` directory with
named heads, built with the tiny ChatML tokenizer of :mod:`grove.models.tiny` (seconds, offline)."""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import LlamaConfig, LlamaForSequenceClassification

from grove.models.tiny import build_tiny_tokenizer

HEADS = {0: "accuracy", 1: "faithfulness", 2: "style"}


def create_tiny_classifier_dir(
    path: str | Path,
    labels: dict[int, str] | None = None,
    *,
    num_labels: int | None = None,
    problem_type: str | None = None,
    max_position_embeddings: int = 256,
    seed: int = 0,
) -> Path:
    """Write a random ``LlamaForSequenceClassification`` (hidden 32, 2 layers) and its tokenizer to ``path``.

    ``labels``: ``config.id2label`` (default :data:`HEADS`); with ``num_labels`` instead, transformers' default
    ``LABEL_i`` names. The score head is drawn with std 1 so the heads' outputs differ visibly."""
    path = Path(path)
    tokenizer = build_tiny_tokenizer()
    extra: dict[str, object] = {"num_labels": num_labels} if num_labels is not None else {
        "id2label": dict(labels or HEADS), "label2id": {v: k for k, v in (labels or HEADS).items()},
    }
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=max_position_embeddings, pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id, bos_token_id=None, problem_type=problem_type, **extra,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForSequenceClassification(config)
        torch.nn.init.normal_(model.score.weight, std=1.0)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path
